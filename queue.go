package job

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/jobkit/job/store"
)

// ScheduleJob stores a new instance of the job of that kind, due now unless
// opts say otherwise, and returns it as data (an InstanceInfo, as a
// lookup does: only the attempt's Instance logs). The kind is the job registered with the manager or,
// when none is, the kind's stored definition (see PutDefinition; read
// again after DefinitionCacheTTL), so a manager schedules kinds it has no
// executor for; otherwise it is an error wrapping ErrUnknownKind and
// nothing is stored. The arguments are checked against the executor's
// parameters before anything is stored when the job is registered here;
// for a kind known by its definition they are stored as JSON and checked
// where they run (an instance whose arguments do not fit the executor
// there ends Terminated with the error, never retried). A definition's
// unique policy applies as if given WithUniqueKey. When a unique key is
// held by another instance, it returns that instance and an error
// wrapping ErrDuplicate.
//
// Concurrent calls share store round trips: calls made while another's
// write is in flight go to the store together in one batch when it
// returns (see enqueuer), and a call made while none is in flight goes
// straight through. A call whose ctx ends while it waits for its batch
// returns ctx's error and stores nothing.
//
// ScheduleJob returns when ctx ends, whatever the store is doing. A call
// cut short by ctx, a timeout or a broken connection after its write was
// sent may still have stored the instance: its error wraps
// ErrOutcomeUnknown (and the cause, such as context.DeadlineExceeded) and
// says so. To retry it safely, give the call WithIdempotencyKey and repeat
// it with the same key; the repeat returns the instance stored first
// instead of storing another. An error that does not wrap
// ErrOutcomeUnknown stored nothing (ErrDuplicate aside, which returns the
// holder).
func (m *Manager) ScheduleJob(ctx context.Context, kind string, opts ...ScheduleOption) (*InstanceInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job: schedule %q: %w", kind, err)
	}
	j, err := m.jobFor(ctx, kind)
	if err != nil {
		return nil, fmt.Errorf("job: schedule %q: %w", kind, err)
	}
	var c scheduleConfig
	if err := c.apply(opts); err != nil {
		return nil, fmt.Errorf("job: schedule %q: %w", kind, err)
	}
	if err := c.workflowOnly(); err != nil {
		return nil, fmt.Errorf("job: schedule %q: %w", kind, err)
	}
	rec, err := m.newRecord(j, &c)
	if err != nil {
		return nil, fmt.Errorf("job: schedule %q: %w", kind, err)
	}
	if c.shards > 0 {
		return m.schedule(ctx, rec, func(ctx context.Context) (*InstanceInfo, error) { return m.enqueueSharded(ctx, j, rec, &c) })
	}
	return m.schedule(ctx, rec, func(ctx context.Context) (*InstanceInfo, error) { return m.enqueueNew(ctx, kind, j, rec, &c) })
}

// enqueueNew stores rec, the new instance of j that a ScheduleJob of kind
// with options c built, and returns what ScheduleJob returns.
func (m *Manager) enqueueNew(ctx context.Context, kind string, j *Job, rec *store.Instance, c *scheduleConfig) (*InstanceInfo, error) {
	res, err := m.enq.enqueue(ctx, rec)
	if err != nil {
		return nil, scheduleError(strconv.Quote(kind), c.idemKey, err)
	}
	inst, stored, err := m.scheduled(ctx, rec, res, c.idemKey)
	if stored {
		m.wakeFor(rec.Queue)
		m.recordChanged(j, rec, store.Scheduled)
	}
	return inst, err
}

// scheduled turns the store's result for rec into what ScheduleJob
// returns: the new instance; the holder and an error wrapping
// ErrDuplicate; the instance stored first when an idempotency key
// repeats; or the store's error for rec. stored reports a new instance:
// the caller then wakes local workers and calls the state-change handler.
func (m *Manager) scheduled(ctx context.Context, rec *store.Instance, res store.EnqueueResult, idemKey string) (inst *InstanceInfo, stored bool, err error) {
	kind := rec.Kind
	if res.Err != nil {
		if errors.Is(res.Err, store.ErrDuplicate) {
			holder, lerr := m.GetInstance(ctx, res.ID)
			if lerr != nil {
				return nil, false, fmt.Errorf("job: schedule %q: %w (and looking up holder %s: %v)", kind, res.Err, res.ID, lerr)
			}
			until := ""
			if !holder.UniqueUntil.IsZero() {
				until = " until " + holder.UniqueUntil.UTC().Format(time.RFC3339)
			}
			return holder, false, &readerError{fmt.Sprintf("job: schedule %q: unique key %q is held by instance %s%s; use another unique key, or wait until it is released", kind, userUniqueKey(rec.UniqueKey), res.ID, until), res.Err}
		}
		return nil, false, fmt.Errorf("job: schedule %q: %w", kind, res.Err)
	}
	if res.Existed {
		// A repeat with an idempotency key: the instance stored first.
		first, err := m.GetInstance(ctx, res.ID)
		if err != nil {
			return nil, false, fmt.Errorf("job: schedule %q: instance %s is stored already (idempotency key %q), and looking it up: %w", kind, res.ID, idemKey, err)
		}
		return first, false, nil
	}
	rec.State, rec.Seq, rec.UpdatedAt = store.Scheduled, res.Seq, rec.CreatedAt
	return newInfo(rec), true, nil
}

// newRecord builds the stored record of a new instance of j.
func (m *Manager) newRecord(j *Job, c *scheduleConfig) (*store.Instance, error) {
	var args []byte
	var err error
	if j.exec != nil {
		args, err = j.exec.encodeArgs(c.args)
	} else { // a kind known here only by its stored definition
		args, err = encodeJSONArgs(c.args)
	}
	if err != nil {
		return nil, err
	}
	var id uuid.UUID
	if c.idRand != nil {
		id, err = uuid.NewV7FromReader(c.idRand)
	} else {
		id, err = uuid.NewV7()
	}
	if err != nil {
		return nil, fmt.Errorf("job: new instance ID: %w", err)
	}
	if c.idemKey != "" {
		id = idempotentID(j.kind, c.idemKey)
	}
	now := m.clock.Now()
	rec := &store.Instance{
		ID:         id.String(),
		Kind:       j.kind,
		Queue:      j.queue,
		Args:       args,
		Priority:   int(j.priority),
		MaxRetries: j.maxRetries,
		Timeout:    j.timeout,
		CreatedAt:  now,
		RunAt:      now,
		Labels:     j.labels,
		Metadata:   maps.Clone(c.metadata),
	}
	if p := c.policy; p.queue != nil {
		rec.Queue = *p.queue
	}
	if p := c.policy; p.priority != nil {
		rec.Priority = int(*p.priority)
	}
	if p := c.policy; p.maxRetries != nil {
		rec.MaxRetries = *p.maxRetries
	}
	if p := c.policy; p.timeout != nil {
		rec.Timeout = *p.timeout
	}
	switch {
	case !c.runAt.IsZero():
		rec.RunAt = c.runAt
	case c.after > 0:
		rec.RunAt = now.Add(c.after)
	}
	rec.RunAt = rec.RunAt.Add(jitter(c.jitter))
	switch {
	case c.uniqueKey != "":
		ttl := c.uniqueTTL
		if ttl == 0 {
			ttl = DefaultUniqueTTL
			if j.unique != nil {
				ttl = j.unique.TTL
			}
		}
		rec.UniqueKey, rec.UniqueUntil = userKeyPrefix+c.uniqueKey, now.Add(ttl)
	case j.unique != nil && j.unique.By == store.UniqueByArgs:
		rec.UniqueKey, rec.UniqueUntil = userKeyPrefix+argsUniqueKey(j.kind, args), now.Add(j.unique.TTL)
	}
	if c.tickKey != "" {
		rec.UniqueKey, rec.UniqueUntil = c.tickKey, c.tickHoldTil
	}
	if err := j.setLimitKey(rec, c.limitKey); err != nil {
		return nil, err
	}
	return rec, nil
}

// CancelInstance cancels the instance with that ID. A pending instance is
// Canceled at once; a running one has its context canceled (at once when it
// runs on this manager, at the owner's next lease renewal otherwise) and
// ends Canceled. It ends Canceled too, with no further attempt, when the
// attempt fails or is handed back before its owner sees the request (the
// failure's error is kept), or when the owner's lease lapses first (the
// rescuer ends it). An attempt that completes, or fails for good, first
// keeps that outcome. It returns ErrNotFound or ErrFinished when there is
// nothing to cancel.
func (m *Manager) CancelInstance(ctx context.Context, id string) (*InstanceInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job: cancel %s: %w", id, err)
	}
	rec, err := m.store.Cancel(ctx, &store.CancelParams{ID: id, Now: m.clock.Now(), Node: m.node})
	if err != nil {
		return nil, m.adminError(ctx, "cancel", id, err)
	}
	if rec.State == store.Processing {
		if a := m.active.get(id); a != nil && a.rec.Attempt == rec.Attempt {
			a.cancel(ErrCanceled)
		}
	} else if j, ok := m.reg.get(rec.Kind); ok {
		m.recordChanged(j, rec, rec.State)
	}
	if rec.Task != nil && rec.State.Final() {
		m.workflowsEnded(ctx, []*store.Instance{rec}) // its dependents look, and follow their policy
	}
	if err := m.canceledSharded(ctx, rec); err != nil {
		return newInfo(rec), fmt.Errorf("job: cancel %s: %w", id, err)
	}
	return newInfo(rec), nil
}

package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jobkit/job/store"
)

// Admin holds the calls of an operator, a server or a console, after
// asynq's Inspector: stored definitions, triggers and their fire times,
// calendars, queues (list, pause, counts, lag), the kinds and nodes the
// store knows, the bulk operations and Prune. Manager keeps what an
// embedding program calls every day. An Admin is a view of its manager
// (the same store, namespace, clock and caches): get it with
// Manager.Admin, as often as convenient; it needs no Stop.
type Admin struct {
	m *Manager
}

// Admin returns the administrative calls of m.
func (m *Manager) Admin() *Admin { return &Admin{m: m} }

// ErrNotFinished: the instance is still Scheduled or Processing, so it
// cannot be retried; cancel it first or wait for it to finish.
var ErrNotFinished = store.ErrNotFinished

// DefaultBulkBatch is how many instances a bulk operation (CancelInstances,
// RetryInstances, DeleteInstances) looks up and changes per round.
const DefaultBulkBatch = 500

// maxBulkBatch bounds WithBulkBatch, so one store call stays short.
const maxBulkBatch = 10000

// AdminOption configures RetryInstance and the bulk operations.
type AdminOption func(*adminConfig) error

type adminConfig struct {
	reset bool
	runAt time.Time
	batch int
	all   bool
}

// WithResetAttempts makes a retry start the attempt count again at 0, so
// the instance gets its full MaxRetries again. Without it the count is
// kept: the retry runs attempt Attempt+1, once even when the instance had
// used up its retries, and a failure of it then ends Terminated.
func WithResetAttempts() AdminOption {
	return func(c *adminConfig) error { c.reset = true; return nil }
}

// WithRetryAt makes retried instances ready at t instead of at once.
func WithRetryAt(t time.Time) AdminOption {
	return func(c *adminConfig) error { c.runAt = t; return nil }
}

// WithBulkBatch sets how many instances a bulk operation looks up and
// changes per round (per store call). Defaults to DefaultBulkBatch; n must
// be in [1, 10000].
func WithBulkBatch(n int) AdminOption {
	return func(c *adminConfig) error {
		if n < 1 || n > maxBulkBatch {
			return fmt.Errorf("%w: WithBulkBatch(%d); want 1 to %d", ErrInvalidOption, n, maxBulkBatch)
		}
		c.batch = n
		return nil
	}
}

// WithAllInstances lets a bulk operation run with a query that selects
// nothing in particular (no kind, queue, instance, states or time range),
// so it acts on every instance it may change. Without it such a query is
// refused, so that an empty filter never wipes a store by mistake.
func WithAllInstances() AdminOption {
	return func(c *adminConfig) error { c.all = true; return nil }
}

func (c *adminConfig) apply(opts []AdminOption) error {
	c.batch = DefaultBulkBatch
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil AdminOption", ErrInvalidOption)
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// RetryInstance runs a final instance (Completed, Terminated, Canceled,
// TimedOut) again: it goes back to Scheduled, due now or at WithRetryAt,
// with its result, error and finish time cleared, its attempts kept or
// reset (WithResetAttempts), and a history record "retried by <node>". Its
// unique key is neither checked nor taken again. It returns the instance as
// stored after the change, or an error wrapping ErrNotFound or
// ErrNotFinished.
func (m *Manager) RetryInstance(ctx context.Context, id string, opts ...AdminOption) (*InstanceInfo, error) {
	var c adminConfig
	if err := c.apply(opts); err != nil {
		return nil, fmt.Errorf("job: retry %s: %w", id, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job: retry %s: %w", id, err)
	}
	res, err := m.store.Retry(ctx, m.retryParams(&c, []string{id}))
	if err == nil && len(res) != 1 {
		err = fmt.Errorf("the store answered %d results for one ID", len(res))
	}
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		return nil, m.adminError(ctx, "retry", id, err)
	}
	m.notifyLocal()
	rec, err := m.lookupRecord(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("job: retry %s: retried, then %w", id, err)
	}
	if j, ok := m.reg.get(rec.Kind); ok {
		m.recordChanged(j, rec, Scheduled)
	}
	if rec.Task != nil {
		// The dependents its failure canceled wait for it again.
		if err := m.rearmDependents(ctx, rec); err != nil {
			return newInfo(rec), fmt.Errorf("job: retry %s: retried; re-arming the workflow tasks that depend on it (retry them one by one): %w", id, err)
		}
	}
	return newInfo(rec), nil
}

// DeleteInstance removes an instance in any state with its history and
// logs, and releases its unique key. A running one is removed too: the
// manager that runs it loses its lease (at once when it runs here, at its
// next lease renewal elsewhere), so its context is canceled with
// ErrLeaseLost and its outcome is discarded. It returns an error wrapping
// ErrNotFound when there is no such instance.
func (m *Manager) DeleteInstance(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("job: delete %s: %w", id, err)
	}
	res, err := m.deleteIDs(ctx, []string{id})
	if err == nil && len(res) != 1 {
		err = fmt.Errorf("the store answered %d results for one ID", len(res))
	}
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		return fmt.Errorf("job: delete %s: %w", id, err)
	}
	return nil
}

func (m *Manager) retryParams(c *adminConfig, ids []string) *store.RetryParams {
	return &store.RetryParams{IDs: ids, RunAt: c.runAt, ResetAttempts: c.reset, Now: m.clock.Now(), Node: m.node}
}

// deleteIDs deletes ids in the store and stops the local attempts of the
// running ones.
func (m *Manager) deleteIDs(ctx context.Context, ids []string) ([]store.AdminResult, error) {
	res, err := m.store.Delete(ctx, &store.DeleteParams{IDs: ids, Now: m.clock.Now(), Node: m.node})
	for _, r := range res {
		if r.Err != nil || r.State != Processing {
			continue
		}
		if a := m.active.get(r.ID); a != nil && m.giveUp(a) {
			m.log.Info("instance deleted while it ran here; canceling the attempt", "instance", r.ID, "attempt", a.rec.Attempt)
			a.cancel(ErrLeaseLost)
			m.active.remove(a)
		}
	}
	return res, err
}

// BulkResult counts what a bulk operation did.
type BulkResult struct {
	// Matched counts the instances the query selected, each once.
	Matched int
	// Applied counts those changed: canceled (or, when running, their
	// cancel requested), retried, or deleted.
	Applied int
	// Skipped counts those that changed in between so the operation no
	// longer applied (finished before its cancel, gone before its delete,
	// retried by someone else), or whose record could not be decoded.
	Skipped int
}

// CancelInstances cancels every Scheduled or Processing instance q selects,
// as CancelInstance does one. q may name states among Scheduled and
// Processing (both when it names none); see RetryInstances for how the
// instances are found.
func (a *Admin) CancelInstances(ctx context.Context, q *Query, opts ...AdminOption) (BulkResult, error) {
	m := a.m
	return m.bulk(ctx, "cancel", q, opts, []State{Scheduled, Processing}, func(ctx context.Context, _ *adminConfig, ins []*store.Instance) ([]error, error) {
		errs := make([]error, len(ins))
		for i, in := range ins {
			_, err := m.CancelInstance(ctx, in.ID)
			if err != nil && ctx.Err() != nil {
				return nil, err
			}
			errs[i] = err
		}
		return errs, nil
	})
}

// RetryInstances retries every final instance q selects, as RetryInstance
// does one (WithResetAttempts and WithRetryAt apply to all). q may name
// final states (all four when it names none).
//
// Like every bulk operation, it works in rounds of WithBulkBatch instances
// (500 by default): it looks up the next instances q selects that it has
// not handled yet, changes them with one store call, and goes on until
// none are left, so a store call stays short however many match. It acts
// on the instances created before it started (by this manager's clock)
// and handles each at most once; one that changes state in between is
// skipped when the change no longer applies. Work continues meanwhile. A
// query that selects nothing in particular needs WithAllInstances; a
// query's Limit caps how many instances are handled. It returns what it
// did until an error stopped it, with the error.
func (a *Admin) RetryInstances(ctx context.Context, q *Query, opts ...AdminOption) (BulkResult, error) {
	m := a.m
	return m.bulk(ctx, "retry", q, opts, []State{Completed, Terminated, Canceled, TimedOut}, func(ctx context.Context, c *adminConfig, ins []*store.Instance) ([]error, error) {
		ids := make([]string, len(ins))
		for i, in := range ins {
			ids[i] = in.ID
		}
		p := m.retryParams(c, ids)
		res, err := m.store.Retry(ctx, p)
		if err != nil {
			return nil, err
		}
		errs := make([]error, len(ins))
		woke := false
		for i, r := range res {
			if errs[i] = r.Err; r.Err != nil {
				continue
			}
			woke = true
			if j, ok := m.reg.get(ins[i].Kind); ok && j.onStateChange != nil {
				rec := ins[i].Clone()
				rec.State, rec.RunAt, rec.UpdatedAt = Scheduled, p.ReadyAt(), p.Now
				rec.FinishedAt, rec.Result, rec.Error = time.Time{}, nil, ""
				if c.reset {
					rec.Attempt = 0
				}
				m.stateChanged(j, newInstance(rec, m.logs), Scheduled) // rec is a copy
			}
		}
		if woke {
			m.notifyLocal()
		}
		return errs, nil
	})
}

// DeleteInstances deletes every instance q selects, in any state, as
// DeleteInstance does one; see RetryInstances for how they are found.
func (a *Admin) DeleteInstances(ctx context.Context, q *Query, opts ...AdminOption) (BulkResult, error) {
	m := a.m
	return m.bulk(ctx, "delete", q, opts, nil, func(ctx context.Context, _ *adminConfig, ins []*store.Instance) ([]error, error) {
		ids := make([]string, len(ins))
		for i, in := range ins {
			ids[i] = in.ID
		}
		res, err := m.deleteIDs(ctx, ids)
		if err != nil {
			return nil, err
		}
		errs := make([]error, len(ins))
		for i, r := range res {
			errs[i] = r.Err
		}
		return errs, nil
	})
}

// bulkApply changes a round's instances and returns one error (nil when
// applied) per instance, or an error that stops the operation.
type bulkApply func(ctx context.Context, c *adminConfig, ins []*store.Instance) ([]error, error)

// bulk runs a bulk operation: op names it, allowed are the states it acts
// on (nil: any), which are also what q selects when it names no state.
func (m *Manager) bulk(ctx context.Context, op string, q *Query, opts []AdminOption, allowed []State, apply bulkApply) (BulkResult, error) {
	var res BulkResult
	fail := func(err error) (BulkResult, error) {
		return res, fmt.Errorf("job: %s instances: %w", op, err)
	}
	var c adminConfig
	if err := c.apply(opts); err != nil {
		return fail(err)
	}
	sq, none, err := m.bulkQuery(&c, q, op, allowed)
	if err != nil {
		return fail(err)
	}
	if none {
		return res, nil
	}
	// The caller's own Limit caps the operation (0: no cap), not the
	// default limit of a lookup.
	total := 0
	if q != nil {
		total = q.q.Limit
	}
	r := bulkRounds{m: m, op: op, sq: sq, batch: c.batch, total: total, handled: map[string]bool{}}
	for total <= 0 || res.Matched < total {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		fresh, done, err := r.next(ctx, res.Matched)
		if err != nil {
			return fail(err)
		}
		if done {
			break
		}
		if fresh == nil {
			continue
		}
		errs, err := apply(ctx, &c, fresh)
		if err != nil {
			return fail(err)
		}
		if err := r.tally(&res, fresh, errs); err != nil {
			return fail(err)
		}
	}
	return res, nil
}

// bulkQuery checks a bulk operation's query and returns the store query it
// runs: q's states (allowed when it names none), bounded to the instances
// created before now. none reports a range that starts in the future, so
// selects nothing yet.
func (m *Manager) bulkQuery(c *adminConfig, q *Query, op string, allowed []State) (sq *store.Query, none bool, err error) {
	sq, err = q.store()
	if err != nil {
		return nil, false, err
	}
	if len(sq.Levels) > 0 {
		return nil, false, fmt.Errorf("%w: the query names log levels, which select log records, not instances", ErrInvalidOption)
	}
	for _, st := range sq.States {
		if allowed != nil && !slices.Contains(allowed, st) {
			return nil, false, fmt.Errorf("%w: the query names state %v; %s acts only on %v", ErrInvalidOption, st, op, allowed)
		}
	}
	if !c.all && sq.InstanceID == "" && sq.Kind == "" && sq.Queue == "" && len(sq.States) == 0 && sq.Since.IsZero() && sq.Until.IsZero() {
		return nil, false, fmt.Errorf("%w: the query selects every instance; narrow it (kind, queue, states, time range) or pass WithAllInstances to mean it", ErrInvalidOption)
	}
	if len(sq.States) == 0 {
		sq.States = allowed
	}
	// Only what exists now: instances created later are not this call's.
	if start := m.clock.Now().Add(time.Nanosecond); sq.Until.IsZero() || sq.Until.After(start) {
		sq.Until = start
		if !sq.Since.IsZero() && !sq.Until.After(sq.Since) {
			return sq, true, nil // the range starts in the future: nothing yet
		}
	}
	return sq, false, nil
}

// bulkRounds finds the instances of a bulk operation's rounds: each round
// looks up the next batch its query selects and keeps those not handled.
type bulkRounds struct {
	m       *Manager
	op      string
	sq      *store.Query
	batch   int
	total   int // the caller's cap on instances handled (0: none)
	handled map[string]bool
	stuck   int // handled instances the last lookup returned again
}

// next looks up the next round's fresh instances, up to the cap given
// matched so far. done reports that none are left; a nil fresh without
// done means a whole page was handled already and the next lookup looks
// further.
func (r *bulkRounds) next(ctx context.Context, matched int) (fresh []*store.Instance, done bool, err error) {
	lq := *r.sq
	lq.Limit = r.batch + r.stuck
	got, err := r.m.store.LookupInstances(ctx, &lq)
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return nil, false, err
	}
	if err != nil {
		r.m.log.Warn("bulk "+r.op+": some instances could not be decoded; they are left out", "err", err)
	}
	again := 0
	for _, in := range got {
		switch {
		case r.handled[in.ID]:
			again++
		case r.total <= 0 || matched+len(fresh) < r.total:
			fresh = append(fresh, in)
		}
	}
	if len(fresh) == 0 {
		if len(got) < lq.Limit {
			return nil, true, nil // nothing left
		}
		r.stuck = len(got) // a whole page handled already: look further
		return nil, false, nil
	}
	r.stuck = again
	return fresh, false, nil
}

// tally marks a round's instances handled and counts them in res by their
// errors: applied, skipped (gone, finished, not finished or undecodable
// meanwhile), or an error that stops the operation.
func (r *bulkRounds) tally(res *BulkResult, fresh []*store.Instance, errs []error) error {
	for i, in := range fresh {
		r.handled[in.ID] = true
		res.Matched++
		switch e := errs[i]; {
		case e == nil:
			res.Applied++
		case errors.Is(e, store.ErrNotFound), errors.Is(e, store.ErrFinished), errors.Is(e, store.ErrNotFinished), errors.Is(e, store.ErrCorrupt):
			res.Skipped++
		default:
			return fmt.Errorf("instance %s: %w", in.ID, e)
		}
	}
	return nil
}

// adminError is the error of op ("retry", "cancel") on instance id that
// the store refused with err, written for its reader: the ID once, the
// instance's state and the fix once, the store's error kept in the
// chain (errors.Is(err, ErrNotFinished) still holds).
func (m *Manager) adminError(ctx context.Context, op, id string, err error) error {
	state := func(def string) string {
		if recs, lerr := m.store.LookupInstances(ctx, &store.Query{InstanceID: id, Limit: 1}); lerr == nil && len(recs) == 1 {
			return recs[0].State.String()
		}
		return def
	}
	var msg string
	switch {
	case errors.Is(err, store.ErrNotFound):
		msg = "no such instance"
	case errors.Is(err, store.ErrNotFinished):
		msg = fmt.Sprintf("the instance is %s, not finished; cancel it first, or wait for it to finish", state("running"))
	case errors.Is(err, store.ErrFinished):
		msg = fmt.Sprintf("the instance is %s already: there is nothing to %s", state("finished"), op)
	default:
		return fmt.Errorf("job: %s %s: %w", op, id, err)
	}
	return &readerError{fmt.Sprintf("job: %s %s: %s", op, id, msg), err}
}

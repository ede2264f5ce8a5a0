package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Sharded tasks: one task split into shards that run at once, each
// retried on its own, joined by a parent instance. See WithShards and
// doc/design.md ("Sharded tasks").

// DefaultShardRecheck is how long a sharded task's parent waits before it
// looks at its shards again when no shard's end woke it (see
// WithShardRecheck).
const DefaultShardRecheck = 30 * time.Second

// ErrShardFailed: a shard of a sharded task ended without completing
// (Terminated, TimedOut or Canceled), so its parent ended Terminated with
// an error wrapping this one that names the shards.
var ErrShardFailed = errors.New("job: shard failed")

// WithShards schedules the instance as a sharded task of n shards (1 to
// store.MaxShards): n instances of the job's kind, each with the same
// arguments and policy, that run at once on whichever workers claim them
// (spread over distinct managers where the claims allow), each retried on
// its own. An executor learns which shard it runs from its Instance:
//
//	info := ji.Info()
//	index, count := info.ShardIndex, info.ShardCount
//
// ScheduleJob returns the task's parent, an instance that runs no
// executor: it waits, Scheduled and without a worker, until its shards are
// done. It completes when every shard has completed, its results being
// one value per shard in shard order (each shard's results as a JSON
// array: Results returns []any of []any); it ends Terminated, with an
// error wrapping ErrShardFailed naming the shards, as soon as one shard
// ends without completing (out of retries, timed out, or canceled), and
// the shards still pending or running are then canceled. Canceling the
// parent cancels its shards. Lookups find the shards by their parent
// (WithQueryParent).
//
// The parent holds a unique key (WithUniqueKey, or the kind's unique
// policy); its shards hold none. Required labels (WithRequiredLabels)
// apply to every shard, and to the parent, which is joined by a manager
// that could run the kind. Retries and the timeout apply to each shard;
// the parent is stored with RetryForever and no timeout, as its joins
// never fail for want of retries. WithShards is refused by ScheduleJobs
// and by recurring jobs.
func WithShards(n int) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if n < 1 || n > store.MaxShards {
			return fmt.Errorf("%w: WithShards(%d); want 1 to store.MaxShards (%d) shards", ErrInvalidOption, n, store.MaxShards)
		}
		c.shards = n
		return nil
	})
}

// WithShardRecheck sets how long a sharded task's parent waits before it
// looks at its shards again on its own. The manager that ends a task's
// last shard (or a failing one) wakes the parent at once, so this only
// bounds how late a parent completes when that wake-up was lost (its
// manager crashed in between, or the store failed the call). Each look
// costs a claim, a lookup of the shards and a hand-back (two history
// records). Defaults to DefaultShardRecheck; d must be positive.
func WithShardRecheck(d time.Duration) ManagerOption {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: shard recheck %v, want > 0", ErrInvalidOption, d)
		}
		c.shardRecheck = d
		return nil
	}
}

// shardRecords returns the shards of the parent p, due at runAt, with the
// given retries and timeout.
func shardRecords(p *store.Instance, runAt time.Time, maxRetries int, timeout time.Duration) []*store.Instance {
	out := make([]*store.Instance, p.ShardCount)
	for i := range out {
		out[i] = &store.Instance{
			ID: store.ShardID(p.ID, i), Kind: p.Kind, Queue: p.Queue, Args: p.Args, Priority: p.Priority,
			RunAt: runAt, MaxRetries: maxRetries, Timeout: timeout, CreatedAt: p.CreatedAt,
			Labels: p.Labels, Metadata: store.CloneMetadata(p.Metadata),
			Parent: p.ID, ShardIndex: i, ShardCount: p.ShardCount,
		}
	}
	return out
}

// enqueueSharded stores rec as the parent of a sharded task of c.shards
// shards, and the shards: in one Enqueue, or, when the parent holds a
// unique key, the parent first (so a duplicate stores no shard) and then
// the shards. A parent stored without all its shards (a failed second
// call, a crash in between) gets the missing ones at its first join.
func (m *Manager) enqueueSharded(ctx context.Context, j *Job, rec *store.Instance, c *scheduleConfig) (*InstanceInfo, error) {
	kind := rec.Kind
	shardsAt := rec.RunAt
	rec.ShardCount = c.shards
	shards := shardRecords(rec, shardsAt, rec.MaxRetries, rec.Timeout)
	rec.MaxRetries, rec.Timeout = RetryForever, 0
	rec.RunAt = shardsAt.Add(m.shards.recheck)
	first := append([]*store.Instance{rec}, shards...)
	if rec.UniqueKey != "" {
		first = first[:1]
	}
	res, err := m.store.Enqueue(ctx, &store.EnqueueParams{Instances: first, Node: m.node, Now: enqueueTime(m.clock, first)})
	if err == nil && len(res) != len(first) {
		err = fmt.Errorf("store returned %d results for %d instances", len(res), len(first))
	}
	if err != nil {
		return nil, scheduleError(fmt.Sprintf("%q with %d shards", kind, c.shards), c.idemKey, err)
	}
	inst, stored, err := m.scheduled(ctx, rec, res[0], c.idemKey)
	if err != nil {
		return inst, err
	}
	for i, r := range res[1:] {
		if r.Err != nil {
			return inst, fmt.Errorf("job: schedule %q: shard %d of task %s: %w", kind, i, rec.ID, r.Err)
		}
	}
	if len(first) == 1 || !stored {
		// The shards of a parent stored alone, or of one stored before
		// (an idempotency key's repeat): stored if missing.
		if _, err := m.store.Enqueue(ctx, &store.EnqueueParams{Instances: shards, Node: m.node, Now: enqueueTime(m.clock, shards)}); err != nil {
			m.log.Warn("sharded task stored without its shards; its first join adds them", "instance", rec.ID, "kind", kind, "err", err)
		}
	}
	if stored {
		m.notifyLocal()
		m.recordChanged(j, rec, store.Scheduled)
	}
	return inst, nil
}

// join runs the join step of a sharded task's parent in place of an
// executor (step.go): it reads the shards and completes the parent with
// their results, fails it naming the shards that failed, or hands it back
// (attempt not counted) to look again after the recheck interval.
func (m *Manager) join(a *attempt) {
	m.step(a, func(ctx context.Context) stepDecision {
		out, results, err := m.shards.joinOutcome(ctx, a.rec)
		return stepDecision{out: out, results: results, err: err}
	})
}

// shardsDeps is what the shard and join logic uses.
type shardsDeps struct {
	store     store.Store
	clock     Clock
	node      string
	log       *slog.Logger
	run       *runScope     // bounds the reads of the node registry
	recheck   time.Duration // WithShardRecheck: how often a waiting parent looks again
	deadAfter time.Duration // for reading the node registry
	reg       *registry     // a kind's policy, for shards stored at a join
	active    *activeSet    // shards running here, canceled at once
	// woke is called when a parent was woken or shards were stored (it
	// wakes the claimer).
	woke func()
}

// shards is the shard and join logic of sharded tasks: a parent's join
// (joinOutcome), the wake-up of a parent whose shards ended (shardsEnded,
// called by the completer, the rescuer and Cancel), canceling shards, and
// spreading shards over nodes (shards_spread.go). The attempt machinery
// around it (Manager.join, Manager.handBackShard) stays with the workers.
// Workflows generalise this join: a task released when its parents end.
type shards struct {
	shardsDeps
	spread spreadState
}

func newShards(d shardsDeps) *shards { return &shards{shardsDeps: d} }

// joinOutcome decides the parent p's outcome from its shards' states.
func (sh *shards) joinOutcome(ctx context.Context, p *store.Instance) (store.Outcome, []any, error) {
	now := sh.clock.Now()
	wait := func(why string) store.Outcome {
		return store.Outcome{ID: p.ID, Attempt: p.Attempt, State: store.Scheduled, RunAt: now.Add(sh.recheck), Release: true, Error: why}
	}
	got, err := sh.store.LookupInstances(ctx, &store.Query{Parent: p.ID})
	if err != nil && got == nil {
		sh.log.Warn("sharded task: looking up its shards; looking again later", "instance", p.ID, "err", err)
		return wait("waiting for shards: looking them up: " + err.Error()), nil, nil
	}
	n := p.ShardCount
	byIndex := make([]*store.Instance, n)
	for _, s := range got {
		if s.ShardIndex >= 0 && s.ShardIndex < n && s.ShardCount == n {
			byIndex[s.ShardIndex] = s
		}
	}
	var missing, pending []*store.Instance
	var failed []string
	done := 0
	for i, s := range byIndex {
		switch {
		case s == nil:
			missing = append(missing, &store.Instance{ShardIndex: i})
		case s.State == store.Completed:
			done++
		case s.State.Final():
			msg := fmt.Sprintf("shard %d (%s) %s", i, s.ID, s.State)
			if s.Error != "" {
				msg += ": " + s.Error
			}
			failed = append(failed, msg)
		default:
			pending = append(pending, s)
		}
	}
	if len(failed) > 0 {
		if err := sh.cancelShards(ctx, pending); err != nil {
			sh.log.Warn("sharded task failed; canceling its other shards", "instance", p.ID, "err", err)
		}
		err := Permanent(fmt.Errorf("%w: %d of %d shards of task %s did not complete: %s", ErrShardFailed, len(failed), n, p.ID, strings.Join(failed, "; ")))
		return store.Outcome{ID: p.ID, Attempt: p.Attempt, State: store.Terminated, Error: err.Error()}, nil, err
	}
	if len(missing) > 0 {
		// Shards a crash or a failed call kept from being stored (an ID
		// stored meanwhile is left as it is), with a sibling's policy, or
		// the kind's when none is stored.
		retries, timeout := sh.shardPolicy(p.Kind, got)
		all := shardRecords(p, now, retries, timeout)
		for k, s := range missing {
			missing[k] = all[s.ShardIndex]
		}
		if _, err := sh.store.Enqueue(ctx, &store.EnqueueParams{Instances: missing, Node: sh.node, Now: now}); err != nil {
			sh.log.Warn("sharded task: storing its missing shards; trying again later", "instance", p.ID, "missing", len(missing), "err", err)
		} else {
			sh.woke()
		}
		return wait(fmt.Sprintf("waiting for shards: %d of %d done, %d stored at this join", done, n, len(missing))), nil, nil
	}
	if len(pending) > 0 {
		return wait(fmt.Sprintf("waiting for shards: %d of %d done", done, n)), nil, nil
	}
	raw := make([]json.RawMessage, n)
	results := make([]any, n)
	for i, s := range byIndex {
		r := s.Result
		if len(r) == 0 {
			r = []byte("[]")
		}
		raw[i] = r
		v, err := decodeJSONArray(r)
		if err != nil {
			results[i] = r
			continue
		}
		if v == nil {
			v = []any{}
		}
		results[i] = v
	}
	b, err := json.Marshal(raw)
	if err != nil { // a shard's stored result is not JSON
		err = Permanent(fmt.Errorf("%w: gathering the results of task %s: %w", ErrCorrupt, p.ID, err))
		return store.Outcome{ID: p.ID, Attempt: p.Attempt, State: store.Terminated, Error: err.Error()}, nil, err
	}
	return store.Outcome{ID: p.ID, Attempt: p.Attempt, State: store.Completed, Result: b}, results, nil
}

// shardPolicy returns the retries and timeout of a shard among stored,
// else those of the kind's job (registered here, or its definition), else
// the defaults.
func (sh *shards) shardPolicy(kind string, stored []*store.Instance) (int, time.Duration) {
	if len(stored) > 0 {
		return stored[0].MaxRetries, stored[0].Timeout
	}
	if j, ok := sh.reg.get(kind); ok {
		return j.maxRetries, j.timeout
	}
	return DefaultMaxRetries, 0
}

// cancelShards cancels shards (pending or running): a pending one at once,
// a running one at its owner's next renewal, or at once when it runs
// here. Shards that ended meanwhile are left as they are.
func (sh *shards) cancelShards(ctx context.Context, shards []*store.Instance) error {
	var errs []error
	for _, s := range shards {
		rec, err := sh.store.Cancel(ctx, &store.CancelParams{ID: s.ID, Now: sh.clock.Now(), Node: sh.node})
		switch {
		case errors.Is(err, store.ErrFinished) || errors.Is(err, store.ErrNotFound):
		case err != nil:
			errs = append(errs, fmt.Errorf("shard %d (%s): %w", s.ShardIndex, s.ID, err))
		case rec.State == store.Processing:
			if a := sh.active.get(s.ID); a != nil && a.rec.Attempt == rec.Attempt {
				a.cancel(ErrCanceled)
			}
		}
	}
	return errors.Join(errs...)
}

// canceledSharded follows a cancel of rec: a sharded task's parent
// cancels its shards; a shard canceled before it ran wakes its parent,
// which then fails naming it.
func (m *Manager) canceledSharded(ctx context.Context, rec *store.Instance) error {
	switch {
	case rec.IsShardParent():
		shards, err := m.store.LookupInstances(ctx, &store.Query{Parent: rec.ID, States: []store.State{store.Scheduled, store.Processing}})
		if err != nil && shards == nil {
			return fmt.Errorf("canceling the shards of task %s (the task is canceled; cancel them one by one): %w", rec.ID, err)
		}
		if err := m.shards.cancelShards(ctx, shards); err != nil {
			return fmt.Errorf("canceling the shards of task %s (the task is canceled): %w", rec.ID, err)
		}
	case rec.IsShard() && rec.State.Final():
		m.shards.shardsEnded(ctx, []*store.Instance{rec})
	}
	return nil
}

// shardsEnded wakes the parents of shards that just reached a final state
// (by this manager's outcome, rescue or cancel, each stored before this
// call) when the task is done: a shard ended without completing, or none
// of its siblings is pending or running any more. Each manager reads the
// states after its own shard's end is stored, so whichever ends the last
// shard sees every shard final and wakes the parent; a wake-up lost to a
// crash is made up by the parent's recheck. Failures are logged, never
// returned: the recheck covers them too.
func (sh *shards) shardsEnded(ctx context.Context, recs []*store.Instance) {
	wake := map[string]bool{}
	for _, r := range recs {
		if r.IsShard() && r.State.Final() {
			wake[r.Parent] = wake[r.Parent] || r.State != store.Completed
		}
	}
	if len(wake) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ids := make([]string, 0, len(wake))
	for parent, failed := range wake {
		if !failed {
			open, err := sh.store.LookupInstances(ctx, &store.Query{Parent: parent, States: []store.State{store.Scheduled, store.Processing}, Limit: 1})
			if err != nil || len(open) > 0 {
				if err != nil {
					sh.log.Warn("sharded task: reading its shards to wake it; it looks again on its own", "instance", parent, "err", err)
				}
				continue
			}
		}
		ids = append(ids, parent)
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	if err := sh.store.Wake(ctx, &store.WakeParams{IDs: ids, Now: sh.clock.Now()}); err != nil {
		sh.log.Warn("sharded task: waking its parent; it looks again on its own", "instances", ids, "err", err)
		return
	}
	sh.woke()
}

// joinReady reports whether the parent p's join would not wait now: a
// shard ended without completing, or none is pending or running (the
// reads shardsEnded makes). A failed read reports false.
func (sh *shards) joinReady(ctx context.Context, p *store.Instance) bool {
	failed, err := sh.store.LookupInstances(ctx, &store.Query{Parent: p.ID, States: []store.State{store.Terminated, store.Canceled, store.TimedOut}, Limit: 1})
	if err != nil {
		return false
	}
	if len(failed) > 0 {
		return true
	}
	open, err := sh.store.LookupInstances(ctx, &store.Query{Parent: p.ID, States: []store.State{store.Scheduled, store.Processing}, Limit: 1})
	return err == nil && len(open) == 0
}

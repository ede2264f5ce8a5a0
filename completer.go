package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/store"
)

// finishReq is an outcome waiting to be written.
type finishReq struct {
	a    *attempt
	out  store.Outcome
	inst *instance
	err  error
	// ended is when the executor returned (manager's clock), for
	// observers; zero when the engine decided the end without it.
	ended time.Time
}

// completerDeps is what the completer uses. The callbacks are how it
// tells the rest of the engine what the store applied.
type completerDeps struct {
	store  store.Store
	clock  Clock
	node   string
	log    *slog.Logger
	writes *writeScope
	active *activeSet // the attempts still running or not yet recorded
	obs    observers
	batch  int           // the most outcomes one Finish call carries
	linger time.Duration // how long a batch waits for more (WithFinishBatch)
	// interval is the least time between two Finish calls while outcomes
	// keep coming (WithFinishInterval; see pace).
	interval time.Duration

	// storeFull reports whether the store's last answer was store.ErrFull
	// (the claimer claims nothing meanwhile).
	storeFull func(full bool)
	// recorded is called for each outcome the store applied, in the state
	// it applied (the job's handlers run from it).
	recorded func(r *finishReq, state State)
	// ended is called once per batch with the instances it moved to a
	// final state that another instance waits on: the shards of a sharded
	// task, whose parent joins them (shards.go), and workflow tasks, whose
	// dependents it releases (workflow_release.go).
	ended func(ctx context.Context, recs []*store.Instance)
	// retried is called when a batch scheduled a retry, due now or later,
	// into a queue whose store wake-ups are not subscribed (storeWakes):
	// the claim loop, which may be waiting for its poll interval, claims
	// it or learns its run time. A subscribed queue's wake-up does that,
	// and waking here as well would cost a second claim.
	retried    func()
	storeWakes func(queue string) bool
	// changed is called after each batch (it wakes Manager.Wait).
	changed func()
}

// completer writes the outcomes of attempts in batches, from Start to the
// end of Stop. It is the one place where an attempt's end reaches the
// store: whatever must happen when an instance finishes (a shard's join
// today; a workflow's release and a cluster-wide limit's slot, next)
// starts from its flush.
type completer struct {
	completerDeps

	mu     sync.RWMutex // guards ch against sends after close
	closed bool
	ch     chan *finishReq
	wg     sync.WaitGroup
	queued atomic.Int64 // outcomes submitted but not yet applied
	lost   atomic.Int64 // outcomes given up without being written
	// hurried is rung by Manager.Wait: a batch held by pace is written
	// at once.
	hurried chan struct{}
}

var _ service = (*completer)(nil)

func newCompleter(d completerDeps) *completer {
	return &completer{completerDeps: d, hurried: make(chan struct{}, 1)}
}

// hurry has a batch that pace holds written at once (a drain waits for
// it).
func (c *completer) hurry() {
	select {
	case c.hurried <- struct{}{}:
	default:
	}
}

func (c *completer) start() {
	c.ch = make(chan *finishReq, 4*c.batch)
	c.wg.Add(1)
	go c.run()
}

// halt closes the queue: an outcome submitted from then on is counted as
// not recorded.
func (c *completer) halt() {
	c.mu.Lock()
	c.closed = true
	close(c.ch)
	c.mu.Unlock()
}

// wait returns when what the queue held is written or given up (when the
// write scope is canceled).
func (c *completer) wait() { c.wg.Wait() }

// submit queues an outcome for the completer, waiting while its queue is
// full. It reports false, and counts the outcome as not recorded, once
// Stop has closed the queue.
func (c *completer) submit(r *finishReq) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		c.notRecorded(r.a, 1)
		if r.a.fenced() {
			c.obs.leaseLost(r.a.rec, r.a.fenceReason())
		}
		return false
	}
	c.queued.Add(1)
	c.ch <- r
	return true
}

// trySubmit queues an outcome if the completer's queue has room now.
func (c *completer) trySubmit(r *finishReq) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	c.queued.Add(1)
	select {
	case c.ch <- r:
		return true
	default:
		c.queued.Add(-1)
		return false
	}
}

// notRecorded counts n outcomes given up without being written.
func (c *completer) notRecorded(a *attempt, n int) {
	c.lost.Add(int64(n))
	if a != nil {
		c.active.remove(a)
	}
}

// run writes outcomes in batches: it takes what has queued up (up to the
// finish batch size), waits up to the finish linger for more while other
// attempts still run, and writes the batch in one Finish call, retrying
// with backoff while the store fails; the attempts' leases are renewed
// until then, so nothing is rescued while it waits. It gives up when Stop
// says so (the write scope ended): then the leases lapse and the
// instances are rescued.
func (c *completer) run() {
	defer c.wg.Done()
	batch := make([]*finishReq, 0, c.batch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var last time.Time // when the last Finish call started
	for r := range c.ch {
		batch = drainInto(append(batch[:0], r), c.ch)
		if c.linger > 0 && len(batch) < cap(batch) && c.active.len() > len(batch) {
			// The linger and the interval are cost knobs, not a
			// schedule: they run on the real clock, so a test's fake
			// clock never stalls them.
			timer.Reset(c.linger)
			batch = c.lingerFor(batch, timer)
			timer.Stop()
		}
		batch = c.pace(batch, last, timer)
		last = time.Now()
		c.flush(batch)
	}
}

// pace holds batch until the finish interval has passed since the last
// Finish call started (last), adding the outcomes that come meanwhile,
// so that while outcomes keep coming one call writes all of an
// interval's instead of one or two each (at low steady rates most jobs
// end while no other runs, and the linger alone wrote them one by one:
// a transaction each on PostgreSQL). An outcome after a quiet spell of
// an interval or more is written at once. It stops holding when the batch
// is full, an outcome that another instance or the claim loop waits on
// joins it (see waitedOn), the queue closes (Stop) or a drain hurries it
// (Manager.Wait).
func (c *completer) pace(batch []*finishReq, last time.Time, timer *time.Timer) []*finishReq {
	if c.interval <= 0 || last.IsZero() || len(batch) == cap(batch) || slices.ContainsFunc(batch, waitedOn) {
		return batch
	}
	wait := c.interval - time.Since(last)
	if wait <= 0 {
		return batch
	}
	timer.Reset(wait)
	defer timer.Stop()
	for len(batch) < cap(batch) {
		select {
		case r, ok := <-c.ch:
			if !ok {
				return batch
			}
			n := len(batch)
			batch = drainInto(append(batch, r), c.ch)
			if slices.ContainsFunc(batch[n:], waitedOn) {
				return batch
			}
		case <-timer.C:
			return batch
		case <-c.hurried:
			return batch
		}
	}
	return batch
}

// waitedOn reports whether r's outcome is one that something waits on
// being recorded, which pace never holds: a retry or hand-back (the
// claim loop may run it at once), or the end of a shard or a workflow
// task (its parent's join or its dependents start from the write).
func waitedOn(r *finishReq) bool {
	return r.out.State == store.Scheduled || r.a != nil && r.a.rec != nil && (r.a.rec.IsShard() || r.a.rec.Task != nil)
}

// lingerFor adds outcomes to batch until it is full, every running
// attempt has reported, the channel closes or timer fires.
func (c *completer) lingerFor(batch []*finishReq, timer *time.Timer) []*finishReq {
	for len(batch) < cap(batch) && c.active.len() > len(batch) {
		select {
		case r, ok := <-c.ch:
			if !ok {
				return batch
			}
			batch = drainInto(append(batch, r), c.ch)
		case <-timer.C:
			return batch
		}
	}
	return batch
}

// drainInto appends to batch what ch holds right now, without waiting, up
// to batch's capacity: a writer takes whatever queued up while it was busy
// and writes it in one store call.
func drainInto[T any](batch []T, ch <-chan T) []T {
	for len(batch) < cap(batch) {
		select {
		case v, ok := <-ch:
			if !ok {
				return batch
			}
			batch = append(batch, v)
		default:
			return batch
		}
	}
	return batch
}

// flush writes one batch and tells the engine what the store applied.
func (c *completer) flush(batch []*finishReq) {
	outs := make([]store.Outcome, len(batch))
	for i, r := range batch {
		outs[i] = r.out
	}
	var (
		res []store.FinishResult
		err error
	)
	wctx := c.writes.ctx
	for try := 0; ; try++ {
		if err = wctx.Err(); err != nil {
			err = fmt.Errorf("stopped before the store took them: %w", err)
		} else {
			ctx, cancel := context.WithTimeout(wctx, 30*time.Second)
			res, err = c.store.Finish(ctx, &store.FinishParams{Owner: c.node, Now: c.clock.Now(), Outcomes: outs})
			cancel()
			if err == nil && len(res) != len(outs) {
				err = fmt.Errorf("store returned %d results for %d outcomes", len(res), len(outs))
			}
		}
		// While the store refuses outcomes for want of space, the claim
		// loop claims nothing: work claimed now could not be recorded.
		c.storeFull(errors.Is(err, store.ErrFull))
		if err == nil {
			break
		}
		giveUp := errors.Is(err, store.ErrInvalid) || wctx.Err() != nil || try >= maxWriteTries
		if !giveUp {
			c.log.Warn("record outcomes; retrying", "count", len(outs), "try", try+1, "err", err)
			// The retry delay paces calls to the store: a real-time
			// wait, ended by Stop giving up.
			giveUp = !sleep(SystemClock{}, retryDelay(try), wctx.Done())
		}
		if giveUp {
			c.log.Error("record outcomes; giving them up, their leases will expire and be rescued", "count", len(outs), "err", err)
			c.writes.failed(err)
			res = make([]store.FinishResult, len(outs))
			for i := range res {
				res[i].Err = err
			}
			c.lost.Add(int64(len(outs)))
			break
		}
	}
	retried := false
	now := c.clock.Now()
	var ended []*store.Instance // shards and workflow tasks this batch ended (shards.go, workflow_run.go)
	for i, r := range batch {
		c.active.remove(r.a)
		if res[i].Err != nil {
			lost := errors.Is(res[i].Err, store.ErrLeaseLost)
			if lost {
				c.log.Warn("outcome discarded: lease lost", "instance", r.out.ID, "attempt", r.out.Attempt, "state", r.out.State)
			}
			switch {
			case r.a.fenced(): // refused or not written: the fence cost its lease
				c.obs.leaseLost(r.a.rec, r.a.fenceReason())
			case lost:
				c.obs.leaseLost(r.a.rec, LeaseLostFinish)
			}
			continue
		}
		if res[i].State == store.Scheduled && !c.storeWakes(r.a.rec.Queue) {
			retried = true
		}
		c.obs.finished(r, res[i].State, now)
		c.recorded(r, res[i].State)
		if (r.a.rec.IsShard() || r.a.rec.Task != nil) && res[i].State.Final() {
			ended = append(ended, &store.Instance{ID: r.out.ID, Parent: r.a.rec.Parent, Task: r.a.rec.Task, State: res[i].State})
		}
	}
	c.ended(wctx, ended)
	c.queued.Add(-int64(len(batch)))
	c.changed()
	if retried {
		c.retried()
	}
}

// maxWriteTries bounds the retries of one batch of outcomes or logs while
// the manager runs (about a minute and a half with retryDelay); Stop ends
// them sooner when its ctx ends.
const maxWriteTries = 20

// retryDelay is the wait before retrying a failed store call: 50 ms
// doubling to 5 s.
func retryDelay(try int) time.Duration {
	d := 50 * time.Millisecond << min(try, 7)
	return min(d, 5*time.Second)
}

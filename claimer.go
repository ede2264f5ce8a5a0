package job

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/store"
)

// claimerDeps is what the claimer uses.
type claimerDeps struct {
	store store.Store
	// notifier pushes the store's wake-ups per queue; nil when the store
	// has none (store.Notifier).
	notifier store.Notifier
	clock    Clock
	node     string
	log      *slog.Logger
	queues   []string      // claimed in turn
	labels   []string      // the manager's labels: only instances they satisfy are claimed
	batch    int           // the most instances one claim takes (WithClaimBatch)
	poll     time.Duration // the longest sleep between claims (WithPollInterval)
	lease    time.Duration // the lease a claim takes
	pool     *pool         // the worker slots a claim fills
	reg      *registry     // only the kinds registered here are claimed
	nodes    *nodeState    // no claim while skewed or fenced
	run      *runScope     // bounds the claims
	// active, completer and logs take the attempts a claim gives up at
	// once (a record the store cannot decode; a claim repeated at Stop).
	active    *activeSet
	completer *completer
	logs      logSink
	// wake is rung when there may be work: a local schedule, a retry due,
	// a rescue, a freed kind (Manager.notifyLocal).
	wake chan struct{}
	// dispatch starts claimed attempts on the workers.
	dispatch func(recs []*store.Instance)
	// fenceAll gives up the running attempts when the node fenced itself
	// while a claim was under way.
	fenceAll func() int
	// spreadPause waits out a pause after handing shards back
	// (shards_spread.go); false when quit closes meanwhile.
	spreadPause func(quit <-chan struct{}) bool
	// limits are the cluster's concurrency limits every claim passes
	// (limits.go).
	limits *limitCache
	// nodeLimits bound what runs on this manager (limits_node.go).
	nodeLimits []store.ConcurrencyLimit
}

// claimer claims ready instances while workers are free and hands them to
// the workers; it also forwards the store's wake-ups. It is the one place
// where work enters the manager: a claim is described by claimParams alone,
// so whatever a claim must check in the store (a cluster-wide limit next,
// a Redis Cluster partition) is added there.
type claimer struct {
	claimerDeps
	loops
	// seq numbers this manager's claims (store.ClaimParams.ClaimSeq);
	// only the claim loop uses it. It starts at the wall clock's
	// nanoseconds, so a manager restarted under the same node ID numbers
	// above its previous run.
	seq uint64
	// full is set while the store refuses outcomes for want of space
	// (store.ErrFull): the claim loop claims nothing meanwhile.
	full       atomic.Bool
	fullLogged bool // claim loop only: the pause was logged
	// storeWakes holds, per queue claimed, whether the store's wake-ups
	// for it are subscribed (subscribe): a write of this manager then
	// wakes the claim loop through the store's notification, and a local
	// wake-up as well would cost a second claim (Manager.wakeFor).
	storeWakes map[string]*atomic.Bool
	// nodeHeld is set when the last claim described left work out for a
	// full node limit (limits_node.go).
	nodeHeld atomic.Bool
}

var _ service = (*claimer)(nil)

func newClaimer(d claimerDeps) *claimer {
	c := &claimer{claimerDeps: d, seq: uint64(time.Now().UnixNano()), storeWakes: make(map[string]*atomic.Bool, len(d.queues))}
	for _, q := range d.queues {
		c.storeWakes[q] = new(atomic.Bool)
	}
	return c
}

// storeWakesFor reports whether the store's wake-ups for queue q reach the
// claim loop (see storeWakes).
func (c *claimer) storeWakesFor(q string) bool {
	w := c.storeWakes[q]
	return w != nil && w.Load()
}

func (c *claimer) start() {
	c.reset()
	c.goLoop(c.claimLoop)
	if c.notifier != nil {
		for _, q := range c.queues {
			c.goLoop(func(quit <-chan struct{}) { c.subscribe(q, quit) })
		}
	}
}

// pendingClaim is a claim whose reply was lost: the store may have applied
// it. The claim loop repeats it (same queue, same ClaimSeq) before it makes
// any other claim, so it runs what that call claimed instead of leaving it
// to expire and be rescued as a spent attempt.
type pendingClaim struct {
	queue string
	limit int
	seq   uint64
}

// claimLoop claims ready instances while workers are free. It claims at
// most as many as there are free workers, from the manager's queues in
// turn; when a claim comes back short it sleeps until the earliest next
// run time the store reported, a wake-up (a local schedule, a store
// notification, a retry), or the poll interval, whichever is first; a
// worker that frees up wakes it only while a full claim waits for room.
// While the store refuses outcomes for want of space it claims nothing
// (see waitStoreRoom). A claim that failed without a clear answer is
// repeated first (see pendingClaim); one still pending at Stop is repeated
// once more and what it claimed is handed back.
func (c *claimer) claimLoop(quit <-chan struct{}) {
	start := 0
	failures := 0
	var pending *pendingClaim
	defer func() {
		if pending != nil {
			c.releasePending(pending)
		}
	}()
	for {
		if !c.mayClaim(quit) {
			return
		}
		if pending != nil {
			n, _, err := c.claim(pending.queue, pending.limit, pending.seq)
			if err != nil {
				failures++
				d := retryDelay(failures - 1)
				c.log.Warn("repeating a claim whose reply was lost; retrying", "queue", pending.queue, "err", err, "in", d)
				if !sleep(SystemClock{}, d, quit) {
					return
				}
				continue
			}
			c.log.Info("repeated a claim whose reply was lost", "queue", pending.queue, "claimed", n)
			pending, failures = nil, 0
			continue
		}
		free, ok := c.waitWork(quit)
		if !ok {
			return
		}
		if free == 0 {
			continue
		}
		r := c.round(start, free)
		start++
		if r.pending != nil {
			pending = r.pending
		}
		if r.err != nil {
			failures++
			d := retryDelay(failures - 1)
			c.log.Warn("claim failed; retrying", "err", r.err, "in", d)
			if !sleep(SystemClock{}, d, quit) {
				return
			}
			continue
		}
		failures = 0
		if r.full {
			continue
		}
		if !c.sleepUntil(r.next, quit) {
			return
		}
	}
}

// mayClaim waits until the manager may claim: not stopped, the store has
// room for outcomes (see waitStoreRoom), the node's clock is within
// bounds and it is not fenced, and no pause after a shards' hand-back is
// under way. It returns false when quit closes first.
func (c *claimer) mayClaim(quit <-chan struct{}) bool {
	select {
	case <-quit:
		return false
	default:
	}
	return c.waitStoreRoom(quit) &&
		c.nodes.waitOK(quit) && // not while the clock is skewed or unknown, nor while fenced
		c.spreadPause(quit) // after handing shards back (shards_spread.go)
}

// waitWork returns how many workers are free when some are and a kind is
// registered. Otherwise it waits for a registration or a freed worker and
// returns 0, to be called again. It returns false when quit closes.
func (c *claimer) waitWork(quit <-chan struct{}) (int, bool) {
	free := c.pool.free()
	if len(c.reg.kindList()) == 0 {
		// Nothing registered: nothing here can run what the store
		// holds (no kinds named would mean any kind). RegisterJob
		// wakes the loop.
		select {
		case <-c.wake:
		case <-quit:
			return 0, false
		}
		return 0, true
	}
	if free == 0 {
		select {
		case <-c.pool.freed:
		case <-quit:
			return 0, false
		}
		return 0, true
	}
	// Drain a pending wake-up: this claim covers it.
	select {
	case <-c.wake:
	default:
	}
	return free, true
}

// roundResult is what one claim from each queue brought.
type roundResult struct {
	full    bool          // the workers are full, or a claim took all it asked
	next    time.Time     // the earliest next run time a short claim reported
	pending *pendingClaim // a claim whose reply was lost, to repeat first
	err     error         // the last claim's error, if any failed
}

// round claims from each queue in turn, starting at the start-th, while
// workers are free.
func (c *claimer) round(start, free int) roundResult {
	var r roundResult
	for i := range c.queues {
		q := c.queues[(start+i)%len(c.queues)]
		if free == 0 {
			r.full = true
			break
		}
		limit := min(free, c.batch)
		if c.full.Load() {
			limit = 1 // a probe (see waitStoreRoom)
		}
		c.seq++
		n, nextRun, err := c.claim(q, limit, c.seq)
		if err != nil {
			r.err = err
			if errors.Is(err, store.ErrFull) {
				c.setStoreFull(true)
				break
			}
			if ambiguous(err) {
				// Repeat this very claim before any other.
				r.pending = &pendingClaim{queue: q, limit: limit, seq: c.seq}
				break
			}
			continue
		}
		free -= n
		if n == limit {
			r.full = true
		} else if !nextRun.IsZero() && (r.next.IsZero() || nextRun.Before(r.next)) {
			r.next = nextRun
		}
	}
	return r
}

// sleepUntil sleeps until next (at most a poll interval; a poll interval
// when next is zero) or a wake-up. It returns false when
// quit closes first.
func (c *claimer) sleepUntil(next time.Time, quit <-chan struct{}) bool {
	wait := c.poll
	if !next.IsZero() {
		wait = min(wait, next.Sub(c.clock.Now()))
	}
	if wait <= 0 {
		return true
	}
	// Every claim of the round took less than it asked: the queues hold
	// no more the node may take, so a worker that frees up now changes
	// nothing, and only a wake-up or the next run time does. (Waking on
	// freed workers here cost a claim per job at low rates: each job's
	// end woke a claim that found nothing.) A retry wakes the loop
	// (completer.go).
	t := c.clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C():
	case <-c.wake:
	case <-quit:
		return false
	}
	return true
}

// ambiguous reports whether a failed store call may have been applied all
// the same: anything but a refusal the store makes before changing
// anything (invalid parameters, no space).
func ambiguous(err error) bool {
	return !errors.Is(err, store.ErrInvalid) && !errors.Is(err, store.ErrFull)
}

// waitStoreRoom paces claiming while the store refuses outcomes for want
// of space (full): claiming more would start work whose end cannot
// be recorded. While the flag is set it waits a poll interval (wake-ups
// do not shorten it) and then lets one probe claim of a single instance through:
// a store out of space refuses that claim whole (store.ErrFull); one that
// takes it starts one attempt, and that attempt's outcome, once written,
// clears the flag. Without the probe, a node whose outcome writes were all
// given up would have no write left to learn that room came back, and
// would never claim again. So while the store is full a node starts at
// most one attempt a poll interval.
// It returns false when the manager stops meanwhile.
func (c *claimer) waitStoreRoom(quit <-chan struct{}) bool {
	if !c.full.Load() {
		c.fullLogged = false
		return true
	}
	if !c.fullLogged {
		c.log.Warn("store is out of space; claiming paused until it has room again (one probe claim of one instance a poll interval)")
		c.fullLogged = true
	}
	t := c.clock.NewTimer(c.poll)
	defer t.Stop()
	select {
	case <-t.C():
	case <-quit:
		return false
	}
	return true
}

// setStoreFull records whether the store's last answer to an outcome write
// was store.ErrFull, and wakes the claim loop when room came back.
func (c *claimer) setStoreFull(full bool) {
	if c.full.Swap(full) && !full {
		c.log.Info("store has room again; claiming resumed")
		c.ring()
	}
}

// ring wakes the claim loop.
func (c *claimer) ring() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// claimParams describes claim number seq of up to limit instances of
// queue q at now: the one place where a claim is described.
func (c *claimer) claimParams(q string, limit int, seq uint64, now time.Time) *store.ClaimParams {
	// Only the kinds registered here, so no other node's work lands on
	// this one as an unknown kind (a kind unregistered after the claim can
	// still arrive: execute handles it).
	p := &store.ClaimParams{
		Queue: q, Owner: c.node, Limit: limit, Now: now, LeaseUntil: now.Add(c.lease), ClaimSeq: seq,
		Kinds: c.reg.kindList(), Labels: c.labels,
	}
	// The cluster's concurrency limits, as last read (limits.go). A
	// store that cannot enforce them is not asked for what they bound:
	// nil when that leaves nothing to claim.
	if !applyLimits(p, c.limits.cached(), c.limits.enforce) || !applyRateLimits(p, c.limits.cachedRates(), c.limits.enforceRates) {
		return nil
	}
	// This manager's own limits: kinds at theirs left out, the batch
	// no larger than the room left.
	ok, held := applyNodeLimits(p, c.nodeLimits, c.active)
	c.nodeHeld.Store(held)
	if !ok {
		return nil
	}
	return p
}

// releasePending repeats, at Stop, a claim whose reply was lost, and hands
// back what it claimed (the attempt not counted), so nothing it took waits
// for its lease to end. It is bounded by a short timeout: the store may be
// the reason the reply was lost.
func (c *claimer) releasePending(p *pendingClaim) {
	now := c.clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cp := c.claimParams(p.queue, p.limit, p.seq, now)
	if cp == nil {
		return // nothing could have been claimed (see claimParams)
	}
	res, err := c.store.Claim(ctx, cp)
	if err != nil {
		c.log.Warn("stopping: could not repeat a claim whose reply was lost; what it claimed will be rescued when its lease ends", "queue", p.queue, "err", err)
		return
	}
	for _, rec := range res.Instances {
		ctx, cancel := context.WithCancelCause(c.run.ctx)
		a := &attempt{rec: rec, ctx: ctx, cancel: cancel}
		a.settled.Store(settledGivenUp)
		c.active.add(a)
		c.completer.submit(&finishReq{a: a, inst: newInstance(rec.Clone(), c.logs), out: store.Outcome{
			ID: rec.ID, Attempt: rec.Attempt, State: store.Scheduled, RunAt: rec.RunAt, Release: true,
			Error: "handed back: " + ErrShutdown.Error(),
		}})
		cancel(nil)
	}
}

// claim claims up to limit instances of queue q and starts them, as claim
// number seq of this manager (a repeat of a claim whose reply was lost
// passes that claim's number). It returns how many it claimed and the
// store's next run time.
func (c *claimer) claim(q string, limit int, seq uint64) (int, time.Time, error) {
	now := c.clock.Now()
	ctx, cancel := context.WithTimeout(c.run.ctx, 30*time.Second)
	defer cancel()
	c.limits.current(ctx) // read again when stale
	cp := c.claimParams(q, limit, seq, now)
	if cp == nil {
		if c.nodeHeld.Load() {
			// Held by a node limit: its slots come back with outcomes
			// written here, which wake the claim loop while waiting is
			// set; write the held ones now.
			c.limits.waiting.Store(true)
			c.completer.hurry()
			return 0, now.Add(limitRecheck), nil
		}
		return 0, time.Time{}, nil // every kind here is held back (see claimParams)
	}
	c.pool.take(limit)
	flushes := c.limits.flushes.Load()
	res, err := c.store.Claim(ctx, cp)
	if err != nil {
		c.pool.giveBack(limit)
		return 0, time.Time{}, err
	}
	// A node limit holds work back like a cluster one.
	limited := res.Limited || c.nodeHeld.Load()
	c.limits.waiting.Store(limited)
	if limited {
		// The slots are held until their outcomes are written: write the
		// ones the completer holds for its finish interval now, or a
		// limit as large as the workers would start only as many jobs as
		// it allows per interval.
		c.completer.hurry()
	}
	next := res.NextRunAt
	switch {
	case limited && c.limits.flushes.Load() != flushes:
		// Outcomes written during the claim may have freed slots, and
		// their wake-up came before waiting was set: claim again now.
		next = now
	case limited && (next.IsZero() || next.After(now.Add(limitRecheck))):
		// Work waits for a slot, which another node may release
		// without a wake-up: look again soon.
		next = now.Add(limitRecheck)
	}
	if at := c.limits.noteRetry(q, res.RetryAfter); !at.IsZero() && (next.IsZero() || at.Before(next)) {
		// Work waits for a rate limit: claim again when it lets one
		// start (ratelimit.go), not before.
		next = at
	}
	n := len(res.Instances) + len(res.Undecodable)
	c.pool.giveBack(limit - n)
	c.dispatch(res.Instances)
	if c.nodes.isFenced() {
		// Fenced while the claim was under way: give these up too.
		c.fenceAll()
	}
	for _, u := range res.Undecodable {
		c.terminateUndecodable(u)
	}
	return n, next, nil
}

// terminateUndecodable finishes a claimed attempt whose record the store
// could not decode as Terminated with the decode error, so a corrupt record
// never blocks the queue.
func (c *claimer) terminateUndecodable(u store.UndecodableRecord) {
	c.log.Error("claimed an undecodable record; terminating it", "instance", u.ID, "err", u.Err)
	rec := &store.Instance{ID: u.ID, Attempt: u.Attempt}
	ctx, cancel := context.WithCancelCause(c.run.ctx)
	a := &attempt{rec: rec, ctx: ctx, cancel: cancel}
	a.settled.Store(settledGivenUp)
	c.active.add(a)
	err := errors.Join(ErrPermanent, u.Err)
	c.completer.submit(&finishReq{a: a, out: store.Outcome{ID: u.ID, Attempt: u.Attempt, State: store.Terminated, Error: u.Err.Error()}, inst: newInstance(rec, c.logs), err: err})
	c.pool.release()
	cancel(nil)
}

// subscribe forwards the store's wake-ups for queue q to the claim loop.
func (c *claimer) subscribe(q string, quit <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-quit
		cancel()
	}()
	for try := 0; ; try++ {
		ch, err := c.notifier.Subscribe(ctx, q)
		if err == nil {
			try = 0
			c.storeWakes[q].Store(true)
			for range ch {
				c.ring()
			}
			c.storeWakes[q].Store(false)
		}
		if ctx.Err() != nil {
			return
		}
		d := retryDelay(try)
		c.log.Warn("store wake-ups ended; resubscribing", "queue", q, "err", err, "in", d)
		if !sleep(SystemClock{}, d, quit) {
			return
		}
	}
}

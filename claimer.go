package job

import (
	"context"
	"errors"
	"time"

	"github.com/jobkit/job/store"
)

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
func (m *Manager) claimLoop() {
	defer m.bg.Done()
	queues := m.cfg.queues
	start := 0
	failures := 0
	var pending *pendingClaim
	defer func() {
		if pending != nil {
			m.releasePending(pending)
		}
	}()
	for {
		select {
		case <-m.stopCh:
			return
		default:
		}
		if !m.waitStoreRoom() {
			return
		}
		// Not while the clock is skewed or unknown, nor while fenced.
		if !m.waitNodeOK(m.stopCh) {
			return
		}
		if !m.waitSpreadPause() { // after handing shards back (shards_spread.go)
			return
		}
		if pending != nil {
			n, _, err := m.claim(pending.queue, pending.limit, pending.seq)
			if err != nil {
				failures++
				d := retryDelay(failures - 1)
				m.log.Warn("repeating a claim whose reply was lost; retrying", "queue", pending.queue, "err", err, "in", d)
				if !sleep(SystemClock{}, d, m.stopCh) {
					return
				}
				continue
			}
			m.log.Info("repeated a claim whose reply was lost", "queue", pending.queue, "claimed", n)
			pending, failures = nil, 0
			continue
		}
		free := m.pool.free()
		if len(m.reg.kindList()) == 0 {
			// Nothing registered: nothing here can run what the store
			// holds (no kinds named would mean any kind). RegisterJob
			// wakes the loop.
			select {
			case <-m.wake:
			case <-m.stopCh:
				return
			}
			continue
		}
		if free == 0 {
			select {
			case <-m.pool.freed:
			case <-m.stopCh:
				return
			}
			continue
		}
		// Drain a pending wake-up: this claim covers it.
		select {
		case <-m.wake:
		default:
		}
		full := false
		var next time.Time
		var claimErr error
		for i := range queues {
			q := queues[(start+i)%len(queues)]
			if free == 0 {
				full = true
				break
			}
			limit := min(free, m.cfg.claimBatch)
			if m.storeFull.Load() {
				limit = 1 // a probe (see waitStoreRoom)
			}
			m.claimSeq++
			n, nextRun, err := m.claim(q, limit, m.claimSeq)
			if err != nil {
				claimErr = err
				if errors.Is(err, store.ErrFull) {
					m.setStoreFull(true)
					break
				}
				if ambiguous(err) {
					// Repeat this very claim before any other.
					pending = &pendingClaim{queue: q, limit: limit, seq: m.claimSeq}
					break
				}
				continue
			}
			free -= n
			if n == limit {
				full = true
			} else if !nextRun.IsZero() && (next.IsZero() || nextRun.Before(next)) {
				next = nextRun
			}
		}
		start++
		if claimErr != nil {
			failures++
			d := retryDelay(failures - 1)
			m.log.Warn("claim failed; retrying", "err", claimErr, "in", d)
			if !sleep(SystemClock{}, d, m.stopCh) {
				return
			}
			continue
		}
		failures = 0
		if full {
			continue
		}
		wait := m.cfg.pollInterval
		if !next.IsZero() {
			wait = min(wait, next.Sub(m.clock.Now()))
		}
		if wait <= 0 {
			continue
		}
		// Every claim of the round took less than it asked: the queues
		// hold no more the node may take, so a worker that frees up now
		// changes nothing, and only a wake-up or the next run time does.
		// (Waking on freed workers here cost a claim per job at low rates:
		// each job's end woke a claim that found nothing.) A retry
		// wakes the loop (completer.go).
		t := m.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-m.wake:
		case <-m.stopCh:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// ambiguous reports whether a failed store call may have been applied all
// the same: anything but a refusal the store makes before changing
// anything (invalid parameters, no space).
func ambiguous(err error) bool {
	return !errors.Is(err, store.ErrInvalid) && !errors.Is(err, store.ErrFull)
}

// waitStoreRoom paces claiming while the store refuses outcomes for want
// of space (storeFull): claiming more would start work whose end cannot
// be recorded. While the flag is set it waits a poll interval (wake-ups
// do not shorten it) and then lets one probe claim of a single instance through:
// a store out of space refuses that claim whole (store.ErrFull); one that
// takes it starts one attempt, and that attempt's outcome, once written,
// clears the flag. Without the probe, a node whose outcome writes were all
// given up would have no write left to learn that room came back, and
// would never claim again. So while the store is full a node starts at
// most one attempt a poll interval.
// It returns false when the manager stops meanwhile.
func (m *Manager) waitStoreRoom() bool {
	if !m.storeFull.Load() {
		m.fullLogged = false
		return true
	}
	if !m.fullLogged {
		m.log.Warn("store is out of space; claiming paused until it has room again (one probe claim of one instance a poll interval)")
		m.fullLogged = true
	}
	t := m.clock.NewTimer(m.cfg.pollInterval)
	defer t.Stop()
	select {
	case <-t.C():
	case <-m.stopCh:
		return false
	}
	return true
}

// setStoreFull records whether the store's last answer to an outcome write
// was store.ErrFull, and wakes the claim loop when room came back.
func (m *Manager) setStoreFull(full bool) {
	if m.storeFull.Swap(full) && !full {
		m.log.Info("store has room again; claiming resumed")
		m.notifyLocal()
	}
}

// releasePending repeats, at Stop, a claim whose reply was lost, and hands
// back what it claimed (the attempt not counted), so nothing it took waits
// for its lease to end. It is bounded by a short timeout: the store may be
// the reason the reply was lost.
func (m *Manager) releasePending(p *pendingClaim) {
	now := m.clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := m.store.Claim(ctx, &store.ClaimParams{
		Queue: p.queue, Owner: m.node, Limit: p.limit, Now: now, LeaseUntil: now.Add(m.cfg.lease), ClaimSeq: p.seq,
		Kinds: m.reg.kindList(), Labels: m.cfg.labels,
	})
	if err != nil {
		m.log.Warn("stopping: could not repeat a claim whose reply was lost; what it claimed will be rescued when its lease ends", "queue", p.queue, "err", err)
		return
	}
	for _, rec := range res.Instances {
		ctx, cancel := context.WithCancelCause(m.runCtx)
		a := &attempt{rec: rec, ctx: ctx, cancel: cancel}
		a.settled.Store(settledGivenUp)
		m.active.add(a)
		m.submit(&finishReq{a: a, inst: newInstance(rec.Clone(), m), out: store.Outcome{
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
func (m *Manager) claim(q string, limit int, seq uint64) (int, time.Time, error) {
	now := m.clock.Now()
	ctx, cancel := context.WithTimeout(m.runCtx, 30*time.Second)
	defer cancel()
	m.pool.take(limit)
	// Only the kinds registered here, so no other node's work lands on
	// this one as an unknown kind (a kind unregistered after the claim can
	// still arrive: execute handles it).
	res, err := m.store.Claim(ctx, &store.ClaimParams{
		Queue: q, Owner: m.node, Limit: limit, Now: now, LeaseUntil: now.Add(m.cfg.lease), ClaimSeq: seq,
		Kinds: m.reg.kindList(), Labels: m.cfg.labels,
	})
	if err != nil {
		m.pool.giveBack(limit)
		return 0, time.Time{}, err
	}
	n := len(res.Instances) + len(res.Undecodable)
	m.pool.giveBack(limit - n)
	m.dispatch(res.Instances)
	if m.fencedNow() {
		// Fenced while the claim was under way: give these up too.
		m.fenceAll()
	}
	for _, u := range res.Undecodable {
		m.terminateUndecodable(u)
	}
	return n, res.NextRunAt, nil
}

// terminateUndecodable finishes a claimed attempt whose record the store
// could not decode as Terminated with the decode error, so a corrupt record
// never blocks the queue.
func (m *Manager) terminateUndecodable(u store.UndecodableRecord) {
	m.log.Error("claimed an undecodable record; terminating it", "instance", u.ID, "err", u.Err)
	rec := &store.Instance{ID: u.ID, Attempt: u.Attempt}
	ctx, cancel := context.WithCancelCause(m.runCtx)
	a := &attempt{rec: rec, ctx: ctx, cancel: cancel}
	a.settled.Store(settledGivenUp)
	m.active.add(a)
	err := errors.Join(ErrPermanent, u.Err)
	m.submit(&finishReq{a: a, out: store.Outcome{ID: u.ID, Attempt: u.Attempt, State: store.Terminated, Error: u.Err.Error()}, inst: newInstance(rec, m), err: err})
	m.pool.release()
	cancel(nil)
}

// subscribe forwards the store's wake-ups for queue q, if it has any, to
// the claim loop.
func (m *Manager) subscribe(q string) {
	defer m.bg.Done()
	n, ok := m.cfg.store.(store.Notifier) // the store itself, not observedStore
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-m.stopCh
		cancel()
	}()
	for try := 0; ; try++ {
		ch, err := n.Subscribe(ctx, q)
		if err == nil {
			try = 0
			m.storeWakes[q].Store(true)
			for range ch {
				m.notifyLocal()
			}
			m.storeWakes[q].Store(false)
		}
		if ctx.Err() != nil {
			return
		}
		d := retryDelay(try)
		m.log.Warn("store wake-ups ended; resubscribing", "queue", q, "err", err, "in", d)
		if !sleep(SystemClock{}, d, m.stopCh) {
			return
		}
	}
}

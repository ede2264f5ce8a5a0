package job

import (
	"context"
	"errors"
	"time"

	"github.com/jobkit/job/store"
)

// claimLoop claims ready instances while workers are free. It claims at
// most as many as there are free workers, from the manager's queues in
// turn; when a claim comes back short it sleeps until the earliest next
// run time the store reported, a wake-up (a local schedule, a store
// notification, a freed worker), or the poll interval, whichever is first.
func (m *Manager) claimLoop() {
	defer m.bg.Done()
	queues := m.cfg.queues
	start := 0
	failures := 0
	for {
		select {
		case <-m.stopCh:
			return
		default:
		}
		free := m.pool.free()
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
			n, nextRun, err := m.claim(q, limit)
			if err != nil {
				claimErr = err
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
		t := m.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-m.wake:
		case <-m.pool.freed:
		case <-m.stopCh:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// claim claims up to limit instances of queue q and starts them. It
// returns how many it claimed and the store's next run time.
func (m *Manager) claim(q string, limit int) (int, time.Time, error) {
	now := m.clock.Now()
	ctx, cancel := context.WithTimeout(m.runCtx, 30*time.Second)
	defer cancel()
	m.pool.take(limit)
	res, err := m.store.Claim(ctx, &store.ClaimParams{
		Queue: q, Owner: m.node, Limit: limit, Now: now, LeaseUntil: now.Add(m.cfg.lease),
	})
	if err != nil {
		m.pool.giveBack(limit)
		return 0, time.Time{}, err
	}
	n := len(res.Instances) + len(res.Undecodable)
	m.pool.giveBack(limit - n)
	m.dispatch(res.Instances)
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
	a.settled.Store(true)
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
	n, ok := m.store.(store.Notifier)
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
			for range ch {
				m.notifyLocal()
			}
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

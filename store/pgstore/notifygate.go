package pgstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jobkit/job/store"
)

// WithNotifyWindow coalesces the wake-up notifications of this Store's
// enqueues, per queue, over a window of d (default 0: every enqueue
// statement notifies its queues, as PostgreSQL delivers each to every
// listening connection, where each delivery is a transaction of its own).
//
// With a window, the first enqueue into a queue after a quiet spell of d
// notifies in its own statement, as without one, so a lone job is picked
// up as fast as ever. An enqueue that comes less than d after the queue's
// last notification sends none: the first enqueue into the queue after
// the window notifies for all of them in its own statement, and when none
// comes within d/2 more, one notification goes out in a statement of its
// own (SELECT pg_notify). The trade-off: at a steady rate above one job
// per d, a job waits up to d (1.5 d when the stream stops) before idle
// workers hear of it, and in exchange the queue costs about one
// notification, one delivery per listening connection and one claim per
// worker process per d instead of one each per job. Enqueues in a
// caller's transaction (WithTx), with unique keys, and batches stored with
// COPY always notify at their commit. Negative is invalid.
func WithNotifyWindow(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: pgstore.WithNotifyWindow(%v); want 0 (notify every enqueue) or more", store.ErrInvalid, d)
		}
		c.window = d
		return nil
	}
}

// notifyGate decides, per queue, whether an enqueue notifies in its own
// statement (WithNotifyWindow) and sends the notifications it held back.
type notifyGate struct {
	mu sync.Mutex
	q  map[string]*gateQueue
}

type gateQueue struct {
	last  time.Time   // when the last notification was sent (or decided)
	owed  bool        // an enqueue since last committed without one
	timer *time.Timer // sends the owed notification at last + window
}

// hold reports, for each distinct queue of queues, whether an enqueue at
// now should leave it out of its notifications: true when the queue was
// notified less than the window ago. A queue not held counts as notified
// at now.
func (s *Store) hold(queues []string, now time.Time) []string {
	if s.cfg.window <= 0 {
		return nil
	}
	g := &s.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.q == nil {
		g.q = map[string]*gateQueue{}
	}
	var held []string
	seen := map[string]bool{}
	for _, q := range queues {
		if seen[q] {
			continue
		}
		seen[q] = true
		e := g.q[q]
		if e == nil {
			e = &gateQueue{}
			g.q[q] = e
		}
		if !e.last.IsZero() && now.Sub(e.last) < s.cfg.window && now.Sub(e.last) >= 0 {
			held = append(held, q)
			continue
		}
		// Notified by this enqueue: it covers every enqueue held before.
		e.last, e.owed = now, false
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
	}
	return held
}

// owe records that enqueues into the held queues committed without a
// notification: one goes out when the queue's window ends.
func (s *Store) owe(held []string) {
	if len(held) == 0 {
		return
	}
	g := &s.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range held {
		e := g.q[q]
		if e == nil || e.owed {
			continue
		}
		e.owed = true
		q := q
		// The first enqueue after the window carries it in its own
		// statement (hold); only when none comes within half a window
		// more does it cost a statement of its own.
		e.timer = time.AfterFunc(max(time.Until(e.last.Add(s.cfg.window+s.cfg.window/2)), 0), func() { s.sendOwed(q) })
	}
}

// sendOwed sends the notification owed for queue q, if it still is. A
// failure leaves those jobs to the claimers' poll.
func (s *Store) sendOwed(q string) {
	g := &s.gate
	g.mu.Lock()
	e := g.q[q]
	if e == nil || !e.owed {
		g.mu.Unlock()
		return
	}
	e.owed, e.timer, e.last = false, nil, time.Now()
	g.mu.Unlock()
	s.cmu.Lock()
	if s.stopped {
		s.cmu.Unlock()
		return
	}
	s.wg.Add(1)
	s.cmu.Unlock()
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, _ = s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, s.payload(q))
}

// stopGate stops the timers of owed notifications (Close).
func (s *Store) stopGate() {
	g := &s.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.q {
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
	}
}

package job

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jobkit/job/store"
)

// stopAllowance is how long an executor has, once its context is
// canceled, before the engine acts as if it had returned: a sixth of the
// lease (5 s with the default lease). It is the margin before a lease's
// deadline at which an attempt that could not renew it is canceled, and
// the grace after an attempt's timeout at which an executor that ignores
// its context is abandoned.
func (c *config) stopAllowance() time.Duration { return c.lease / 6 }

// The watchdog enforces the deadlines of running attempts on the manager's
// clock. For each attempt whose executor still runs it acts at the first
// of:
//
//   - the timeout (start + timeout): the attempt's context is canceled with
//     cause ErrTimeout (only with a clock other than SystemClock: on the
//     system clock the deadline the context carries does it);
//   - the abandonment (timeout + stop allowance): the executor ignored its
//     context; the attempt is recorded as timed out without it, and its
//     goroutine, which Go cannot stop, keeps its worker slot until it
//     returns;
//   - the fence (lease deadline - stop allowance, the deadline moving with
//     each successful renewal): the lease could not be renewed, so the
//     attempt's context is canceled with cause ErrLeaseLost before any
//     other manager may rescue the instance. As for the node's fence, what
//     its executor returns is written (a hand-back when the cancel stopped
//     it), and the store refuses it if the instance was rescued meanwhile.
//
// Attempts wait in a heap ordered by their next due time, so the watchdog
// sleeps exactly until the next one and costs O(log n) per attempt.
type watchlist struct {
	mu        sync.Mutex
	h         watchHeap
	allowance time.Duration
	armed     time.Time     // when the watchdog wakes next; zero while it waits for work
	wake      chan struct{} // an attempt is due before armed
}

// watchEvent is what the watchdog does to an attempt.
type watchEvent int

const (
	watchTimeout watchEvent = iota
	watchAbandon
	watchFence
)

type watchHeap []*attempt

func (h watchHeap) Len() int           { return len(h) }
func (h watchHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h watchHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *watchHeap) Push(x any) {
	a := x.(*attempt)
	a.hidx = len(*h)
	*h = append(*h, a)
}
func (h *watchHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	a.hidx = -1
	return a
}

// abandonAt is when an attempt with a timeout is given up if its executor
// has not returned.
func (w *watchlist) abandonAt(a *attempt) time.Time {
	return a.start.Add(a.timeout + w.allowance)
}

// leaseCap is the latest deadline a lease of a is ever renewed to: its
// abandonment plus the stop allowance, time enough to record the outcome
// while the lease still holds. Zero when a has no timeout.
func (w *watchlist) leaseCap(a *attempt) time.Time {
	if a.timeout <= 0 {
		return time.Time{}
	}
	return w.abandonAt(a).Add(w.allowance)
}

// nextDue is the first time the watchdog must look at a. w.mu is held.
func (w *watchlist) nextDue(a *attempt) time.Time {
	due := a.leaseUntil.Add(-w.allowance)
	if a.timeout > 0 {
		if a.clockTimeout && !a.timedOut {
			due = earliest(due, a.start.Add(a.timeout))
		}
		due = earliest(due, w.abandonAt(a))
	}
	return due
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// add starts watching attempts whose executors are about to run.
func (w *watchlist) add(as []*attempt) {
	w.mu.Lock()
	wake := false
	for _, a := range as {
		a.due = w.nextDue(a)
		heap.Push(&w.h, a)
		wake = wake || w.armed.IsZero() || a.due.Before(w.armed)
	}
	w.mu.Unlock()
	if wake {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// remove stops watching a: its end is decided.
func (w *watchlist) remove(a *attempt) {
	w.mu.Lock()
	if a.hidx >= 0 && a.hidx < len(w.h) && w.h[a.hidx] == a {
		heap.Remove(&w.h, a.hidx)
	}
	w.mu.Unlock()
}

// leases returns the current lease deadlines of as.
func (w *watchlist) leases(as []*attempt) []time.Time {
	out := make([]time.Time, len(as))
	w.mu.Lock()
	for i, a := range as {
		out[i] = a.leaseUntil
	}
	w.mu.Unlock()
	return out
}

// extend records that the store renewed the leases of as until until. A
// later deadline only moves the fence later, so the watchdog is not woken:
// it finds the new deadline when it looks at the attempt.
func (w *watchlist) extend(as []*attempt, until time.Time) {
	w.mu.Lock()
	for _, a := range as {
		if until.After(a.leaseUntil) {
			a.leaseUntil = until
		}
	}
	w.mu.Unlock()
}

// take returns the attempts due by now with what to do to each, and when
// the next one is due (zero when none is watched).
func (w *watchlist) take(now time.Time) (due []*attempt, events []watchEvent, next time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.h) > 0 && !w.h[0].due.After(now) {
		a := w.h[0]
		switch {
		case a.timeout > 0 && !now.Before(w.abandonAt(a)):
			heap.Pop(&w.h)
			due, events = append(due, a), append(events, watchAbandon)
		case !now.Before(a.leaseUntil.Add(-w.allowance)):
			heap.Pop(&w.h)
			due, events = append(due, a), append(events, watchFence)
		case a.timeout > 0 && a.clockTimeout && !a.timedOut && !now.Before(a.start.Add(a.timeout)):
			a.timedOut = true
			a.due = w.nextDue(a)
			heap.Fix(&w.h, 0)
			due, events = append(due, a), append(events, watchTimeout)
		default: // the lease was renewed since
			a.due = w.nextDue(a)
			heap.Fix(&w.h, 0)
		}
	}
	if len(w.h) > 0 {
		next = w.h[0].due
	}
	w.armed = next
	return due, events, next
}

// watchdogDeps is what the watchdog uses.
type watchdogDeps struct {
	watch     *watchlist
	clock     Clock
	log       *slog.Logger
	allowance time.Duration // the stop allowance (config.stopAllowance)
	active    *activeSet
	completer *completer // where an abandoned attempt's outcome goes
	logs      logSink
	// giveUpAs decides an attempt's end while its executor may still run
	// (see Manager.giveUpAs); false when it was already decided.
	giveUpAs func(a *attempt, how int32) bool
	// outcome decides how an attempt ended (see Manager.outcome).
	outcome func(a *attempt, results []any, err, cause error) store.Outcome
}

// watchdog acts on the attempts its watchlist says are due: it times
// them out, abandons them, or fences them (see watchlist). It runs from
// Start until Stop has decided the end of every attempt, and waits on the
// manager's clock.
type watchdog struct {
	watchdogDeps
	loops
	handing sync.WaitGroup // outcomes handed over to the completer in the background
}

var _ service = (*watchdog)(nil)

func newWatchdog(d watchdogDeps) *watchdog { return &watchdog{watchdogDeps: d} }

func (w *watchdog) start() {
	w.reset()
	w.goLoop(w.run)
}

// wait returns when the loop has returned and every outcome it handed
// over is queued.
func (w *watchdog) wait() {
	w.loops.wait()
	w.handing.Wait()
}

// run is the watchdog's loop.
func (w *watchdog) run(quit <-chan struct{}) {
	for {
		due, events, next := w.watch.take(w.clock.Now())
		for i, a := range due {
			switch events[i] {
			case watchTimeout:
				a.cancel(ErrTimeout)
			case watchAbandon:
				w.abandon(a)
			case watchFence:
				w.fence(a)
			}
		}
		var (
			t     Timer
			fired <-chan time.Time
		)
		if !next.IsZero() {
			t = w.clock.NewTimer(next.Sub(w.clock.Now()))
			fired = t.C()
		}
		select {
		case <-fired:
		case <-w.watch.wake:
		case <-quit:
			if t != nil {
				t.Stop()
			}
			return
		}
		if t != nil {
			t.Stop()
		}
	}
}

// fence cancels an attempt whose lease is about to end without a renewal,
// so that it stops before another manager may rescue the instance. The
// store may still hold the lease (the renewals failed, not the lease), so
// once the executor returns its outcome is written as after the node's
// fence: handed back, the attempt not counted, when the cancel stopped it,
// else what it ran to; the store's lease check refuses it when the lease
// ended and the instance was rescued meanwhile.
func (w *watchdog) fence(a *attempt) {
	if !w.giveUpAs(a, settledLeaseFenced) {
		return
	}
	a.cancel(ErrLeaseLost)
	w.active.remove(a) // observers learn of it with its outcome (fenceReason)
	w.log.Warn("lease not renewed in time; canceling the attempt so that no other manager runs it at the same time",
		"instance", a.rec.ID, "kind", a.rec.Kind, "attempt", a.rec.Attempt, "lease_until", a.leaseDeadline(w.watch))
}

// abandon records a timed-out attempt whose executor ignored its context
// for the stop allowance after its timeout. Go cannot stop a goroutine, so
// its executor runs on, holding its worker slot (concurrency stays
// bounded) and counted by Stuck, until it returns; what it returns is
// discarded.
func (w *watchdog) abandon(a *attempt) {
	if !w.giveUpAs(a, settledGivenUp) {
		return
	}
	a.cancel(ErrTimeout)
	allowance := w.allowance
	err := fmt.Errorf("%w after %v: the executor ignored its context for %v more and was abandoned", ErrTimeout, a.timeout, allowance)
	// A cancel request still wins; a shutdown does not make a running
	// executor's attempt a hand-back.
	cause := context.Cause(a.ctx)
	if !errors.Is(cause, ErrCanceled) {
		cause = nil
	}
	w.log.Warn("executor ignored its context past its timeout; recording the attempt as timed out. Its goroutine keeps its worker slot until it returns",
		"instance", a.rec.ID, "kind", a.rec.Kind, "attempt", a.rec.Attempt, "timeout", a.timeout, "grace", allowance)
	r := &finishReq{a: a, out: w.outcome(a, nil, err, cause), inst: newInstance(a.rec.Clone(), w.logs), err: err}
	if !w.completer.trySubmit(r) {
		// The outcome writer is behind (the store is slow): never block the
		// watchdog, other attempts' fences depend on it.
		w.handing.Add(1)
		go func() {
			defer w.handing.Done()
			w.completer.submit(r)
		}()
	}
}

// leaseDeadline reads a's lease deadline.
func (a *attempt) leaseDeadline(w *watchlist) time.Time { return w.leases([]*attempt{a})[0] }

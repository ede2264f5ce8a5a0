package job

import (
	"context"
	"errors"
	"fmt"
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

// submit queues an outcome for the completer, waiting while its queue is
// full. It reports false, and counts the outcome as not recorded, once
// Stop has closed the queue.
func (m *Manager) submit(r *finishReq) bool {
	m.finishMu.RLock()
	defer m.finishMu.RUnlock()
	if m.finishClosed {
		m.notRecorded(r.a, 1)
		if r.a.fenced() {
			m.cfg.obs.leaseLost(r.a.rec, r.a.fenceReason())
		}
		return false
	}
	m.unflushed.Add(1)
	m.finishCh <- r
	return true
}

// trySubmit queues an outcome if the completer's queue has room now.
func (m *Manager) trySubmit(r *finishReq) bool {
	m.finishMu.RLock()
	defer m.finishMu.RUnlock()
	if m.finishClosed {
		return false
	}
	m.unflushed.Add(1)
	select {
	case m.finishCh <- r:
		return true
	default:
		m.unflushed.Add(-1)
		return false
	}
}

// notRecorded counts n outcomes given up without being written.
func (m *Manager) notRecorded(a *attempt, n int) {
	m.lostOutcomes.Add(int64(n))
	if a != nil {
		m.active.remove(a)
	}
}

// completer writes outcomes in batches: it takes what has queued up (up to
// the finish batch size), waits up to the finish linger for more while
// other attempts still run, and writes the batch in one Finish call,
// retrying with backoff while the store fails; the attempts' leases are
// renewed until then, so nothing is rescued while it waits. It gives up
// when Stop says so (its ctx ended): then the leases lapse and the
// instances are rescued.
func (m *Manager) completer() {
	defer m.finishWG.Done()
	batch := make([]*finishReq, 0, m.cfg.finishBatch)
	var timer *time.Timer
	for r := range m.finishCh {
		batch = drainInto(append(batch[:0], r), m.finishCh)
		if m.cfg.finishLinger > 0 && len(batch) < cap(batch) && m.active.len() > len(batch) {
			// The linger is a cost knob, not a schedule: it runs on the
			// real clock, so a test's fake clock never stalls it.
			if timer == nil {
				timer = time.NewTimer(m.cfg.finishLinger)
			} else {
				timer.Reset(m.cfg.finishLinger)
			}
			batch = m.linger(batch, timer)
			timer.Stop()
		}
		m.flush(batch)
	}
}

// linger adds outcomes to batch until it is full, every running attempt
// has reported, the channel closes or timer fires.
func (m *Manager) linger(batch []*finishReq, timer *time.Timer) []*finishReq {
	for len(batch) < cap(batch) && m.active.len() > len(batch) {
		select {
		case r, ok := <-m.finishCh:
			if !ok {
				return batch
			}
			batch = drainInto(append(batch, r), m.finishCh)
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

func (m *Manager) flush(batch []*finishReq) {
	outs := make([]store.Outcome, len(batch))
	for i, r := range batch {
		outs[i] = r.out
	}
	var (
		res []store.FinishResult
		err error
	)
	for try := 0; ; try++ {
		if err = m.writeCtx.Err(); err != nil {
			err = fmt.Errorf("stopped before the store took them: %w", err)
		} else {
			ctx, cancel := context.WithTimeout(m.writeCtx, 30*time.Second)
			res, err = m.store.Finish(ctx, &store.FinishParams{Owner: m.node, Now: m.clock.Now(), Outcomes: outs})
			cancel()
			if err == nil && len(res) != len(outs) {
				err = fmt.Errorf("store returned %d results for %d outcomes", len(res), len(outs))
			}
		}
		// While the store refuses outcomes for want of space, the claim
		// loop claims nothing: work claimed now could not be recorded.
		m.setStoreFull(errors.Is(err, store.ErrFull))
		if err == nil {
			break
		}
		giveUp := errors.Is(err, store.ErrInvalid) || m.writeCtx.Err() != nil || try >= maxWriteTries
		if !giveUp {
			m.log.Warn("record outcomes; retrying", "count", len(outs), "try", try+1, "err", err)
			// The retry delay paces calls to the store: a real-time
			// wait, ended by Stop giving up.
			giveUp = !sleep(SystemClock{}, retryDelay(try), m.writeCtx.Done())
		}
		if giveUp {
			m.log.Error("record outcomes; giving them up, their leases will expire and be rescued", "count", len(outs), "err", err)
			m.lastWriteErr.Store(&err)
			res = make([]store.FinishResult, len(outs))
			for i := range res {
				res[i].Err = err
			}
			m.lostOutcomes.Add(int64(len(outs)))
			break
		}
	}
	retried := false
	now := m.clock.Now()
	var shardsEnded []*store.Instance // shards this batch ended (shards.go)
	for i, r := range batch {
		m.active.remove(r.a)
		if res[i].Err != nil {
			lost := errors.Is(res[i].Err, store.ErrLeaseLost)
			if lost {
				m.log.Warn("outcome discarded: lease lost", "instance", r.out.ID, "attempt", r.out.Attempt, "state", r.out.State)
			}
			switch {
			case r.a.fenced(): // refused or not written: the fence cost its lease
				m.cfg.obs.leaseLost(r.a.rec, r.a.fenceReason())
			case lost:
				m.cfg.obs.leaseLost(r.a.rec, LeaseLostFinish)
			}
			continue
		}
		if res[i].State == store.Scheduled && !m.storeWakesFor(r.a.rec.Queue) {
			// A retry, now or later: the claim loop, which may be waiting
			// for its poll interval (claimer.go), claims it or learns
			// its run time (the store's wake-up does when it has them).
			retried = true
		}
		m.cfg.obs.finished(r, res[i].State, now)
		m.afterFinish(r, res[i].State)
		if r.a.rec.IsShard() && res[i].State.Final() {
			shardsEnded = append(shardsEnded, &store.Instance{ID: r.out.ID, Parent: r.a.rec.Parent, State: res[i].State})
		}
	}
	m.shardsEnded(m.writeCtx, shardsEnded)
	m.unflushed.Add(-int64(len(batch)))
	m.signalChanged()
	if retried {
		m.notifyLocal()
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

package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/jobkit/job/store"
)

// HandlerStats counts the calls of a manager's job handlers (state-change,
// complete and terminate processors) since it was created.
type HandlerStats struct {
	// Calls is how many handler calls ran, including those that panicked.
	Calls int64
	// Panics is how many handler calls panicked. Each panic is recovered
	// and logged with its stack; the engine goes on.
	Panics int64
	// Dropped is how many handler calls never ran: their queue was full
	// (a handler too slow for the rate of state changes), or Stop's
	// context ended before they ran.
	Dropped int64
	// Queued is how many handler calls wait to run now.
	Queued int
}

// handlerCall is the handlers of one state change of one instance, run
// together and in this order: state change, then complete or terminate.
type handlerCall struct {
	job   *Job
	inst  Instance
	state State
	err   error // the attempt's error, for the terminate handler
}

// handlerRunner runs job handlers on a goroutine of its own, so a slow or
// panicking handler neither stalls nor crashes the claim loop and the
// outcome writer. While the manager runs, calls wait in a bounded queue
// (WithHandlerQueue) and run one at a time in the order they were queued;
// when the queue is full a call is dropped, counted and logged, never
// waited for. Before Start and after Stop there is no engine to protect:
// calls (from ScheduleJob and CancelInstance) run on the caller's
// goroutine, still panic-safe.
type handlerRunner struct {
	log *slog.Logger

	mu      sync.RWMutex // guards ch against sends after close
	ch      chan handlerCall
	done    chan struct{} // closed when the goroutine has returned
	abandon chan struct{} // closed by stop when its ctx ends: drop the rest

	calls, panics, dropped atomic.Int64
	pending                atomic.Int64 // queued or running on the handler goroutine (Wait reads it)
}

// start starts the handler goroutine with a queue of size n.
func (h *handlerRunner) start(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ch = make(chan handlerCall, n)
	h.done = make(chan struct{})
	h.abandon = make(chan struct{})
	go h.loop(h.ch, h.done, h.abandon)
}

func (h *handlerRunner) loop(ch <-chan handlerCall, done, abandon chan struct{}) {
	defer close(done)
	for c := range ch {
		select {
		case <-abandon:
			h.dropped.Add(1)
			h.pending.Add(-1)
			continue
		default:
		}
		h.run(c)
		h.pending.Add(-1)
	}
}

// stop closes the queue and waits until the calls queued so far have run
// or ctx ends; then the calls still queued are dropped. It reports how many
// calls were still queued or running when ctx ended. A handler that never
// returns keeps its goroutine: Go cannot end it.
func (h *handlerRunner) stop(ctx context.Context) (pending int) {
	h.mu.Lock()
	ch, done, abandon := h.ch, h.done, h.abandon
	h.ch = nil
	if ch != nil {
		close(ch)
	}
	h.mu.Unlock()
	if ch == nil {
		return 0
	}
	select {
	case <-done:
		return 0
	case <-ctx.Done():
		pending = len(ch) + 1
		close(abandon)
		return pending
	}
}

// submit runs c on the handler goroutine, or on the caller's when the
// manager is not running.
func (h *handlerRunner) submit(c handlerCall) {
	h.mu.RLock()
	if h.ch == nil {
		h.mu.RUnlock()
		h.run(c)
		return
	}
	h.pending.Add(1) // before the send, so the loop never takes it below zero
	select {
	case h.ch <- c:
		h.mu.RUnlock()
		return
	default:
	}
	h.mu.RUnlock()
	h.pending.Add(-1)
	// Full: the handlers are slower than the state changes. Waiting would
	// stall the engine behind them; drop the call and say so, at the first
	// drop and every 1,000th after it.
	if n := h.dropped.Add(1); n == 1 || n%1000 == 0 {
		h.log.Warn("job handler queue full; dropping handler calls (see WithHandlerQueue)",
			"kind", c.job.kind, "instance", c.inst.Info().ID, "state", c.state, "dropped", n, "queue", cap(h.ch))
	}
}

// run calls c's handlers, each recovered on its own, so a state-change
// handler that panics does not keep the complete handler from running.
func (h *handlerRunner) run(c handlerCall) {
	j := c.job
	if j.onStateChange != nil {
		h.call(c, "state change", func() { j.onStateChange(c.inst, c.state) })
	}
	switch c.state {
	case store.Completed:
		if j.onComplete != nil {
			h.call(c, "complete", func() { j.onComplete(c.inst, c.inst.Results()) })
		}
	case store.Terminated, store.TimedOut:
		if j.onTerminate != nil {
			err := c.err
			if err == nil {
				if msg := c.inst.Info().Error; msg != "" {
					err = errors.New(msg)
				}
			}
			h.call(c, "terminate", func() { j.onTerminate(c.inst, err) })
		}
	}
}

func (h *handlerRunner) call(c handlerCall, which string, fn func()) {
	h.calls.Add(1)
	defer func() {
		if p := recover(); p != nil {
			h.panics.Add(1)
			h.log.Error("job handler panicked", "handler", which, "kind", c.job.kind, "instance", c.inst.Info().ID,
				"state", c.state, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	fn()
}

func (h *handlerRunner) stats() HandlerStats {
	h.mu.RLock()
	queued := 0
	if h.ch != nil {
		queued = len(h.ch)
	}
	h.mu.RUnlock()
	return HandlerStats{Calls: h.calls.Load(), Panics: h.panics.Load(), Dropped: h.dropped.Load(), Queued: queued}
}

// HandlerStats counts the calls of the manager's job handlers: how many
// ran, panicked, and were dropped.
func (m *Manager) HandlerStats() HandlerStats { return m.handlers.stats() }

// stateChanged hands the state-change handler of j, if any, the change of
// inst to state.
func (m *Manager) stateChanged(j *Job, inst Instance, state State) {
	if j == nil || j.onStateChange == nil {
		return
	}
	m.handlers.submit(handlerCall{job: j, inst: inst, state: state})
}

// afterFinish hands the job's handlers a recorded outcome, in the state
// the store applied: Canceled, not a retry, when the instance's cancel was
// requested while its attempt ran (see store.Queue.Finish).
func (m *Manager) afterFinish(r *finishReq, state State) {
	if state != r.out.State {
		m.log.Info("canceled instead of run again: its cancel was requested while the attempt ran",
			"instance", r.out.ID, "attempt", r.out.Attempt, "err", r.out.Error)
	}
	j := r.a.job
	if j == nil || (j.onStateChange == nil && j.onComplete == nil && j.onTerminate == nil) {
		return
	}
	rec := r.inst.rec
	rec.State, rec.Error, rec.Result = state, r.out.Error, r.out.Result
	rec.UpdatedAt = m.clock.Now()
	rec.CancelRequested = false
	if state.Final() {
		rec.FinishedAt = rec.UpdatedAt
	} else {
		rec.RunAt = r.out.RunAt
		if r.out.Release {
			rec.Attempt--
		}
	}
	r.inst.info.fill(rec)
	m.handlers.submit(handlerCall{job: j, inst: r.inst, state: state, err: r.err})
}

// WithTerminateVerdict calls fn after each failed attempt of an instance,
// on the worker that ran it, before the outcome is recorded, and lets it
// decide the outcome: go-job's terminate processor. err is what the
// attempt failed with: the executor's error, a recovered panic (ErrPanic)
// or its timeout (ErrTimeout; that error also matches
// context.DeadlineExceeded, as go-job's handlers test it). fn returns:
//
//   - nil: the attempt succeeded after all. The instance is Completed
//     with the results the executor returned (none when it timed out),
//     and the complete processor runs.
//   - err itself: the failure stands; the instance is retried if it has
//     retries left, else Terminated or TimedOut.
//   - another error: the attempt failed with that one instead (wrap it
//     with Permanent to stop retrying; an error that does not wrap
//     ErrTimeout ends a timed-out instance Terminated).
//
// fn is not called when the attempt did not fail, was canceled, was
// handed back by Stop or a fence, could not decode its arguments (its
// executor did not run), or ran past its timeout and the grace period
// without returning (the engine then records it TimedOut without
// waiting). A panic in fn is recovered, logged and counted
// (Manager.HandlerStats), and err stands. fn runs while the attempt still
// holds its worker slot and lease: keep it short. The terminate processor
// (WithTerminateProcessor) still runs after an instance ends Terminated or
// TimedOut, with the error fn returned.
func WithTerminateVerdict(fn func(ji Instance, err error) error) JobOption {
	return jobOption(func(j *Job) error { j.verdict = fn; return nil })
}

// deadlineError is a timed-out attempt's error as a verdict sees it: it
// also matches context.DeadlineExceeded, the error go-job's terminate
// processors test for; its text is the attempt's own.
type deadlineError struct{ error }

func (e deadlineError) Unwrap() []error { return []error{e.error, context.DeadlineExceeded} }

// verdict returns the outcome error of a failed attempt of a (err) after
// its job's terminate verdict, if it has one and the attempt's end is the
// executor's to decide.
func (m *Manager) verdict(a *attempt, inst Instance, err error) error {
	j := a.job
	if err == nil || j == nil || j.verdict == nil || errors.Is(err, ErrCanceled) {
		return err
	}
	if c := context.Cause(a.ctx); c != nil && !errors.Is(c, ErrTimeout) {
		return err // canceled, stopped or fenced: not a failure to judge
	}
	in := err
	if errors.Is(err, ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		in = deadlineError{err}
	}
	out := err
	m.handlers.call(handlerCall{job: j, inst: inst, state: store.Processing, err: err}, "terminate verdict", func() {
		out = j.verdict(inst, in)
	})
	if de, ok := out.(deadlineError); ok {
		out = de.error
	}
	return out
}

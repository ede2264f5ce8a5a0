package job

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/store"
)

// pool counts worker slots. A slot is taken for each claimed attempt and
// given back when its executor returns; the claim loop never claims more
// than the free slots, so nothing claimed waits for a worker.
type pool struct {
	mu    sync.Mutex
	size  int
	busy  int
	freed chan struct{} // signalled when a slot frees up
}

func newPool(size int) *pool { return &pool{size: size, freed: make(chan struct{}, 1)} }

func (p *pool) free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(0, p.size-p.busy)
}

func (p *pool) take(n int) {
	p.mu.Lock()
	p.busy += n
	p.mu.Unlock()
}

func (p *pool) giveBack(n int) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	p.busy -= n
	p.mu.Unlock()
}

// release gives a slot back. It wakes the claim loop only once enough
// slots are free to be worth a claim (a quarter of the pool, or all of
// them), so a busy pool claims in batches instead of one instance per
// finished one.
func (p *pool) release() {
	p.mu.Lock()
	p.busy--
	free := p.size - p.busy
	wake := p.busy == 0 || free >= max(1, p.size/4)
	p.mu.Unlock()
	if wake {
		select {
		case p.freed <- struct{}{}:
		default:
		}
	}
}

func (p *pool) resize(n int) {
	p.mu.Lock()
	p.size = n
	p.mu.Unlock()
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

func (p *pool) stats() (size, busy int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size, p.busy
}

// attempt is one claimed attempt this manager holds the lease of.
type attempt struct {
	rec    *store.Instance
	job    *Job // nil when the kind is not registered here
	ctx    context.Context
	cancel context.CancelCauseFunc
	// settled is set once (from unsettled), by whoever decides the
	// attempt's end first: the executor's return (settledRun), or the
	// engine giving the attempt up while the executor runs: a lease the
	// store reports lost, an abandoned timeout, Stop (settledGivenUp), the
	// node's fence (settledFenced), or the watchdog's fence of a lease it
	// could not renew (settledLeaseFenced).
	settled atomic.Int32

	start   time.Time     // when it was dispatched, on the manager's clock
	timeout time.Duration // the attempt's timeout; 0 for none
	// Guarded by the manager's watchlist mutex.
	leaseUntil time.Time // the lease deadline: from Claim, then each Renew
	due        time.Time // when the watchdog next looks at it
	hidx       int       // index in the watchlist heap, -1 when not in it
	timedOut   bool      // its context was canceled with ErrTimeout
	// clockTimeout: the watchdog cancels the attempt at its timeout. On
	// the system clock the deadline its context carries does that, so the
	// executor sees context.DeadlineExceeded as Go code expects.
	clockTimeout bool
}

// How an attempt's end was decided (attempt.settled).
const (
	unsettled      int32 = iota
	settledRun           // its executor (or join step) returned first
	settledGivenUp       // the engine gave it up: its outcome is not this executor's to write
	// settledFenced: the node fenced itself (node.go). Its lease may
	// still be this node's: once the executor returns, its outcome is
	// written unless the fence stopped it, and the store's lease check
	// refuses it if another node rescued the instance meanwhile.
	settledFenced
	// settledLeaseFenced: its lease could not be renewed and is about to
	// end (watchdog.go). The store may still hold it, as for a node's
	// fence, and its outcome is written the same way.
	settledLeaseFenced
)

// settle decides a's end as its executor's; false when it was already
// decided (given up or fenced).
func (a *attempt) settle() bool { return a.settled.CompareAndSwap(unsettled, settledRun) }

// isSettled reports whether a's end is decided.
func (a *attempt) isSettled() bool { return a.settled.Load() != unsettled }

// fenced reports whether a was given up by a fence, the node's or its
// lease's: the store may still hold its lease, so what its executor
// returns is written all the same.
func (a *attempt) fenced() bool {
	s := a.settled.Load()
	return s == settledFenced || s == settledLeaseFenced
}

func (a *attempt) ref() store.LeaseRef { return store.LeaseRef{ID: a.rec.ID, Attempt: a.rec.Attempt} }

// activeSet is the attempts this manager holds leases for: running, or
// finished but not yet recorded. The renewer keeps all of them alive.
type activeSet struct {
	mu sync.Mutex
	m  map[string]*attempt
}

func (s *activeSet) add(a *attempt) {
	s.mu.Lock()
	s.m[a.rec.ID] = a
	s.mu.Unlock()
}

func (s *activeSet) remove(a *attempt) {
	s.mu.Lock()
	if s.m[a.rec.ID] == a {
		delete(s.m, a.rec.ID)
	}
	s.mu.Unlock()
}

func (s *activeSet) get(id string) *attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

func (s *activeSet) snapshot() []*attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*attempt, 0, len(s.m))
	for _, a := range s.m {
		out = append(out, a)
	}
	return out
}

func (s *activeSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// workerIdle is how long a worker goroutine waits for its next attempt
// before it exits.
const workerIdle = time.Second

// dispatch starts claimed attempts; their slots were taken by the claim
// loop. Each goes to an idle worker goroutine when one is waiting, else to
// a new one, so a busy manager reuses goroutines (and the stacks they have
// grown) instead of starting one per job.
func (m *Manager) dispatch(recs []*store.Instance) {
	if len(recs) == 0 {
		return
	}
	now := m.clock.Now()
	_, systemClock := m.clock.(SystemClock)
	as := make([]*attempt, len(recs))
	for i, rec := range recs {
		j, _ := m.reg.get(rec.Kind)
		ctx, cancel := context.WithCancelCause(m.run.ctx)
		a := &attempt{rec: rec, job: j, ctx: ctx, cancel: cancel, start: now, timeout: rec.Timeout, leaseUntil: rec.LeaseUntil, hidx: -1, clockTimeout: !systemClock}
		if a.leaseUntil.IsZero() { // every store reports it; this is a fallback
			a.leaseUntil = now.Add(m.cfg.lease)
		}
		as[i] = a
		m.active.add(a)
		m.cfg.obs.started(rec, now)
	}
	m.undecided.Add(int64(len(as)))
	m.watch.add(as)
	for _, a := range as {
		if a.job != nil && a.job.onStateChange != nil {
			m.stateChanged(a.job, newInstance(a.rec.Clone(), m.logs), store.Processing)
		}
		select {
		case m.handoff <- a:
		default:
			go m.runWorker(a, m.bg.quit)
		}
	}
}

// runWorker executes a, then waits up to workerIdle for another attempt
// from dispatch; it exits when none comes or the manager stops. The wait
// runs on the real clock: it frees a goroutine, it schedules nothing.
func (m *Manager) runWorker(a *attempt, stop <-chan struct{}) {
	var idle *time.Timer
	for {
		m.execute(a)
		if idle == nil {
			idle = time.NewTimer(workerIdle)
			defer idle.Stop()
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case a = <-m.handoff:
		case <-idle.C:
			return
		case <-stop:
			return
		}
	}
}

// execute runs one attempt and submits its outcome, unless the engine gave
// the attempt up while it ran.
func (m *Manager) execute(a *attempt) {
	defer m.pool.release()
	defer a.cancel(nil)
	if a.isSettled() { // given up before it started: it did not run
		m.returned(a, false)
		if a.fenced() {
			m.handBackFenced(a)
		}
		return
	}
	if a.rec.IsShardParent() {
		m.join(a) // a sharded task's parent runs no executor (shards.go)
		return
	}
	if t := a.rec.Task; t != nil && (len(t.Deps) > 0 || t.Gate || t.Parted) && !m.gate(a) {
		return // waits, or ended without running (workflow_run.go)
	}
	if a.rec.IsShard() {
		if !m.shards.keepShard(a.rec) { // spread over nodes (shards_spread.go)
			m.handBackShard(a)
			return
		}
		defer m.shards.shardDone(a.rec)
	}
	var (
		results []any
		err     error
		inst    = newInstance(a.rec.Clone(), m.logs)
	)
	if a.rec.Task != nil {
		inst.mgr = m
	}
	var foreign *store.Outcome // a recurring tick of a kind not registered here
	if a.job == nil {
		if out, ok := m.foreignTickOutcome(a); ok {
			foreign = &out
		} else {
			err = fmt.Errorf("%w: %q is not registered on node %s (registered: %v)", ErrUnknownKind, a.rec.Kind, m.node, m.reg.kinds())
		}
	} else {
		results, err = m.runExecutor(a, inst)
	}
	ours := a.settle()
	if !ours && !a.fenced() {
		inst.prog.flush(false) // the attempt is no longer ours to report on
		m.returned(a, false)   // given up while it ran: lease lost, abandoned, or left by Stop
		return
	}
	if ours {
		m.watch.remove(a)
	} else {
		// Fenced while it ran (by the node, or because its lease could
		// not be renewed): the fence only canceled it, the store may
		// still hold its lease. What the executor returned is recorded (a
		// hand-back if the fence stopped it, see outcome); the store
		// refuses it if the instance was rescued meanwhile.
		m.returned(a, true)
	}
	inst.prog.flush(true) // the last report lands before the outcome
	inst.results = results
	out := m.outcome(a, results, err, context.Cause(a.ctx))
	if foreign != nil && out.State != store.Scheduled && out.State != store.Canceled {
		out = *foreign // unless Stop handed it back or it was canceled meanwhile
	}
	m.completer.submit(&finishReq{a: a, out: out, inst: inst, err: err, ended: m.clock.Now()})
	if ours {
		m.decided() // a fence decided it already
	}
}

// runExecutor decodes a's arguments and runs its job's executor under
// its timeout, returning what the executor returned and the attempt's
// verdict on its error (execute's run of a registered kind).
func (m *Manager) runExecutor(a *attempt, inst *instance) ([]any, error) {
	args, derr := a.job.exec.decodeArgs(a.rec.Args)
	if derr != nil {
		return nil, Permanent(derr)
	}
	inst.args = valuesToAny(args)
	inst.prog = m.newProgress(a.rec)
	ctx := a.ctx
	if a.timeout > 0 {
		// The deadline the executor's ctx carries runs on real time. With
		// another clock than SystemClock (a test's) the watchdog also
		// cancels a.ctx, with the same cause, when the timeout passes on
		// that clock.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, a.timeout, ErrTimeout)
		defer cancel()
	}
	results, err := m.runAttempt(ctx, inst, func(ctx context.Context) ([]any, error) {
		return a.job.exec.call(ctx, inst, args)
	}, func(err error) error {
		if err == nil && ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrTimeout) {
			err = fmt.Errorf("%w after %v", ErrTimeout, a.timeout)
		} else if err != nil && errors.Is(context.Cause(ctx), ErrTimeout) {
			err = fmt.Errorf("%w after %v: %w", ErrTimeout, a.timeout, err)
		}
		return err
	})
	return results, m.verdict(a, inst, err)
}

// giveUp decides a's end while its executor may still run: the caller
// then cancels it (and writes its outcome, or leaves it to its lease). It
// reports false when a's end was already decided. Until the executor
// returns it is counted by Stuck, and keeps its worker slot.
func (m *Manager) giveUp(a *attempt) bool { return m.giveUpAs(a, settledGivenUp) }

// giveUpAs is giveUp, recording how (settledGivenUp, settledFenced or
// settledLeaseFenced).
func (m *Manager) giveUpAs(a *attempt, how int32) bool {
	m.stuck.Add(1) // before the swap, so that returned never sees it early
	if !a.settled.CompareAndSwap(unsettled, how) {
		m.stuck.Add(-1)
		return false
	}
	m.watch.remove(a)
	m.decided()
	return true
}

// decided counts one attempt's end as decided and wakes a Stop waiting for
// the last one.
func (m *Manager) decided() {
	if m.undecided.Add(-1) == 0 {
		select {
		case m.settledSig <- struct{}{}:
		default:
		}
	}
}

// returned notes that the executor of an attempt given up has returned;
// kept: its outcome is written all the same (a fenced attempt's).
func (m *Manager) returned(a *attempt, kept bool) {
	m.stuck.Add(-1)
	msg := "executor of a given-up attempt returned; its result is discarded"
	if kept {
		msg = "executor of a fenced attempt returned; recording its outcome unless another node rescued the instance meanwhile"
	}
	m.log.Info(msg, "instance", a.rec.ID, "kind", a.rec.Kind, "attempt", a.rec.Attempt, "after", m.clock.Now().Sub(a.start))
}

// Stuck returns how many executors are still running after the manager
// gave their attempts up: a timed-out attempt whose executor ignored its
// context past the grace period (recorded TimedOut or retried), one whose
// lease could not be renewed, or one still running when Stop's ctx ended.
// Go cannot stop a goroutine, so each keeps its worker slot, counted in
// Workers' busy count, until it returns; a lasting non-zero value means an
// executor ignores its ctx.
func (m *Manager) Stuck() int { return int(m.stuck.Load()) }

// stoppedBy reports whether err, returned by an executor whose context
// was canceled with cause, says that the cancel stopped it: it wraps
// context.Canceled or the cause itself. Any other return (nil, or an error
// of its own) means the executor ran to its end.
func stoppedBy(err, cause error) bool {
	return err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, cause))
}

// outcome decides how an attempt ended, given what its executor returned
// and the cause its context was canceled with, if any. An executor the
// engine stopped (Stop, or a fence: the node's or its lease's) is handed
// back, its attempt not counted; one that ran to its end all the same has
// its real outcome, so a completed run is not run again and no attempt
// number runs twice.
func (m *Manager) outcome(a *attempt, results []any, err, cause error) store.Outcome {
	out := store.Outcome{ID: a.rec.ID, Attempt: a.rec.Attempt}
	now := m.clock.Now()
	var fencedBack string // a hand-back's error, when a fence stopped it
	if errors.Is(cause, ErrLeaseLost) && stoppedBy(err, cause) {
		var counted error
		if fencedBack, counted = m.fencedRun(a); counted != nil {
			err, cause = counted, nil // past the cap: a failed attempt
		}
	}
	switch {
	case errors.Is(cause, ErrShutdown) && stoppedBy(err, cause):
		// Keep the original run time: the instance keeps its place in the
		// queue instead of going behind everything scheduled since.
		out.State, out.RunAt, out.Release = store.Scheduled, a.rec.RunAt, true
		out.Error = "handed back: " + ErrShutdown.Error()
	case fencedBack != "":
		out.State, out.RunAt, out.Release = store.Scheduled, a.rec.RunAt, true
		out.Error = fencedBack
	case errors.Is(cause, ErrCanceled):
		out.State, out.Error = store.Canceled, ErrCanceled.Error()
	case err == nil:
		out.State, out.Result = store.Completed, encodeResults(results)
	case m.rateLimited(a, err, &out): // ratelimit.go
	default:
		out.Error = err.Error()
		timedOut := errors.Is(err, ErrTimeout)
		retry := a.rec.MaxRetries < 0 || a.rec.Attempt <= a.rec.MaxRetries
		switch {
		case errors.Is(err, ErrCanceled):
			out.State = store.Canceled
		case errors.Is(err, ErrPermanent) || !retry:
			out.State = store.Terminated
			if timedOut {
				out.State = store.TimedOut
			}
		default:
			backoff := defaultBackoff
			if a.job != nil {
				backoff = a.job.backoff
			}
			out.State, out.RunAt = store.Scheduled, now.Add(retryAfterDelay(err, backoff(a.rec.Attempt)))
		}
	}
	return out
}

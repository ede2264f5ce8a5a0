package job

import (
	"context"
	"errors"
	"time"

	"github.com/jobkit/job/store"
)

// Steps without an executor: a sharded task's parent joining its shards
// (shards.go) and a workflow task's gate (workflow_run.go) run in a
// claimed attempt like an executor, but decide from what the store holds.
// Both settle, hand back and submit alike, and both must not lose a
// wake-up that reached the instance while it looked (stepWaited).

// stepDecision is what a step decided: the attempt's outcome (a hand-back
// to wait, or an end), the results and error its handlers see, or run:
// the executor runs in this attempt (a gate whose dependencies are done).
type stepDecision struct {
	out     store.Outcome
	results []any
	err     error
	run     bool
}

// step runs decide for the claimed attempt a in place of an executor,
// within 30 s, and reports whether the executor is to run now. Otherwise
// it has submitted the outcome: what decide found, or, when the attempt
// was stopped meanwhile, a hand-back (Stop) or a cancel.
func (m *Manager) step(a *attempt, decide func(ctx context.Context) stepDecision) bool {
	ctx, cancel := context.WithTimeout(a.ctx, 30*time.Second)
	d := decide(ctx)
	cancel()
	if d.run && context.Cause(a.ctx) == nil {
		return true
	}
	switch cause := context.Cause(a.ctx); {
	case errors.Is(cause, ErrShutdown):
		d.out = store.Outcome{ID: a.rec.ID, Attempt: a.rec.Attempt, State: store.Scheduled, RunAt: a.rec.RunAt, Release: true,
			Error: "handed back: " + ErrShutdown.Error()}
		d.results, d.err = nil, nil
	case errors.Is(cause, ErrCanceled):
		d.out = store.Outcome{ID: a.rec.ID, Attempt: a.rec.Attempt, State: store.Canceled, Error: ErrCanceled.Error()}
		d.results, d.err = nil, ErrCanceled
	case d.run:
		// Fenced after decide found that the executor may run: it did
		// not run, so the attempt is handed back uncounted, as one
		// fenced before its executor started (handBackFenced). The
		// decision carries no outcome to write.
		d.out = store.Outcome{ID: a.rec.ID, Attempt: a.rec.Attempt, State: store.Scheduled, RunAt: a.rec.RunAt, Release: true,
			Error: a.fencedHandBackError(fencedHandBacksBefore(a.rec.Error))}
		d.results, d.err = nil, nil
	}
	ours := a.settle()
	if !ours && !a.fenced() {
		m.returned(a, false) // given up meanwhile (lease lost, Stop)
		return false
	}
	if ours {
		m.watch.remove(a)
	} else {
		// Fenced meanwhile: what the step found is written all the same
		// (a look-up the fence cut short already made it a hand-back);
		// the store refuses it if the instance was rescued meanwhile.
		m.returned(a, true)
	}
	inst := newInstance(a.rec.Clone(), m.logs)
	inst.results = d.results
	m.completer.submit(&finishReq{a: a, out: d.out, inst: inst, err: d.err, ended: m.clock.Now()})
	if ours {
		m.decided()
	}
	return false
}

// stepWaited follows a step's hand-back once the store holds it: it
// looks again and wakes the instance when what it waits for is done
// after all. What ended while the step looked had its wake-up find the
// instance Processing (a wake leaves it so), and the hand-back then put
// it to sleep until the recheck; this look, after the hand-back is
// stored, sees that end, so the instance is never left waiting for the
// recheck. ready reports whether to wake it (a failed read: false, the
// recheck covers it).
func (m *Manager) stepWaited(r *finishReq, state State) {
	rec := r.a.rec
	if state != store.Scheduled || !r.out.Release {
		return
	}
	var ready func(ctx context.Context) bool
	switch {
	case rec.IsShardParent():
		ready = func(ctx context.Context) bool { return m.shards.joinReady(ctx, rec) }
	case rec.Task != nil:
		from, ok := gateWaiting(rec, r.out)
		if !ok {
			return
		}
		ready = func(ctx context.Context) bool { return m.gateReady(ctx, rec, from) }
	default:
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(m.run.ctx, 10*time.Second)
		defer cancel()
		if !ready(ctx) {
			return
		}
		if err := m.store.Wake(ctx, &store.WakeParams{IDs: []string{rec.ID}, Now: m.clock.Now()}); err != nil {
			m.log.Warn("waking an instance whose wait ended while it looked; it looks again on its own", "instance", rec.ID, "err", err)
			return
		}
		m.notifyLocal()
	}()
}

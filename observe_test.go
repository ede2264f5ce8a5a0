package job_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// eventRecorder is an Observer that keeps every event.
type eventRecorder struct {
	mu       sync.Mutex
	sched    []job.ScheduledEvent
	started  []job.AttemptStartedEvent
	finished []job.AttemptFinishedEvent
	lost     []job.LeaseLostEvent
	rescued  []job.RescuedEvent
	canceled []job.CanceledEvent
	calls    []job.StoreCallEvent
	mgr      *job.Manager
	attached int
}

func (r *eventRecorder) Scheduled(e job.ScheduledEvent) {
	r.mu.Lock()
	r.sched = append(r.sched, e)
	r.mu.Unlock()
}
func (r *eventRecorder) AttemptStarted(e job.AttemptStartedEvent) {
	r.mu.Lock()
	r.started = append(r.started, e)
	r.mu.Unlock()
}
func (r *eventRecorder) AttemptFinished(e job.AttemptFinishedEvent) {
	r.mu.Lock()
	r.finished = append(r.finished, e)
	r.mu.Unlock()
}
func (r *eventRecorder) LeaseLost(e job.LeaseLostEvent) {
	r.mu.Lock()
	r.lost = append(r.lost, e)
	r.mu.Unlock()
}
func (r *eventRecorder) Rescued(e job.RescuedEvent) {
	r.mu.Lock()
	r.rescued = append(r.rescued, e)
	r.mu.Unlock()
}
func (r *eventRecorder) Canceled(e job.CanceledEvent) {
	r.mu.Lock()
	r.canceled = append(r.canceled, e)
	r.mu.Unlock()
}
func (r *eventRecorder) StoreCall(e job.StoreCallEvent) {
	e.Err = nil // an observer must not keep it
	r.mu.Lock()
	r.calls = append(r.calls, e)
	r.mu.Unlock()
}
func (r *eventRecorder) ObserveManager(m *job.Manager) error {
	r.mu.Lock()
	r.mgr = m
	r.attached++
	r.mu.Unlock()
	return nil
}

func (r *eventRecorder) finishedOf(kind string) []job.AttemptFinishedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []job.AttemptFinishedEvent
	for _, e := range r.finished {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// TestObserverEvents runs completions, retries, a terminated and a timed
// out instance and a canceled pending one, and checks every event the
// observer was told against that work.
func TestObserverEvents(t *testing.T) {
	t.Parallel()
	rec := &eventRecorder{}
	m := newManager(t, job.WithObserver(rec), job.WithWorkers(4), job.WithQueues(job.DefaultQueue, "q2"), job.WithLogger(quietLogger()))
	if rec.mgr != m || rec.attached != 1 {
		t.Fatalf("ObserveManager got %p %d times, want the manager %p once", rec.mgr, rec.attached, m)
	}
	var flakyRuns atomic.Int32
	for _, j := range []*job.Job{
		mustJob(t, job.WithKind("ok"), job.WithExecutor(func() error { return nil })),
		mustJob(t, job.WithKind("flaky"), job.WithMaxRetries(2), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
			job.WithExecutor(func() error {
				if flakyRuns.Add(1) == 1 {
					return errors.New("first try fails")
				}
				return nil
			})),
		mustJob(t, job.WithKind("bad"), job.WithMaxRetries(1), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
			job.WithExecutor(func() error { return errors.New("always fails") })),
		mustJob(t, job.WithKind("slow"), job.WithMaxRetries(0), job.WithTimeout(30*time.Millisecond), job.WithQueue("q2"),
			job.WithExecutor(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })),
	} {
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	later, err := m.ScheduleJob(ctx, "ok", job.WithScheduleAfter(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CancelInstance(ctx, later.ID); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ok", "flaky", "bad"} {
		if _, err := m.ScheduleJob(ctx, kind); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.ScheduleJob(ctx, "slow", job.WithQueue("q2")); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(waitCtx); err != nil {
		t.Fatal(err)
	}

	rec.mu.Lock()
	count := func(kinds []string) map[string]int {
		n := map[string]int{}
		for _, k := range kinds {
			n[k]++
		}
		return n
	}
	var sk, stk []string
	for _, e := range rec.sched {
		sk = append(sk, e.Kind+"/"+e.Queue)
		if e.Kind == "ok" && e.Delay == 0 {
			continue
		}
		if e.Kind == "ok" && e.Delay < 59*time.Minute {
			t.Errorf("scheduled event of the delayed instance: delay %v, want about an hour", e.Delay)
		}
	}
	for _, e := range rec.started {
		stk = append(stk, e.Kind)
		if e.Wait < 0 {
			t.Errorf("negative wait %v", e.Wait)
		}
	}
	if got, want := count(sk), map[string]int{"ok/" + job.DefaultQueue: 2, "flaky/" + job.DefaultQueue: 1, "bad/" + job.DefaultQueue: 1, "slow/q2": 1}; !mapsEqual(got, want) {
		t.Errorf("scheduled events %v, want %v", got, want)
	}
	if got, want := count(stk), map[string]int{"ok": 1, "flaky": 2, "bad": 2, "slow": 1}; !mapsEqual(got, want) {
		t.Errorf("attempts started %v, want %v", got, want)
	}
	if len(rec.canceled) != 1 || rec.canceled[0].Kind != "ok" || rec.canceled[0].Queue != job.DefaultQueue {
		t.Errorf("canceled events %+v, want one of kind ok", rec.canceled)
	}
	if len(rec.lost) != 0 || len(rec.rescued) != 0 {
		t.Errorf("lease lost %+v, rescued %+v; want none", rec.lost, rec.rescued)
	}
	ops := map[job.StoreOp]int{}
	for _, c := range rec.calls {
		ops[c.Op]++
		if c.Duration <= 0 {
			t.Errorf("store call %v took %v", c.Op, c.Duration)
		}
	}
	for _, op := range []job.StoreOp{job.OpEnqueue, job.OpClaim, job.OpFinish, job.OpCancel, job.OpHeartbeat} {
		if ops[op] == 0 {
			t.Errorf("no store call %v observed (saw %v)", op, ops)
		}
	}
	rec.mu.Unlock()

	type fin struct {
		state       job.State
		retry, back bool
		attempt     int
	}
	summary := func(kind string) []fin {
		var out []fin
		for _, e := range rec.finishedOf(kind) {
			out = append(out, fin{e.State, e.Retry, e.HandedBack, e.Attempt})
		}
		return out
	}
	for kind, want := range map[string][]fin{
		"ok":    {{job.Completed, false, false, 1}},
		"flaky": {{job.Scheduled, true, false, 1}, {job.Completed, false, false, 2}},
		"bad":   {{job.Scheduled, true, false, 1}, {job.Terminated, false, false, 2}},
		"slow":  {{job.TimedOut, false, false, 1}},
	} {
		if got := summary(kind); !slices.Equal(got, want) {
			t.Errorf("%s: finished %+v, want %+v", kind, got, want)
		}
	}
	if f := rec.finishedOf("slow"); len(f) == 1 && (f[0].Duration < 30*time.Millisecond || f[0].Queue != "q2") {
		t.Errorf("timed-out attempt: duration %v queue %q, want at least its 30ms timeout in q2", f[0].Duration, f[0].Queue)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestObserverLeaseLostAndRescued: an attempt rescued from under its
// manager is reported lost (its outcome refused), and a lease that ended
// on a crashed owner is reported rescued by the manager that rescues it.
func TestObserverLeaseLostAndRescued(t *testing.T) {
	t.Parallel()
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	rec := &eventRecorder{}
	m := newManager(t, job.WithStore(st), job.WithObserver(rec), job.WithRescueInterval(5*time.Millisecond), job.WithLogger(quietLogger()))
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	if err := m.RegisterJob(mustJob(t, job.WithKind("block"), job.WithExecutor(func() {
		running <- struct{}{}
		<-release
	}))); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ScheduleJob(ctx, "block"); err != nil {
		t.Fatal(err)
	}
	<-running
	// Another rescuer whose clock is past the lease takes it back.
	moved, err := st.Rescue(ctx, &store.RescueParams{Now: time.Now().Add(time.Hour), Limit: 10, Node: "other"})
	if err != nil || len(moved) != 1 {
		t.Fatalf("rescue under the manager: %d moved, %v", len(moved), err)
	}
	close(release) // its outcome is now refused; the instance runs again here
	waitFor(t, "the lost lease and the second run", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.lost) == 1 && len(rec.finished) == 1
	})
	rec.mu.Lock()
	if l := rec.lost[0]; l.Kind != "block" || l.Attempt != 1 || l.Reason != job.LeaseLostFinish || l.Reason.String() != "finish" {
		t.Errorf("lease lost %+v, want block attempt 1 reason finish", l)
	}
	if f := rec.finished[0]; f.State != job.Completed || f.Attempt != 2 {
		t.Errorf("finished %+v, want attempt 2 completed", f)
	}
	if len(rec.rescued) != 0 {
		t.Errorf("rescued %+v by this manager; the test's rescuer did it", rec.rescued)
	}
	rec.mu.Unlock()

	// A crashed owner: an attempt claimed by a node that is gone, whose
	// lease has ended, is rescued by the manager's rescuer.
	// It is in a queue m does not claim, so it stays where the rescue
	// leaves it.
	if _, err := m.ScheduleJob(ctx, "block", job.WithQueue("elsewhere")); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claimed, err := st.Claim(ctx, &store.ClaimParams{Queue: "elsewhere", Owner: "crashed", Limit: 1, Now: now, LeaseUntil: now.Add(time.Millisecond)})
	if err != nil || len(claimed.Instances) != 1 {
		t.Fatalf("claim as the crashed node: %v %v", claimed, err)
	}
	waitFor(t, "the rescue", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.rescued) == 1
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if r := rec.rescued[0]; r.Kind != "block" || r.Queue != "elsewhere" || r.State != job.Scheduled || r.DeadNode {
		t.Errorf("rescued %+v, want block back to scheduled for its lease", r)
	}
}

// TestObserverOptions: a nil observer is refused; an observer whose
// ObserveManager fails fails NewManager; StoreOp and LeaseLostReason
// names are what metrics label them.
func TestObserverOptions(t *testing.T) {
	t.Parallel()
	if _, err := job.NewManager(job.WithObserver(nil)); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("WithObserver(nil): %v, want ErrInvalidOption", err)
	}
	boom := errors.New("boom")
	if _, err := job.NewManager(job.WithObserver(failingObserver{err: boom})); !errors.Is(err, boom) {
		t.Errorf("failing ObserveManager: %v, want it wrapped", err)
	}
	ops := job.StoreOps()
	seen := map[string]bool{}
	for _, op := range ops {
		s := op.String()
		if s == "" || seen[s] || s[0] < 'a' || s[0] > 'z' {
			t.Errorf("store op %d named %q", op, s)
		}
		seen[s] = true
	}
	if len(ops) != 36 || job.OpLookupInstances.String() != "lookup_instances" || job.StoreOp(0).String() != "StoreOp(0)" {
		t.Errorf("%d store ops; lookup_instances is %q", len(ops), job.OpLookupInstances)
	}
	for r, want := range map[job.LeaseLostReason]string{job.LeaseLostRenew: "renew", job.LeaseLostFence: "fence", job.LeaseLostNode: "node", job.LeaseLostFinish: "finish", 0: "LeaseLostReason(0)"} {
		if r.String() != want {
			t.Errorf("reason %d is %q, want %q", r, r.String(), want)
		}
	}
}

type failingObserver struct {
	job.NopObserver
	err error
}

func (f failingObserver) ObserveManager(*job.Manager) error { return f.err }

// TestObserverFences: an attempt that cannot renew its lease, and whose
// outcome the store does not take, is reported lost with reason fence,
// one given up by a node whose heartbeats fail with reason node, and the
// managers that rescue them report the rescue (lease ended; node declared
// dead). (A fenced attempt whose outcome the store takes is reported
// finished instead: TestObserverFencedOnce.)
func TestObserverFences(t *testing.T) {
	t.Parallel()
	t.Run("lease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mem := newMemdb(t)
			cut := &faultStore{Store: mem}
			recA, recB := &eventRecorder{}, &eventRecorder{}
			a := newManager(t, job.WithStore(cut), job.WithNodeID("a"), job.WithObserver(recA), job.WithLogger(quietLogger()))
			b := newManager(t, job.WithStore(mem), job.WithNodeID("b"), job.WithObserver(recB), job.WithLogger(quietLogger()))
			var ov overlap
			for _, m := range []*job.Manager{a, b} {
				sleepJob(t, m, &ov, 2*time.Minute, nil)
			}
			ctx := context.Background()
			if err := a.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := a.ScheduleJob(ctx, "work"); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			// Renewals, claims and outcomes fail; heartbeats go on. (With
			// outcomes taken, a's fenced attempt would be handed back
			// instead of rescued.)
			unreachable := errors.New("store unreachable")
			cut.fail(unreachable, unreachable, nil)
			cut.cutOff(unreachable)
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Minute)
			synctest.Wait()
			recA.mu.Lock()
			if len(recA.lost) != 1 || recA.lost[0] != (job.LeaseLostEvent{Kind: "work", Queue: job.DefaultQueue, Attempt: 1, Reason: job.LeaseLostFence}) {
				t.Errorf("a's lost leases %+v, want attempt 1 of work fenced", recA.lost)
			}
			recA.mu.Unlock()
			recB.mu.Lock()
			if len(recB.rescued) != 1 || recB.rescued[0] != (job.RescuedEvent{Kind: "work", Queue: job.DefaultQueue, State: job.Scheduled}) {
				t.Errorf("b's rescues %+v, want work back to scheduled for its lease", recB.rescued)
			}
			recB.mu.Unlock()
			if f := recB.finishedOf("work"); len(f) != 1 || f[0].State != job.Completed || f[0].Attempt != 2 || f[0].Duration != 2*time.Minute {
				t.Errorf("b finished %+v, want attempt 2 completed after its 2 minutes", f)
			}
		})
	})
	t.Run("node", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mem := newMemdb(t)
			cs := &cutStore{Store: mem}
			recA, recB := &eventRecorder{}, &eventRecorder{}
			a := newManager(t, job.WithStore(cs), job.WithNodeID("a"), job.WithObserver(recA), job.WithLogger(quietLogger()))
			b := newManager(t, job.WithStore(mem), job.WithNodeID("b"), job.WithObserver(recB), job.WithLogger(quietLogger()))
			var ov overlap
			for _, m := range []*job.Manager{a, b} {
				sleepJob(t, m, &ov, 10*time.Second, nil)
			}
			ctx := context.Background()
			if err := a.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := a.ScheduleJob(ctx, "work"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			cs.cut.Store(true) // heartbeats fail too
			// The fenced attempt is reported once its outcome is given up
			// (the store refused writes for the retries, about 70 s).
			time.Sleep(2 * time.Minute)
			synctest.Wait()
			recA.mu.Lock()
			if len(recA.lost) == 0 || recA.lost[0] != (job.LeaseLostEvent{Kind: "work", Queue: job.DefaultQueue, Attempt: 1, Reason: job.LeaseLostNode}) {
				t.Errorf("a's lost leases %+v, want attempt 1 of work given up by the node's fence first", recA.lost)
			}
			recA.mu.Unlock()
			recB.mu.Lock()
			if len(recB.rescued) != 1 || recB.rescued[0] != (job.RescuedEvent{Kind: "work", Queue: job.DefaultQueue, State: job.Scheduled, DeadNode: true}) {
				t.Errorf("b's rescues %+v, want work rescued from the dead node", recB.rescued)
			}
			recB.mu.Unlock()
			if f := recB.finishedOf("work"); len(f) != 1 || f[0].State != job.Completed || f[0].Attempt != 2 {
				t.Errorf("b finished %+v, want attempt 2 completed", f)
			}
			cs.cut.Store(false)
		})
	})
	t.Run("renew", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mem := newMemdb(t)
			rec := &eventRecorder{}
			// One worker: the rescued instance waits for it, so the lost
			// attempt is the one the renewal carries.
			a := newManager(t, job.WithStore(mem), job.WithNodeID("a"), job.WithWorkers(1), job.WithObserver(rec), job.WithLogger(quietLogger()))
			sleepJob(t, a, &overlap{}, 2*time.Minute, nil)
			ctx := context.Background()
			if err := a.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := a.ScheduleJob(ctx, "work"); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			// Another rescuer, its clock far ahead, takes the lease; a's
			// next renewal finds it gone.
			if moved, err := mem.Rescue(ctx, &store.RescueParams{Now: time.Now().Add(time.Hour), Limit: 1, Node: "other"}); err != nil || len(moved) != 1 {
				t.Fatalf("rescue: %d, %v", len(moved), err)
			}
			time.Sleep(job.DefaultLease / 2)
			synctest.Wait()
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.lost) != 1 || rec.lost[0] != (job.LeaseLostEvent{Kind: "work", Queue: job.DefaultQueue, Attempt: 1, Reason: job.LeaseLostRenew}) {
				t.Errorf("lost leases %+v, want attempt 1 of work lost at its renewal", rec.lost)
			}
		})
	})
}

// panicky is an Observer whose every method panics.
type panicky struct{ calls atomic.Int32 }

func (p *panicky) Scheduled(job.ScheduledEvent) { p.calls.Add(1); panic("observer bug: Scheduled") }
func (p *panicky) AttemptStarted(job.AttemptStartedEvent) {
	p.calls.Add(1)
	panic("observer bug: AttemptStarted")
}
func (p *panicky) AttemptFinished(job.AttemptFinishedEvent) {
	p.calls.Add(1)
	panic("observer bug: AttemptFinished")
}
func (p *panicky) LeaseLost(job.LeaseLostEvent) { p.calls.Add(1); panic("observer bug: LeaseLost") }
func (p *panicky) Rescued(job.RescuedEvent)     { p.calls.Add(1); panic("observer bug: Rescued") }
func (p *panicky) Canceled(job.CanceledEvent)   { p.calls.Add(1); panic("observer bug: Canceled") }
func (p *panicky) StoreCall(job.StoreCallEvent) { p.calls.Add(1); panic("observer bug: StoreCall") }

// TestObserverPanicContained: an observer that panics in every method
// neither crashes the process nor changes what the engine does; the
// observers after it are still told, and the work completes.
func TestObserverPanicContained(t *testing.T) {
	t.Parallel()
	bad, rec := &panicky{}, &eventRecorder{}
	m := newManager(t, job.WithObserver(bad), job.WithObserver(rec), job.WithWorkers(2), job.WithLogger(quietLogger()))
	if err := m.RegisterJob(mustJob(t, job.WithKind("ok"), job.WithExecutor(func() error { return nil }))); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ji, err := m.ScheduleJob(ctx, "ok")
	if err != nil {
		t.Fatalf("ScheduleJob with a panicking observer: %v", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(waitCtx); err != nil {
		t.Fatal(err)
	}
	got, err := m.GetInstance(ctx, ji.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != job.Completed {
		t.Fatalf("instance %s with a panicking observer, want completed", got.State)
	}
	if bad.calls.Load() == 0 {
		t.Fatal("the panicking observer was never called")
	}
	if n := len(rec.finishedOf("ok")); n != 1 {
		t.Fatalf("the observer after the panicking one was told of %d finished attempts, want 1", n)
	}
}

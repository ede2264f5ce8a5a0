package job_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// faultStore wraps a store and makes the calls a test chooses fail, and
// records the lease deadlines the manager asked for.
type faultStore struct {
	store.Store
	mu        sync.Mutex
	renewErr  error
	claimErr  error // Claim and Rescue
	finishErr error
	logErr    error
	renewed   map[string][]time.Time // instance ID → Until of each Renew asked
	failNext  int                    // Renew calls to fail before renewErr applies
}

func (s *faultStore) fail(renew, finish, logs error) {
	s.mu.Lock()
	s.renewErr, s.finishErr, s.logErr = renew, finish, logs
	s.mu.Unlock()
}

// cutOff makes every queue call but Finish fail, as a partition between
// the manager and the store does.
func (s *faultStore) cutOff(err error) {
	s.mu.Lock()
	s.renewErr, s.claimErr = err, err
	s.mu.Unlock()
}

func (s *faultStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	s.mu.Lock()
	err := s.claimErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.Store.Claim(ctx, p)
}

func (s *faultStore) Rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	s.mu.Lock()
	err := s.claimErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.Store.Rescue(ctx, p)
}

func (s *faultStore) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	s.mu.Lock()
	err := s.renewErr
	if s.failNext > 0 {
		s.failNext--
		err = errors.New("renewal failed")
	}
	if s.renewed == nil {
		s.renewed = map[string][]time.Time{}
	}
	for _, l := range p.Leases {
		s.renewed[l.ID] = append(s.renewed[l.ID], p.Until)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.Store.Renew(ctx, p)
}

func (s *faultStore) renewals(id string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.renewed[id]...)
}

func (s *faultStore) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	s.mu.Lock()
	err := s.finishErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.Store.Finish(ctx, p)
}

func (s *faultStore) AppendLogs(ctx context.Context, recs []*store.LogRecord) error {
	s.mu.Lock()
	err := s.logErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Store.AppendLogs(ctx, recs)
}

func (s *faultStore) Subscribe(ctx context.Context, q string) (<-chan struct{}, error) {
	return s.Store.(store.Notifier).Subscribe(ctx, q)
}

// overlap counts the executions of each instance running at once.
type overlap struct {
	mu      sync.Mutex
	running map[string]int
	peak    int
	runs    int
}

func (o *overlap) enter(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running == nil {
		o.running = map[string]int{}
	}
	o.running[id]++
	o.runs++
	o.peak = max(o.peak, o.running[id])
}

func (o *overlap) leave(id string) {
	o.mu.Lock()
	o.running[id]--
	o.mu.Unlock()
}

func (o *overlap) stats() (peak, runs int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.peak, o.runs
}

// logBuf collects a manager's own log.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), substr)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func stateOf(t *testing.T, m *job.Manager, id string) *job.InstanceInfo {
	t.Helper()
	ji, err := m.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatalf("GetInstance(%s): %v", id, err)
	}
	return ji
}

// TestLapsedLeaseStopsAttempt: a manager that cannot renew a lease cancels
// its attempt (cause ErrLeaseLost) before the lease ends, so the manager
// that takes the instance next never runs it alongside. The executor
// returns on that cancel and the store still takes outcomes, so the
// attempt is handed back (not counted) and the other manager runs it as
// attempt 1.
func TestLapsedLeaseStopsAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem := newMemdb(t)
		cut := &faultStore{Store: mem}
		var ov overlap
		causes := make(chan error, 8)
		long := func() *job.Job {
			return mustJob(t, job.WithKind("long"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
				ov.enter(ji.Info().ID)
				defer ov.leave(ji.Info().ID)
				select {
				case <-time.After(2 * time.Minute): // the work: several leases long
					return nil
				case <-ctx.Done():
					causes <- context.Cause(ctx)
					return context.Cause(ctx)
				}
			}))
		}
		var alog logBuf
		a := newManager(t, job.WithStore(cut), job.WithNodeID("a"), job.WithLease(30*time.Second), job.WithLogger(alog.logger()))
		b := newManager(t, job.WithStore(mem), job.WithNodeID("b"), job.WithLease(30*time.Second), job.WithLogger(quietLogger()))
		for _, m := range []*job.Manager{a, b} {
			if err := m.RegisterJob(long()); err != nil {
				t.Fatal(err)
			}
		}
		ctx := context.Background()
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ji, err := a.ScheduleJob(ctx, "long")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if peak, runs := ov.stats(); runs != 1 || peak != 1 {
			t.Fatalf("a is not running the instance: %d runs", runs)
		}
		// From now on a cannot reach the store; b runs alongside and
		// rescues.
		cut.cutOff(errors.New("store unreachable"))
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()

		peak, runs := ov.stats()
		if peak > 1 {
			t.Errorf("%d executions of one instance ran at once; a lapsed lease must stop its attempt first", peak)
		}
		if runs != 2 {
			t.Errorf("%d runs, want 2 (a's, canceled, and b's after the hand-back)", runs)
		}
		select {
		case c := <-causes:
			if !errors.Is(c, job.ErrLeaseLost) {
				t.Errorf("a's attempt ended with cause %v, want ErrLeaseLost", c)
			}
		default:
			t.Error("a's attempt was never canceled")
		}
		got := stateOf(t, b, ji.ID)
		if got.State != job.Completed || got.Attempt != 1 {
			t.Errorf("instance %v attempt %d, want Completed by b in attempt 1 (a's handed back)", got.State, got.Attempt)
		}
		if n := alog.count("lease not renewed in time"); n != 1 {
			t.Errorf("a logged the lapsed lease %d times, want once; log:\n%s", n, alog.String())
		}
		for _, m := range []*job.Manager{a, b} {
			if err := m.Stop(ctx); err != nil {
				t.Errorf("Stop: %v", err)
			}
		}
	})
}

// TestStopBoundedByCtx: with a store that refuses outcomes and logs, Stop
// gives up when its ctx ends, says what was not recorded, and leaves no
// goroutine behind.
func TestStopBoundedByCtx(t *testing.T) {
	// Not parallel: the leak check below looks at every goroutine.
	ignore := goleak.IgnoreCurrent()
	synctest.Test(t, func(t *testing.T) {
		fs := &faultStore{Store: newMemdb(t)}
		j := mustJob(t, job.WithKind("k"), job.WithExecutor(func(ji job.Instance) { ji.Infof("ran") }))
		m := newManager(t, job.WithStore(fs), job.WithLogger(quietLogger()))
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
		unavailable := errors.New("store unavailable")
		fs.fail(nil, unavailable, unavailable)
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ScheduleJob(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()

		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		began := time.Now()
		err := m.Stop(sctx)
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("Stop took %v with a 2s ctx", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop: %v, want an error wrapping the ctx's", err)
		}
		if err == nil || !strings.Contains(err.Error(), "1 outcome") || !strings.Contains(err.Error(), "1 log") {
			t.Errorf("Stop: %v, want it to say 1 outcome and 1 log were not recorded", err)
		}
		if err := goleak.Find(ignore, goleak.IgnoreTopFunction("testing/synctest.testingSynctestTest")); err != nil {
			t.Errorf("goroutines left after Stop: %v", err)
		}
	})
}

// TestTimeoutBoundsExecutorThatIgnoresCtx: an executor that ignores its
// ctx past its timeout is given up after the grace period: the attempt is
// recorded TimedOut, its lease is not renewed past the timeout and grace,
// and its goroutine keeps its worker slot until it returns.
func TestTimeoutBoundsExecutorThatIgnoresCtx(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fs := &faultStore{Store: newMemdb(t)}
		release := make(chan struct{})
		stuck := mustJob(t, job.WithKind("stuck"), job.WithTimeout(time.Minute), job.WithMaxRetries(0),
			job.WithExecutor(func() { <-release })) // ignores ctx
		other := mustJob(t, job.WithKind("other"), job.WithExecutor(func() {}))
		var mlog logBuf
		m := newManager(t, job.WithStore(fs), job.WithWorkers(1), job.WithLease(30*time.Second), job.WithLogger(mlog.logger()))
		unblock := sync.OnceFunc(func() { close(release) })
		t.Cleanup(unblock) // before Stop, should the test end early
		for _, j := range []*job.Job{stuck, other} {
			if err := m.RegisterJob(j); err != nil {
				t.Fatal(err)
			}
		}
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		ji, err := m.ScheduleJob(ctx, "stuck")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		const allowance = 5 * time.Second // a sixth of the lease
		time.Sleep(time.Minute + allowance - time.Second)
		synctest.Wait()
		if got := stateOf(t, m, ji.ID); got.State != job.Processing {
			t.Fatalf("within the grace period: %v, want still Processing", got.State)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		got := stateOf(t, m, ji.ID)
		if got.State != job.TimedOut || got.Error == "" || !strings.Contains(got.Error, "timed out") {
			t.Fatalf("after timeout + grace: %v (%v), want TimedOut", got.State, got.Error)
		}
		// Renewed every 10 s up to, and never past, timeout + grace.
		var latest time.Time
		for _, until := range fs.renewals(ji.ID) {
			if until.After(began.Add(time.Minute + 2*allowance)) {
				t.Errorf("lease renewed until %v after the start, past timeout + grace", until.Sub(began))
			}
			if until.After(latest) {
				latest = until
			}
		}
		if want := began.Add(time.Minute + 2*allowance); !latest.Equal(want) {
			t.Errorf("lease last renewed until %v after the start, want %v", latest.Sub(began), want.Sub(began))
		}
		if _, busy := m.Workers(); busy != 1 {
			t.Errorf("%d busy workers, want 1: a stuck goroutine keeps its slot", busy)
		}
		if n := m.Stuck(); n != 1 {
			t.Errorf("Stuck() = %d, want 1", n)
		}
		if mlog.count("ignored its context") != 1 {
			t.Errorf("the stuck executor was not logged once; log:\n%s", mlog.String())
		}
		// The only worker is held: nothing else runs meanwhile.
		oi, err := m.ScheduleJob(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := stateOf(t, m, oi.ID); got.State != job.Scheduled {
			t.Errorf("with its only worker stuck, the manager ran another instance: %v", got.State)
		}
		unblock()
		synctest.Wait()
		if got := stateOf(t, m, oi.ID); got.State != job.Completed {
			t.Errorf("after the stuck executor returned: %v, want Completed", got.State)
		}
		if n := m.Stuck(); n != 0 {
			t.Errorf("Stuck() = %d after it returned, want 0", n)
		}
		if got := stateOf(t, m, ji.ID); got.State != job.TimedOut {
			t.Errorf("the late return changed the outcome: %v", got.State)
		}
		if err := m.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// TestStopWaitsOutTimedOutExecutor: Stop(context.Background()) returns once
// a stuck attempt's timeout and grace have passed, not when (if ever) its
// executor returns.
func TestStopWaitsOutTimedOutExecutor(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		stuck := mustJob(t, job.WithKind("stuck"), job.WithTimeout(time.Minute), job.WithMaxRetries(0),
			job.WithExecutor(func() { <-release }))
		m := newManager(t, job.WithLease(30*time.Second), job.WithLogger(quietLogger()))
		if err := m.RegisterJob(stuck); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ji, err := m.ScheduleJob(ctx, "stuck")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		stopped := make(chan error, 1)
		go func() { stopped <- m.Stop(ctx) }()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("Stop: %v", err)
			}
		case <-time.After(10 * time.Minute):
			t.Fatal("Stop(context.Background()) still blocked on an executor 9 minutes past its timeout")
		}
		if got := stateOf(t, m, ji.ID); got.State != job.TimedOut {
			t.Errorf("after Stop: %v, want TimedOut", got.State)
		}
	})
}

// TestStopKeepsRunningExecutor: Stop with a deadline never hands back an
// attempt whose executor is still running: its lease lapses at its
// deadline, and only then does another manager run it.
func TestStopKeepsRunningExecutor(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem := newMemdb(t)
		var ov overlap
		release := make(chan struct{})
		deaf := mustJob(t, job.WithKind("k"), job.WithExecutor(func(ji job.Instance) {
			ov.enter(ji.Info().ID)
			defer ov.leave(ji.Info().ID)
			<-release // ignores ctx
		}))
		fine := mustJob(t, job.WithKind("k"), job.WithExecutor(func(ji job.Instance) {
			ov.enter(ji.Info().ID)
			defer ov.leave(ji.Info().ID)
		}))
		a := newManager(t, job.WithStore(mem), job.WithNodeID("a"), job.WithLease(30*time.Second), job.WithLogger(quietLogger()))
		b := newManager(t, job.WithStore(mem), job.WithNodeID("b"), job.WithLease(30*time.Second), job.WithLogger(quietLogger()))
		unblock := sync.OnceFunc(func() { close(release) })
		t.Cleanup(unblock)
		if err := a.RegisterJob(deaf); err != nil {
			t.Fatal(err)
		}
		if err := b.RegisterJob(fine); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		ji, err := a.ScheduleJob(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err = a.Stop(sctx)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 attempt") {
			t.Errorf("Stop: %v, want a deadline error naming 1 attempt still running", err)
		}
		if got := stateOf(t, b, ji.ID); got.State != job.Processing || got.Attempt != 1 {
			t.Errorf("after Stop: %v attempt %d, want still Processing (not handed back while it runs)", got.State, got.Attempt)
		}
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if _, runs := ov.stats(); runs != 1 {
			t.Errorf("%d runs before a's lease lapsed, want 1", runs)
		}
		unblock() // a's goroutine returns at last
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		got := stateOf(t, b, ji.ID)
		if got.State != job.Completed || got.Attempt != 2 {
			t.Errorf("%v attempt %d, want Completed in attempt 2 after the rescue", got.State, got.Attempt)
		}
		if d := got.FinishedAt.Sub(began); d < 30*time.Second {
			t.Errorf("b ran it %v after the claim, before a's lease lapsed", d)
		}
		if peak, _ := ov.stats(); peak > 1 {
			t.Errorf("%d executions at once", peak)
		}
		if err := b.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

func newMemdb(t *testing.T) *memdbstore.Store {
	t.Helper()
	s, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestNoSleepInEngine: every wait of the engine selects on a stop signal;
// a time.Sleep cannot be interrupted, so Stop could not bound it.
func TestNoSleepInEngine(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" && sel.Sel.Name == "Sleep" {
				t.Errorf("%v: time.Sleep in the engine; wait with a timer in a select on a stop signal", fset.Position(sel.Pos()))
			}
			return true
		})
	}
	if len(names) < 10 {
		t.Fatalf("found only %d files of the engine; run from the package directory", len(names))
	}
}

// TestStopCanceledCtxHandsBack: a ctx canceled without a deadline ends the
// wait; an executor that returns when canceled is handed back, and Stop
// reports no error.
func TestStopCanceledCtxHandsBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		causes := make(chan error, 1)
		j := mustJob(t, job.WithKind("k"), job.WithExecutor(func(ctx context.Context) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}))
		m := newManager(t, job.WithLogger(quietLogger()))
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ji, err := m.ScheduleJob(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Minute, cancel)
		began := time.Now()
		if err := m.Stop(sctx); err != nil {
			t.Errorf("Stop: %v, want nil after a hand-back", err)
		}
		if took := time.Since(began); took != time.Minute {
			t.Errorf("Stop took %v, want the minute until its ctx was canceled", took)
		}
		if c := <-causes; !errors.Is(c, job.ErrShutdown) {
			t.Errorf("executor canceled with %v, want ErrShutdown", c)
		}
		if got := stateOf(t, m, ji.ID); got.State != job.Scheduled || got.Attempt != 0 {
			t.Errorf("after Stop: %v attempt %d, want Scheduled attempt 0 (handed back)", got.State, got.Attempt)
		}
	})
}

// TestRenewRetriesBeforeFencing: a failed renewal is retried a quarter
// interval later, so two failures in a row do not fence a healthy attempt.
func TestRenewRetriesBeforeFencing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fs := &faultStore{Store: newMemdb(t), failNext: 2}
		j := mustJob(t, job.WithKind("long"), job.WithExecutor(func(ctx context.Context) error {
			select {
			case <-time.After(time.Minute):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}))
		var mlog logBuf
		m := newManager(t, job.WithStore(fs), job.WithLease(30*time.Second), job.WithLogger(mlog.logger()))
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ji, err := m.ScheduleJob(ctx, "long")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if got := stateOf(t, m, ji.ID); got.State != job.Completed || got.Attempt != 1 {
			t.Errorf("%v attempt %d, want Completed in attempt 1; log:\n%s", got.State, got.Attempt, mlog.String())
		}
		if n := mlog.count("renew leases"); n != 2 {
			t.Errorf("%d failed renewals logged, want 2", n)
		}
		if err := m.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

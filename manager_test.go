package job_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/fakeclock"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestManagerSuite runs the manager-level scenarios on the default store.
func TestManagerSuite(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	stores := map[string]*memdbstore.Store{}
	jobtest.Run(t, jobtest.Harness{Open: func(t testing.TB, ns string) store.Store {
		mu.Lock()
		defer mu.Unlock()
		s, ok := stores[ns]
		if !ok {
			var err error
			if s, err = memdbstore.New(); err != nil {
				t.Fatal(err)
			}
			stores[ns] = s
		}
		return s
	}})
}

func mustJob(t *testing.T, opts ...job.JobOption) *job.Job {
	t.Helper()
	j, err := job.NewJob(opts...)
	if err != nil {
		t.Fatalf("NewJob: %v", err)
	}
	return j
}

func newManager(t *testing.T, opts ...job.ManagerOption) *job.Manager {
	t.Helper()
	m, err := job.NewManager(opts...)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	return m
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestBadDefinitions(t *testing.T) {
	t.Parallel()
	exec := job.WithExecutor(func() {})
	for _, c := range []struct {
		name string
		opts []job.JobOption
	}{
		{"no kind", []job.JobOption{exec}},
		{"empty kind", []job.JobOption{job.WithKind(""), exec}},
		{"no executor", []job.JobOption{job.WithKind("k")}},
		{"not a func", []job.JobOption{job.WithKind("k"), job.WithExecutor("run")}},
		{"negative retries", []job.JobOption{job.WithKind("k"), exec, job.WithMaxRetries(-2)}},
		{"negative timeout", []job.JobOption{job.WithKind("k"), exec, job.WithTimeout(-time.Second)}},
		{"nil backoff", []job.JobOption{job.WithKind("k"), exec, job.WithBackoff(nil)}},
		{"invalid cron", []job.JobOption{job.WithKind("k"), exec, job.WithCronSpec("* * *")}},
		{"cron out of range", []job.JobOption{job.WithKind("k"), exec, job.WithCronSpec("0 24 * * *")}},
		{"bad @every", []job.JobOption{job.WithKind("k"), exec, job.WithCronSpec("@every soon")}},
		{"zero interval", []job.JobOption{job.WithKind("k"), exec, job.WithInterval(0)}},
		{"recurring args mismatch", []job.JobOption{job.WithKind("k"), job.WithExecutor(func(n int) {}), job.WithInterval(time.Second, job.WithArguments("x"))}},
		{"recurring unique key", []job.JobOption{job.WithKind("k"), exec, job.WithInterval(time.Second, job.WithUniqueKey("u", 0))}},
	} {
		if _, err := job.NewJob(c.opts...); !errors.Is(err, job.ErrInvalidJob) {
			t.Errorf("%s: %v, want ErrInvalidJob", c.name, err)
		}
	}
	for _, spec := range []string{"*/5 * * * *", "*/10 * * * * *", "@hourly", "CRON_TZ=Europe/Paris 0 9 * * 1-5", "@every 1s"} {
		if _, err := job.NewJob(job.WithKind("k"), exec, job.WithCronSpec(spec)); err != nil {
			t.Errorf("cron spec %q: %v", spec, err)
		}
	}
}

func TestBadManagerOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opt  job.ManagerOption
	}{
		{"negative workers", job.WithWorkers(-1)},
		{"nil store", job.WithStore(nil)},
		{"no queues", job.WithQueues()},
		{"short lease", job.WithLease(time.Millisecond)},
		{"negative retention", job.WithRetention(-time.Second, 0)},
		{"zero poll", job.WithPollInterval(0)},
		{"negative fenced hand-backs", job.WithFencedHandBacks(-1)},
	} {
		if _, err := job.NewManager(c.opt); !errors.Is(err, job.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", c.name, err)
		}
	}
	m := newManager(t)
	if err := m.SetWorkers(-3); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("SetWorkers(-3): %v", err)
	}
}

func TestRegistryAndScheduleErrors(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	j := mustJob(t, job.WithKind("k"), job.WithExecutor(func(n int) {}))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); !errors.Is(err, job.ErrDuplicateKind) {
		t.Errorf("duplicate kind: %v", err)
	}
	if _, err := m.ScheduleJob(context.Background(), "other", job.WithArguments(1)); !errors.Is(err, job.ErrUnknownKind) {
		t.Errorf("unknown kind: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.ScheduleJob(ctx, "k", job.WithArguments(1)); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled ctx: %v", err)
	}
	if _, err := m.ScheduleJob(context.Background(), "k", job.WithArguments(1), job.WithScheduleAfter(-time.Second)); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("negative delay: %v", err)
	}
	if _, err := m.ScheduleJob(context.Background(), "k", job.WithArguments(1), job.WithMaxRetries(-5)); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("negative retries: %v", err)
	}
	if err := m.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a canceled ctx: %v", err)
	}
	if err := m.UnregisterJob("k"); err != nil {
		t.Fatal(err)
	}
	if err := m.UnregisterJob("k"); !errors.Is(err, job.ErrUnknownKind) {
		t.Errorf("unregister twice: %v", err)
	}
	if _, err := m.ScheduleJob(context.Background(), "k", job.WithArguments(1)); !errors.Is(err, job.ErrUnknownKind) {
		t.Errorf("schedule after unregister: %v", err)
	}
	insts, err := m.LookupInstances(context.Background(), job.NewQuery())
	if err != nil || len(insts) != 0 {
		t.Errorf("store holds %d instances (%v); failed schedules must store nothing", len(insts), err)
	}
	if err := m.Stop(context.Background()); !errors.Is(err, job.ErrNotRunning) {
		t.Errorf("Stop before Start: %v", err)
	}
}

// TestFakeClockScheduling drives due times and backoff with a fake clock:
// nothing runs before its time, and a retry is due exactly after the
// backoff.
func TestFakeClockScheduling(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	var runs atomic.Int32
	j := mustJob(t, job.WithKind("k"), job.WithMaxRetries(1), job.WithBackoff(job.ConstantBackoff(time.Minute)),
		job.WithExecutor(func() error {
			if runs.Add(1) == 1 {
				return errors.New("first fails")
			}
			return nil
		}))
	// The clock jumps past leases; the renewer's warnings are expected.
	m := newManager(t, job.WithClock(clk), job.WithPollInterval(time.Hour), job.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ji, err := m.ScheduleJob(ctx, "k", job.WithScheduleAfter(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !ji.RunAt.Equal(clk.Now().Add(time.Hour)) {
		t.Fatalf("RunAt %v, want now+1h", ji.RunAt)
	}
	// The claim loop sleeps on a timer until the instance is due.
	waitFor(t, "claim loop asleep", func() bool { return clk.Timers() > 0 })
	clk.Advance(59 * time.Minute)
	lookup := func() *job.InstanceInfo {
		got, err := m.GetInstance(ctx, ji.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := lookup(); got.State != job.Scheduled || runs.Load() != 0 {
		t.Fatalf("at 59m: %v after %d runs, want still scheduled", got.State, runs.Load())
	}
	clk.Advance(time.Minute)
	waitFor(t, "first attempt failed and rescheduled", func() bool {
		got := lookup()
		return got.State == job.Scheduled && got.Attempt == 1
	})
	got := lookup()
	if want := clk.Now().Add(time.Minute); !got.RunAt.Equal(want) {
		t.Errorf("retry due %v, want now + backoff = %v", got.RunAt, want)
	}
	clk.Advance(30 * time.Second)
	if got := lookup(); got.State != job.Scheduled {
		t.Fatalf("retry ran before its backoff: %v", got.State)
	}
	clk.Advance(30 * time.Second)
	waitFor(t, "retry completed", func() bool { return lookup().State == job.Completed })
	if runs.Load() != 2 {
		t.Errorf("%d runs, want 2", runs.Load())
	}
}

// TestWorkersBoundConcurrency checks that no more instances run at once
// than there are workers, and that SetWorkers resizes a running manager.
func TestWorkersBoundConcurrency(t *testing.T) {
	t.Parallel()
	var running, peak atomic.Int32
	release := make(chan struct{})
	j := mustJob(t, job.WithKind("k"), job.WithExecutor(func() {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
	}))
	m := newManager(t, job.WithWorkers(2))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 10 {
		if _, err := m.ScheduleJob(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two running", func() bool { return running.Load() == 2 })
	processing := func() int {
		insts, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryState(job.Processing)))
		if err != nil {
			t.Fatal(err)
		}
		return len(insts)
	}
	if n := processing(); n != 2 {
		t.Errorf("%d instances claimed with 2 workers; claims must not exceed free workers", n)
	}
	if err := m.SetWorkers(5); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "five running", func() bool { return running.Load() == 5 })
	if n := processing(); n != 5 {
		t.Errorf("%d instances claimed with 5 workers", n)
	}
	if size, busy := m.Workers(); size != 5 || busy != 5 {
		t.Errorf("Workers() = %d, %d; want 5, 5", size, busy)
	}
	close(release)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := m.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p != 5 {
		t.Errorf("peak concurrency %d, want 5", p)
	}
}

// TestHandlers checks the state change, complete and terminate handlers.
func TestHandlers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string][]job.State{}
	var results []any
	var termErr error
	j := mustJob(t, job.WithKind("k"), job.WithMaxRetries(0),
		job.WithExecutor(func(fail bool) (string, error) {
			if fail {
				return "", errors.New("failed")
			}
			return "done", nil
		}),
		job.WithStateChangeProcessor(func(ji job.Instance, s job.State) {
			mu.Lock()
			seen[ji.Info().ID] = append(seen[ji.Info().ID], s)
			mu.Unlock()
		}),
		job.WithCompleteProcessor(func(ji job.Instance, res []any) { mu.Lock(); results = res; mu.Unlock() }),
		job.WithTerminateProcessor(func(ji job.Instance, err error) { mu.Lock(); termErr = err; mu.Unlock() }),
	)
	m := newManager(t, job.WithWorkers(1))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Scheduled before Start, so the Scheduled handler runs before any
	// claim: across goroutines, handlers of one instance are not ordered.
	ok, err := m.ScheduleJob(ctx, "k", job.WithArguments(false))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := m.ScheduleJob(ctx, "k", job.WithArguments(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "handlers", func() bool { mu.Lock(); defer mu.Unlock(); return results != nil && termErr != nil })
	mu.Lock()
	defer mu.Unlock()
	if len(results) != 1 || results[0] != "done" {
		t.Errorf("complete handler got %v, want [done]", results)
	}
	if termErr.Error() != "failed" {
		t.Errorf("terminate handler got %v", termErr)
	}
	for id, want := range map[string][]job.State{
		ok.ID:  {job.Scheduled, job.Processing, job.Completed},
		bad.ID: {job.Scheduled, job.Processing, job.Terminated},
	} {
		if got := seen[id]; !slices.Equal(got, want) {
			t.Errorf("state changes of %s: %v, want %v", id, got, want)
		}
	}
}

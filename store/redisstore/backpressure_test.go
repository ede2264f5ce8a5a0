package redisstore_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// A manager running many short jobs on a Redis that reaches maxmemory
// (noeviction) mid-run stops starting work it could not record: while the
// store is full no attempt starts beyond those claimed before (at most
// one claim's worth, bounded by the workers), and the Processing instances
// never rise above what was held when it filled up instead of piling up. The leases of what it holds are renewed meanwhile (renewals
// may run over maxmemory), so nothing is rescued and run twice; once memory
// is back every job completes, each after exactly one attempt.
//
// Before the claim script was refused as a whole over maxmemory and the
// engine paused claiming on store.ErrFull, claims went on while outcomes
// were refused, about a thousand attempts piled up per process, and jobs
// ran twice once memory came back (issue 13, item 9).
func TestManagerBackpressureAtMaxmemory(t *testing.T) {
	t.Parallel()
	const (
		jobs    = 1500
		workers = 4
		lease   = 2 * time.Second
		// fullFor is how long Redis stays full: longer than the lease, so
		// only renewals made while full keep the held attempts' leases.
		fullFor = 3 * time.Second
	)
	p := testserver.StartRedis(t, "--maxmemory-policy", "noeviction")
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c, "backpressure")
	ctx := t.Context()

	var (
		mu      sync.Mutex
		runs    = map[string]int{} // executions per instance
		started atomic.Int64       // executions begun
	)
	j, err := job.NewJob(job.WithKind("short"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
		started.Add(1)
		mu.Lock()
		runs[ji.Info().ID]++
		mu.Unlock()
		// A little work, so claims, renewals and outcomes interleave.
		select {
		case <-time.After(2 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := job.NewManager(
		job.WithStore(s),
		job.WithWorkers(workers),
		job.WithLease(lease),
		job.WithPollInterval(50*time.Millisecond),
		job.WithRescueInterval(100*time.Millisecond),
		job.WithLogger(testLogger(t)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, jobs)
	for i := range ids {
		ji, err := m.ScheduleJob(ctx, "short")
		if err != nil {
			t.Fatalf("ScheduleJob %d: %v", i, err)
		}
		ids[i] = ji.ID
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Stop(stopCtx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})

	// Mid-run: a tenth of the jobs have started.
	waitFor(t, 30*time.Second, "a tenth of the jobs to start", func() bool { return started.Load() >= jobs/10 })
	makeRoom := fillUp(t, c)
	atFull := started.Load()
	processing := func() int {
		t.Helper()
		proc, err := s.LookupInstances(ctx, &store.Query{States: []store.State{store.Processing}})
		if err != nil {
			t.Fatalf("LookupInstances(Processing) at maxmemory: %v", err)
		}
		return len(proc)
	}
	// What was claimed before Redis filled up: the running attempts and
	// those whose outcomes wait to be written.
	held := processing()
	if held == 0 {
		t.Fatal("no instance Processing when the store filled up: the test filled it too late to check anything")
	}
	// Every write but a renewal or a prune is refused from here on.
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{finst("probe")}, Now: time.Now(), Node: "test"}); err == nil {
		t.Fatal("Enqueue succeeded after CONFIG SET maxmemory 1; the store is not full")
	}

	// While full, sample the store: no instance becomes Processing (only
	// claims could make one, so the count never rises above what was held
	// when the store filled up), and no attempt starts but those claimed
	// before (at most one claim's worth, which the free pool slots bound).
	maxProcessing := held
	end := time.Now().Add(fullFor)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(end) {
		<-tick.C
		n := processing()
		maxProcessing = max(maxProcessing, n)
		if n > held {
			t.Fatalf("%d instances Processing while the store is full, %d when it filled up: the manager claims work it cannot record", n, held)
		}
	}
	whileFull := started.Load() - atFull
	if whileFull > workers {
		t.Fatalf("%d attempts started while the store was full, want at most %d (one claim made before it filled up)", whileFull, workers)
	}

	makeRoom()
	waitFor(t, 60*time.Second, "every job to complete once memory is back", func() bool {
		done, err := s.LookupInstances(ctx, &store.Query{States: []store.State{store.Completed}})
		return err == nil && len(done) == jobs
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if n := runs[id]; n != 1 {
			t.Errorf("instance %s ran %d times, want once", id, n)
		}
	}
	all, err := s.LookupInstances(ctx, &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		if in.State != store.Completed || in.Attempt != 1 {
			t.Errorf("instance %s ended %v after %d attempts, want completed after 1", in.ID, in.State, in.Attempt)
		}
	}
	t.Logf("%d attempts started before the store filled up, %d while it was full; %d Processing when it filled up, at most %d meanwhile", atFull, whileFull, held, maxProcessing)
}

// waitFor polls cond until it holds, failing t after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testLogger logs the manager's warnings and errors through t.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

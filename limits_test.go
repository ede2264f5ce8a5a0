package job_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// gauge counts the executors of a kind running at once and keeps the
// peak. An executor counts from its start (after the claim counted it)
// to its return (before its outcome releases the slot), so the gauge
// never exceeds what the store counts.
type gauge struct{ now, peak, done atomic.Int64 }

func (g *gauge) run(d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		n := g.now.Add(1)
		for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
		}
		defer func() { g.now.Add(-1); g.done.Add(1) }()
		t := time.NewTimer(d) // the work itself: it takes d
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return nil
	}
}

// limitCluster starts n managers on st, each running kinds "limited" and
// "free" (g, f) with workers workers.
func limitCluster(t *testing.T, st store.Store, n, workers int, g, f *gauge) []*job.Manager {
	t.Helper()
	var ms []*job.Manager
	for i := range n {
		m, err := job.NewManager(job.WithStore(st), job.WithWorkers(workers), job.WithNodeID(fmt.Sprintf("lim-%d", i)), job.WithPollInterval(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for kind, gg := range map[string]*gauge{"limited": g, "free": f} {
			j, err := job.NewJob(job.WithKind(kind), job.WithExecutor(gg.run(3*time.Millisecond)))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.RegisterJob(j); err != nil {
				t.Fatal(err)
			}
		}
		ms = append(ms, m)
	}
	for _, m := range ms {
		if err := m.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
	}
	return ms
}

// A limit set from Go holds across managers: never more running than it
// allows, while the unlimited kind runs past it.
func TestConcurrencyLimitAcrossManagers(t *testing.T) {
	t.Parallel()
	st := mustMemdb(t)
	setLimit(t, st, job.ConcurrencyLimit{Kind: "limited", Max: 3})
	var g, f gauge
	ms := limitCluster(t, st, 3, 8, &g, &f)
	scheduleN(t, ms[1], "limited", 90)
	scheduleN(t, ms[2], "free", 90)
	waitFor(t, "every job done", func() bool { return g.done.Load() == 90 && f.done.Load() == 90 })
	t.Logf("peak running: limited %d (limit 3), free %d", g.peak.Load(), f.peak.Load())
	if p := g.peak.Load(); p > 3 {
		t.Fatalf("peak of limited: %d running, limit 3", p)
	}
	if p := f.peak.Load(); p <= 3 {
		t.Errorf("peak of the unlimited kind: %d running on 24 workers; the limit of another kind held it", p)
	}
}

// Limits are data: changed and removed at run time, listed with their use.
func TestConcurrencyLimitChangedAtRunTime(t *testing.T) {
	t.Parallel()
	st := mustMemdb(t)
	setLimit(t, st, job.ConcurrencyLimit{Kind: "limited", Max: 0})
	var g, f gauge
	ms := limitCluster(t, st, 2, 4, &g, &f)
	admin := ms[0].Admin()
	ctx := t.Context()
	scheduleN(t, ms[0], "limited", 9)
	waiting, err := ms[0].ScheduleJob(ctx, "limited")
	if err != nil {
		t.Fatal(err)
	}
	scheduleN(t, ms[0], "free", 5)
	waitFor(t, "the free jobs done", func() bool { return f.done.Load() == 5 })
	ls, err := admin.ListConcurrencyLimits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Running != 0 || ls[0].Waiting != 10 {
		t.Fatalf("ListConcurrencyLimits with Max 0 = %+v, want one limit with 0 running and 10 waiting", ls)
	}
	if g.done.Load() != 0 {
		t.Fatalf("%d limited jobs ran under a limit of 0", g.done.Load())
	}
	ex, err := ms[1].ExplainWaiting(ctx, waiting.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := "waiting for the concurrency limit of kind limited (0/0 running)"; ex.Reason != job.WaitConcurrencyLimit || ex.Message != want {
		t.Fatalf("ExplainWaiting = %s: %q, want %s: %q", ex.Reason, ex.Message, job.WaitConcurrencyLimit, want)
	}
	if err := admin.SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: "limited", Max: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "some limited jobs done under a limit of 1", func() bool { return g.done.Load() >= 3 })
	if err := admin.DeleteConcurrencyLimit(ctx, "limited", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every limited job done", func() bool { return g.done.Load() == 10 })
	if ls, err := admin.ListConcurrencyLimits(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("ListConcurrencyLimits after the delete = %+v, %v; want none", ls, err)
	}
	if err := admin.DeleteConcurrencyLimit(ctx, "limited", ""); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("deleting a limit twice: %v, want ErrNotFound", err)
	}
	if err := admin.SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: "limited", Max: -1}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("SetConcurrencyLimit(Max -1): %v, want ErrInvalid", err)
	}
}

// hidesLimits is a store that does not enforce limits (it hides the
// capability of the store it wraps).
type hidesLimits struct{ store.Store }

// On a store that cannot enforce a limit, SetConcurrencyLimit refuses,
// and a limit stored all the same holds its kind back rather than be
// passed.
func TestConcurrencyLimitUnsupportedStore(t *testing.T) {
	t.Parallel()
	mem := mustMemdb(t)
	// A node on a store that enforces limits set one.
	setLimit(t, mem, job.ConcurrencyLimit{Kind: "limited", Max: 2})
	var g, f gauge
	ms := limitCluster(t, &hidesLimits{Store: mem}, 1, 4, &g, &f)
	ctx := t.Context()
	if err := ms[0].Admin().SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: "limited", Max: 2}); !errors.Is(err, job.ErrLimitsUnsupported) {
		t.Fatalf("SetConcurrencyLimit on a store that does not enforce limits: %v, want ErrLimitsUnsupported", err)
	}
	scheduleN(t, ms[0], "limited", 3)
	scheduleN(t, ms[0], "free", 3)
	waitFor(t, "the free jobs done", func() bool { return f.done.Load() == 3 })
	if n := g.done.Load() + g.now.Load(); n != 0 {
		t.Fatalf("%d limited jobs started on a store that cannot enforce their limit", n)
	}
}

// setLimit sets l on st through a manager that is never started.
func setLimit(t *testing.T, st store.Store, l job.ConcurrencyLimit) {
	t.Helper()
	m, err := job.NewManager(job.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Admin().SetConcurrencyLimit(t.Context(), l); err != nil {
		t.Fatal(err)
	}
}

// TestLimitDoesNotWaitForTheFinishInterval: a limit as large as the
// workers frees its slots only when outcomes are written, and the
// completer holds outcomes for its finish interval while they keep
// coming. A claim left short by the limit has the completer write them at
// once. Before, the jobs started a limit's worth per interval: 64 per
// 100 ms (636 jobs/s against 31,151 without the limit, on Redis), and
// here, with a 1 s interval, 60 jobs would take 30 s.
func TestLimitDoesNotWaitForTheFinishInterval(t *testing.T) {
	t.Parallel()
	st := mustMemdb(t)
	m := newManager(t, job.WithStore(st), job.WithWorkers(2), job.WithFinishInterval(time.Second))
	if err := m.RegisterJob(mustJob(t, job.WithKind("limited"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := m.Admin().SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: "limited", Max: 2}); err != nil {
		t.Fatal(err)
	}
	scheduleN(t, m, "limited", 60)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "60 limited jobs completed", func() bool { return count(t, m, job.WithQueryState(job.Completed)) == 60 })
}

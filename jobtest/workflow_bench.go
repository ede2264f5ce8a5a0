package jobtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// WorkflowThroughput measures the cost of dependencies: it runs n
// workflows of ten no-op tasks each (one source, eight that wait for it,
// one that waits for the eight), scheduled by 16 goroutines, on one
// manager with 16 workers on st, and returns the tasks run per second
// from the first schedule to the last task's end. With asJobs it runs
// the same 10n tasks as independent jobs instead, scheduled ten per
// ScheduleJobs call (the same number of store calls), for the baseline.
// Releases come from wake-ups only: the recheck is an hour away.
func WorkflowThroughput(tb testing.TB, st store.Store, n int, asJobs bool) float64 {
	tb.Helper()
	total := int64(n * 10)
	var ran atomic.Int64
	done := make(chan struct{})
	j, err := job.NewJob(job.WithKind("wf-bench"), job.WithExecutor(func() {
		if ran.Add(1) == total {
			close(done)
		}
	}))
	if err != nil {
		tb.Fatal(err)
	}
	m, stop := startBenchManager(tb, st, j)
	defer stop()
	ctx := context.Background()
	begin := time.Now()
	var wg sync.WaitGroup
	next := atomic.Int64{}
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if asJobs {
					items := make([]job.BatchItem, 10)
					for k := range items {
						items[k] = job.BatchItem{Kind: "wf-bench"}
					}
					if _, err := m.ScheduleJobs(ctx, items...); err != nil {
						errs <- err
						return
					}
					continue
				}
				wf := job.NewWorkflow("bench").Add("src", "wf-bench")
				var mids []string
				for k := range 8 {
					mids = append(mids, fmt.Sprint("m", k))
					wf.Add(mids[k], "wf-bench", job.After("src"))
				}
				wf.Add("join", "wf-bench", job.After(mids...))
				if _, err := m.ScheduleWorkflow(ctx, wf); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		tb.Fatalf("%d of %d tasks ran within 5 minutes", ran.Load(), total)
	}
	return float64(total) / time.Since(begin).Seconds()
}

// startBenchManager starts a manager of 16 workers running j on st, for the
// workflow benchmarks (the recheck an hour away, so only wake-ups count);
// stop stops it.
func startBenchManager(tb testing.TB, st store.Store, j *job.Job) (m *job.Manager, stop func()) {
	tb.Helper()
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(16), job.WithShardRecheck(time.Hour))
	if err != nil {
		tb.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	return m, func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = m.Stop(sctx)
	}
}

package jobtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// WorkflowLatency is what WorkflowFanIn and WorkflowChain measured.
type WorkflowLatency struct {
	// Total is from ScheduleWorkflow's return to the last task's end.
	Total time.Duration
	// Starts are, per task that waited, from the end of its last
	// dependency's executor to the start of its own (the release: the
	// outcome's write, the wake-up, the claim and the gate), sorted.
	Starts []time.Duration
}

// Quantile returns the q-quantile (0 to 1) of l.Starts, 0 when empty.
func (l WorkflowLatency) Quantile(q float64) time.Duration {
	if len(l.Starts) == 0 {
		return 0
	}
	return l.Starts[min(len(l.Starts)-1, int(q*float64(len(l.Starts))))]
}

// latencyRun runs one workflow, built by build with the kind it names, on
// one manager with 16 workers on st, recording when each task's executor
// starts and ends.
func latencyRun(tb testing.TB, st store.Store, tasks int, build func(kind string) *job.Workflow) (starts, ends map[string]time.Time, total time.Duration) {
	tb.Helper()
	var mu sync.Mutex
	starts, ends = make(map[string]time.Time, tasks), make(map[string]time.Time, tasks)
	done := make(chan struct{})
	j, err := job.NewJob(job.WithKind("wf-latency"), job.WithExecutor(func(ji job.Instance) {
		name := ji.Info().Task
		mu.Lock()
		starts[name] = time.Now()
		mu.Unlock()
		mu.Lock()
		ends[name] = time.Now()
		n := len(ends)
		mu.Unlock()
		if n == tasks {
			close(done)
		}
	}))
	if err != nil {
		tb.Fatal(err)
	}
	m, stop := startBenchManager(tb, st, j)
	defer stop()
	ctx := context.Background()
	if _, err := m.ScheduleWorkflow(ctx, build("wf-latency")); err != nil {
		tb.Fatal(err)
	}
	begin := time.Now()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		tb.Fatalf("%d of %d tasks ran within 5 minutes", len(ends), tasks)
	}
	total = time.Since(begin)
	mu.Lock()
	defer mu.Unlock()
	return starts, ends, total
}

// WorkflowFanIn measures the release of a wide join: one workflow of n
// tasks without dependencies and a join that waits for all of them (n at
// most store.MaxTaskDeps), on one manager with 16 workers on st. Its one
// start latency is from the end of the last of the n to the join's start.
func WorkflowFanIn(tb testing.TB, st store.Store, n int) WorkflowLatency {
	tb.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("p", i)
	}
	starts, ends, total := latencyRun(tb, st, n+1, func(kind string) *job.Workflow {
		wf := job.NewWorkflow("fan-in")
		for _, p := range names {
			wf.Add(p, kind)
		}
		return wf.Add("join", kind, job.After(names...))
	})
	var last time.Time
	for _, p := range names {
		if e := ends[p]; e.After(last) {
			last = e
		}
	}
	return WorkflowLatency{Total: total, Starts: []time.Duration{starts["join"].Sub(last)}}
}

// WorkflowChain measures the release of a chain: one workflow of n tasks,
// each waiting for the one before, on one manager with 16 workers on st.
// Its start latencies are the n-1 links'.
func WorkflowChain(tb testing.TB, st store.Store, n int) WorkflowLatency {
	tb.Helper()
	starts, ends, total := latencyRun(tb, st, n, func(kind string) *job.Workflow {
		wf := job.NewWorkflow("chain").Add("t0", kind)
		for i := 1; i < n; i++ {
			wf.Add(fmt.Sprint("t", i), kind, job.After(fmt.Sprint("t", i-1)))
		}
		return wf
	})
	l := WorkflowLatency{Total: total}
	for i := 1; i < n; i++ {
		l.Starts = append(l.Starts, starts[fmt.Sprint("t", i)].Sub(ends[fmt.Sprint("t", i-1)]))
	}
	slices.Sort(l.Starts)
	return l
}

// ReportWorkflowLatency runs measure b.N times and reports the start
// latencies of every run together (p50-start-ms, p99-start-ms,
// max-start-ms) and the mean total (total-ms). measure gets a fresh
// store from newStore for each run.
func ReportWorkflowLatency(b *testing.B, newStore func(i int) store.Store, measure func(tb testing.TB, st store.Store) WorkflowLatency) {
	b.Helper()
	var all WorkflowLatency
	for i := range b.N {
		l := measure(b, newStore(i))
		all.Total += l.Total
		all.Starts = append(all.Starts, l.Starts...)
	}
	slices.Sort(all.Starts)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(all.Quantile(0.5)), "p50-start-ms")
	b.ReportMetric(ms(all.Quantile(0.99)), "p99-start-ms")
	b.ReportMetric(ms(all.Quantile(1)), "max-start-ms")
	b.ReportMetric(ms(all.Total)/float64(b.N), "total-ms")
}

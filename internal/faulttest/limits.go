package faulttest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
)

// LimitAccuracy runs three worker processes (8 workers each) on one store
// with a cluster-wide concurrency limit of limit on the "fault" kind, and
// jobs jobs of it (each sleeps sleep). It checks that the limit held
// across the processes: the most Processing the store counted, sampled
// every 5 ms, and the most executors running at once by the run logs
// (each counts from its start line to its end line, inside its slot) are
// never above limit. Every job completes once (run.finish). It returns
// both peaks.
func LimitAccuracy(t *testing.T, spec Spec, jobs, limit int, sleep time.Duration) (storePeak, runPeak int) {
	ns := namespace(t)
	dir := t.TempDir()
	sched, err := job.NewManager(job.WithStore(spec.Open(t, ns)))
	if err != nil {
		t.Fatal(err)
	}
	fj, err := job.NewJob(job.WithKind("fault"), job.WithMaxRetries(job.RetryForever), job.WithExecutor(func(ms int) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.RegisterJob(fj); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sched.Admin().SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: "fault", Max: limit}); err != nil {
		t.Fatal(err)
	}
	var common []string
	if spec.Start != nil {
		common = spec.Start(t, ns)
	}
	r := &run{t: t, sched: sched, ids: make(map[string]bool, jobs)}
	for range jobs {
		ji, err := sched.ScheduleJob(ctx, "fault", job.WithArguments(int(sleep/time.Millisecond)))
		if err != nil {
			t.Fatalf("schedule: %v", err)
		}
		r.ids[ji.ID] = true
	}
	// Sample the store's count of Processing while the workers run.
	var peak atomic.Int64
	var samples atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			rows, err := sched.Admin().CountInstances(ctx, "", "fault")
			if err != nil {
				continue
			}
			var n int64
			for _, g := range rows {
				n += g.States[job.Processing]
			}
			samples.Add(1)
			if n > peak.Load() {
				peak.Store(n)
			}
		}
	}()
	for i := range 3 {
		r.ws = append(r.ws, startWorker(t, spec, ns, fmt.Sprintf("node%d", i), dir, append([]string{"-workers", "8"}, common...)...))
	}
	runs := r.finish(2 * time.Minute)
	close(stop)
	wg.Wait()
	storePeak, runPeak = int(peak.Load()), runningPeak(runs)
	t.Logf("limit %d, %d jobs of %v on 3 processes of 8 workers: peak Processing in the store %d (%d samples), peak executors running %d",
		limit, jobs, sleep, storePeak, samples.Load(), runPeak)
	if storePeak > limit {
		t.Errorf("the store counted %d Processing at once; limit %d", storePeak, limit)
	}
	if runPeak > limit {
		t.Errorf("%d executors ran at once across the processes; limit %d", runPeak, limit)
	}
	return storePeak, runPeak
}

// runningPeak is the most runs of runs that were under way at once: from
// a start line to its end or cancel line (an end at the same instant as
// a start counts first).
func runningPeak(runs []runLine) int {
	type ev struct {
		at time.Time
		d  int
	}
	var evs []ev
	for _, l := range runs {
		switch l.op {
		case "start":
			evs = append(evs, ev{l.at, 1})
		case "end", "cancel":
			evs = append(evs, ev{l.at, -1})
		}
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d
	})
	n, top := 0, 0
	for _, e := range evs {
		n += e.d
		top = max(top, n)
	}
	return top
}

package metrics_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobkit/job"
	"github.com/jobkit/job/metrics"
	"github.com/jobkit/job/store/memdbstore"
)

// perJobJobs is how many jobs one iteration of BenchmarkObserverPerJob
// schedules and runs.
const perJobJobs = 20000

// BenchmarkObserverPerJob: what an observer costs a job end to end on
// memdb, from ScheduleJob (8 goroutines) to the completed record, with no
// observer, a no-op one (the store wrapper and the event calls alone) and
// the Prometheus Collector (doc/benchmarks-appendix.md, "Issue 16: metrics"). Each
// iteration runs the three in turn, starting with a different one, so a
// shared machine's changing load falls on all three alike:
//
//	go test -run '^$' -bench ObserverPerJob -benchtime 6x -count 3 .
func BenchmarkObserverPerJob(b *testing.B) {
	variants := []struct {
		name string
		obs  func(b *testing.B) job.Observer
	}{
		{"none", nil},
		{"nop", func(*testing.B) job.Observer { return job.NopObserver{} }},
		{"prometheus", func(b *testing.B) job.Observer {
			col, err := metrics.New()
			if err != nil {
				b.Fatal(err)
			}
			prometheus.NewRegistry().MustRegister(col)
			return col
		}},
	}
	total := make([]time.Duration, len(variants))
	cpu := make([]time.Duration, len(variants))
	i := 0
	for b.Loop() {
		for k := range variants {
			v := (i + k) % len(variants)
			var obs job.Observer
			if variants[v].obs != nil {
				obs = variants[v].obs(b)
			}
			wall, used := runJobs(b, obs)
			total[v] += wall
			cpu[v] += used
		}
		i++
	}
	for v, c := range variants {
		b.ReportMetric(float64(perJobJobs*i)/total[v].Seconds(), c.name+"-jobs/s")
		b.ReportMetric(float64(cpu[v].Nanoseconds())/float64(perJobJobs*i), c.name+"-cpu-ns/job")
	}
	b.ReportMetric(0, "ns/op")
}

// runJobs schedules perJobJobs no-op jobs from 8 goroutines into a new
// manager on memdb with obs (none when nil) and returns the wall and CPU
// time from the first schedule call to the last completion.
func runJobs(b *testing.B, obs job.Observer) (wall, used time.Duration) {
	st, err := memdbstore.New()
	if err != nil {
		b.Fatal(err)
	}
	opts := []job.ManagerOption{job.WithStore(st), job.WithWorkers(16), job.WithLogger(quiet)}
	if obs != nil {
		opts = append(opts, job.WithObserver(obs))
	}
	m, err := job.NewManager(opts...)
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	all := make(chan struct{})
	j, err := job.NewJob(job.WithKind("noop"), job.WithExecutor(func(int) {}),
		job.WithCompleteProcessor(func(job.Instance, []any) {
			if done.Add(1) == perJobJobs {
				close(all)
			}
		}))
	if err != nil {
		b.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		b.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	c0, start := cpuTime(), time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range perJobJobs / 8 {
				if _, err := m.ScheduleJob(context.Background(), "noop", job.WithArguments(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%d of %d jobs completed in 2 minutes", done.Load(), perJobJobs)
	}
	wall, used = time.Since(start), cpuTime()-c0
	if err := m.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
	return wall, used
}

// BenchmarkCollectorEvents: the Collector's cost per event, once the
// event's kind and queue have been seen, on one goroutine and on all:
//
//	go test -run '^$' -bench CollectorEvents -benchmem .
func BenchmarkCollectorEvents(b *testing.B) {
	col, err := metrics.New()
	if err != nil {
		b.Fatal(err)
	}
	prometheus.NewRegistry().MustRegister(col)
	storeErr := errors.New("store down")
	events := []struct {
		name string
		fn   func()
	}{
		{"Scheduled", func() { col.Scheduled(job.ScheduledEvent{Kind: "email", Queue: "default"}) }},
		{"AttemptStarted", func() {
			col.AttemptStarted(job.AttemptStartedEvent{Kind: "email", Queue: "default", Attempt: 1, Wait: 3 * time.Millisecond})
		}},
		{"AttemptFinished", func() {
			col.AttemptFinished(job.AttemptFinishedEvent{Kind: "email", Queue: "default", Attempt: 1, State: job.Completed, Duration: 40 * time.Millisecond})
		}},
		{"StoreCall", func() { col.StoreCall(job.StoreCallEvent{Op: job.OpClaim, Duration: 200 * time.Microsecond}) }},
		{"StoreCallError", func() { col.StoreCall(job.StoreCallEvent{Op: job.OpFinish, Duration: time.Second, Err: storeErr}) }},
		// What one job costs the Collector: scheduled, started, finished,
		// and the three store calls (enqueue, claim, finish) were each
		// carrying one job alone (they carry up to 128 to 512).
		{"Job", func() {
			col.Scheduled(job.ScheduledEvent{Kind: "email", Queue: "default"})
			col.StoreCall(job.StoreCallEvent{Op: job.OpEnqueue, Duration: 50 * time.Microsecond})
			col.StoreCall(job.StoreCallEvent{Op: job.OpClaim, Duration: 50 * time.Microsecond})
			col.AttemptStarted(job.AttemptStartedEvent{Kind: "email", Queue: "default", Attempt: 1})
			col.AttemptFinished(job.AttemptFinishedEvent{Kind: "email", Queue: "default", Attempt: 1, State: job.Completed, Duration: time.Millisecond})
			col.StoreCall(job.StoreCallEvent{Op: job.OpFinish, Duration: 50 * time.Microsecond})
		}},
	}
	for _, e := range events {
		e.fn() // the series exist before the timing starts
		b.Run(e.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.fn()
			}
		})
		b.Run(e.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					e.fn()
				}
			})
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used: on a
// shared machine it measures a job's cost where throughput measures the
// share of the machine the run got.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

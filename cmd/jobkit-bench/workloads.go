package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func ns(name string) string { return fmt.Sprintf("bench_%s_%08x", name, rand.Uint32()) }

// noopRecords builds n ready no-op instances as the manager would store
// them.
func noopRecords(n int, now time.Time) []*store.Instance {
	recs := make([]*store.Instance, n)
	for i := range recs {
		recs[i] = &store.Instance{
			ID: uuid.Must(uuid.NewV7()).String(), Kind: "noop", Queue: job.DefaultQueue,
			Args: []byte("[]"), RunAt: now, CreatedAt: now,
		}
	}
	return recs
}

// fill enqueues n ready no-op instances in batches.
func fill(ctx context.Context, s store.Store, n int) {
	const batch = 1000
	for done := 0; done < n; done += batch {
		now := time.Now()
		recs := noopRecords(min(batch, n-done), now)
		res, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: recs, Node: "bench", Now: now})
		if err != nil {
			log.Fatalf("enqueue: %v", err)
		}
		for _, r := range res {
			if r.Err != nil {
				log.Fatalf("enqueue: %v", r.Err)
			}
		}
	}
}

func noopManager(s store.Store, workers int, onDone func()) *job.Manager {
	m, err := job.NewManager(job.WithStore(s), job.WithWorkers(workers), job.WithLogger(quiet),
		job.WithClaimBatch(max(workers, job.DefaultClaimBatch)))
	if err != nil {
		log.Fatal(err)
	}
	opts := []job.JobOption{job.WithKind("noop"), job.WithExecutor(func() {}), job.WithMaxRetries(0)}
	if onDone != nil {
		opts = append(opts, job.WithCompleteProcessor(func(job.Instance, []any) { onDone() }))
	}
	j, err := job.NewJob(opts...)
	if err != nil {
		log.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		log.Fatal(err)
	}
	return m
}

func stop(m *job.Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		log.Printf("stop: %v", err)
	}
}

// throughput works n pre-scheduled no-op jobs to completion (each one
// claimed, run, and recorded Completed with its history) and returns jobs
// per second.
func throughput(ctx context.Context, t target, n, workers int) float64 {
	s, err := t.open(ctx, ns("tp"))
	if err != nil {
		log.Fatal(err)
	}
	fill(ctx, s, n)
	var done atomic.Int64
	all := make(chan struct{})
	m := noopManager(s, workers, func() {
		if done.Add(1) == int64(n) {
			close(all)
		}
	})
	start := time.Now()
	if err := m.Start(ctx); err != nil {
		log.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		log.Fatalf("throughput: only %d of %d done after 10 minutes", done.Load(), n)
	}
	el := time.Since(start)
	stop(m)
	closeStore(s)
	return float64(n) / el.Seconds()
}

// scheduleAndRun schedules n no-op jobs from 8 goroutines through
// ScheduleJob while the manager runs them, and returns jobs per second
// from the first schedule to the last completion.
func scheduleAndRun(ctx context.Context, t target, n, workers int) float64 {
	s, err := t.open(ctx, ns("sr"))
	if err != nil {
		log.Fatal(err)
	}
	var done atomic.Int64
	all := make(chan struct{})
	m := noopManager(s, workers, func() {
		if done.Add(1) == int64(n) {
			close(all)
		}
	})
	if err := m.Start(ctx); err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	const producers = 8
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < n; i += producers {
				if _, err := m.ScheduleJob(ctx, "noop"); err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		log.Fatalf("schedule and run: only %d of %d done after 10 minutes", done.Load(), n)
	}
	el := time.Since(start)
	stop(m)
	closeStore(s)
	return float64(n) / el.Seconds()
}

// idleLatency schedules n jobs one at a time on an idle manager and
// returns the p50 and p99 of the time from ScheduleJob's call to the
// executor's start, in milliseconds.
func idleLatency(ctx context.Context, t target, n int) (p50, p99 float64) {
	s, err := t.open(ctx, ns("lat"))
	if err != nil {
		log.Fatal(err)
	}
	started := make(chan time.Time, 1)
	m, err := job.NewManager(job.WithStore(s), job.WithWorkers(8), job.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("ping"), job.WithExecutor(func() { started <- time.Now() }))
	if err != nil {
		log.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		log.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		log.Fatal(err)
	}
	lat := make([]float64, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := m.ScheduleJob(ctx, "ping"); err != nil {
			log.Fatal(err)
		}
		select {
		case t1 := <-started:
			lat = append(lat, float64(t1.Sub(t0).Microseconds())/1000)
		case <-time.After(30 * time.Second):
			log.Fatal("idle latency: a job did not start within 30 s")
		}
		time.Sleep(time.Millisecond) // idle between jobs: let the manager go back to waiting
	}
	stop(m)
	closeStore(s)
	slices.Sort(lat)
	return percentile(lat, 0.50), percentile(lat, 0.99)
}

// memoryPerPending schedules n instances through ScheduleJob (a manager
// that is not started) and returns the growth of the store's memory per
// instance.
func memoryPerPending(ctx context.Context, t target, n int) float64 {
	s, err := t.open(ctx, ns("mem"))
	if err != nil {
		log.Fatal(err)
	}
	m := noopManager(s, 1, nil)
	before, err := t.memoryUsed(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for range n {
		if _, err := m.ScheduleJob(ctx, "noop"); err != nil {
			log.Fatal(err)
		}
	}
	after, err := t.memoryUsed(ctx)
	if err != nil {
		log.Fatal(err)
	}
	runtime.KeepAlive(m)
	runtime.KeepAlive(s)
	closeStore(s)
	return float64(after-before) / float64(n)
}

// claimCost fills a queue to depth and returns the mean time of claiming
// one instance and finishing it, over 2,000 rounds (at most half the
// depth, so the depth stays about the same).
func claimCost(ctx context.Context, t target, depth int) float64 {
	s, err := t.open(ctx, ns("claim"))
	if err != nil {
		log.Fatal(err)
	}
	fill(ctx, s, depth)
	rounds := min(2000, depth/2)
	start := time.Now()
	for range rounds {
		now := time.Now()
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: job.DefaultQueue, Owner: "bench", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || len(res.Instances) != 1 {
			log.Fatalf("claim at depth %d: %v (%d claimed)", depth, err, len(res.Instances))
		}
		in := res.Instances[0]
		if _, err := s.Finish(ctx, &store.FinishParams{Owner: "bench", Now: now, Outcomes: []store.Outcome{{ID: in.ID, Attempt: in.Attempt, State: store.Completed}}}); err != nil {
			log.Fatal(err)
		}
	}
	el := time.Since(start)
	closeStore(s)
	return float64(el.Microseconds()) / float64(rounds)
}

func closeStore(s store.Store) {
	if c, ok := s.(store.Closer); ok {
		_ = c.Close()
	}
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

func median(runs int, f func() float64) float64 {
	vs := make([]float64, runs)
	for i := range vs {
		vs[i] = f()
	}
	return medianOf(vs)
}

func medianOf(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// BenchInspect measures the Inspector on a store holding completed
// instances that went through Enqueue, Claim and Finish, plus ready ones on
// top: Counts, Lag, and the first page of instances (unfiltered, and of
// the ready ones by state). A plugin's benchmark opens a handle on an
// empty namespace and calls it; filling takes most of the time and is
// reported as fill-s (seconds) and fill-per-s (instances a second).
func BenchInspect(b *testing.B, s store.Store, completed, ready int) {
	ctx := context.Background()
	start := time.Now()
	FillCompleted(b, s, completed, 4)
	var ins []*store.Instance
	for i := range ready {
		in := benchInstance(completed+i, "bench.ready", "default")
		ins = append(ins, in)
		if len(ins) == 1000 || i == ready-1 {
			if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Node: "bench", Now: base}); err != nil {
				b.Fatalf("enqueue ready: %v", err)
			}
			ins = nil
		}
	}
	fill := time.Since(start)
	rows, err := s.Counts(ctx, &store.CountsParams{})
	if err != nil {
		b.Fatalf("Counts: %v", err)
	}
	var done, waiting int64
	for _, r := range rows {
		done += r.States[store.Completed]
		waiting += r.States[store.Scheduled]
	}
	if done != int64(completed) || waiting != int64(ready) {
		b.Fatalf("Counts after the fill: %d completed, %d scheduled; want %d and %d", done, waiting, completed, ready)
	}
	b.Logf("filled %d completed + %d ready in %v (%.0f instances/s)", completed, ready, fill.Round(time.Millisecond), float64(completed+ready)/fill.Seconds())
	now := base.Add(time.Hour)
	b.Run("Counts", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Counts(ctx, &store.CountsParams{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Lag", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Lag(ctx, &store.LagParams{Now: now}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("FirstPage", func(b *testing.B) {
		for b.Loop() {
			p, err := s.PageInstances(ctx, &store.Query{})
			if err != nil || len(p.Instances) != store.DefaultPageSize {
				b.Fatalf("first page: %v, %d instances", err, len(p.Instances))
			}
		}
	})
	b.Run("FirstPageScheduled", func(b *testing.B) {
		for b.Loop() {
			p, err := s.PageInstances(ctx, &store.Query{States: []store.State{store.Scheduled}})
			if err != nil || len(p.Instances) != store.DefaultPageSize {
				b.Fatalf("first page of scheduled: %v, %d instances", err, len(p.Instances))
			}
		}
	})
	b.Run("SecondPage", func(b *testing.B) {
		p, err := s.PageInstances(ctx, &store.Query{})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := s.PageInstances(ctx, &store.Query{Cursor: p.Next}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchInstance returns instance i of kind in queue, with a UUID-shaped
// ID, created i ms after base: a thousand a second, a busy cluster's rate.
func benchInstance(i int, kind, queue string) *store.Instance {
	return &store.Instance{
		ID:   fmt.Sprintf("%08x-0000-4000-8000-%012x", i>>16, i),
		Kind: kind, Queue: queue, Args: []byte(`["user@example.com",42]`),
		RunAt: base, CreatedAt: base.Add(time.Duration(i) * time.Millisecond), MaxRetries: 3,
	}
}

// FillCompleted puts n instances of kind "bench.done" through Enqueue,
// Claim and Finish (Completed) in batches of 1000, as a cluster running
// them would: workers goroutines, each with its own queue done-<w>.
func FillCompleted(b testing.TB, s store.Store, n, workers int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	per := (n + workers - 1) / workers
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner, queue := fmt.Sprintf("bench-%d", w), fmt.Sprintf("done-%d", w)
			for from := w * per; from < min((w+1)*per, n); from += 1000 {
				var ins []*store.Instance
				for i := from; i < min(from+1000, (w+1)*per, n); i++ {
					ins = append(ins, benchInstance(i, "bench.done", queue))
				}
				if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Node: "bench", Now: base}); err != nil {
					errs <- err
					return
				}
				left := len(ins)
				for left > 0 {
					now := base.Add(time.Second)
					res, err := s.Claim(ctx, &store.ClaimParams{Queue: queue, Owner: owner, Limit: left, Now: now, LeaseUntil: now.Add(time.Hour)})
					if err != nil {
						errs <- err
						return
					}
					if len(res.Instances) == 0 {
						errs <- fmt.Errorf("claim found nothing with %d to go", left)
						return
					}
					outs := make([]store.Outcome, len(res.Instances))
					for i, in := range res.Instances {
						outs[i] = store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed, Result: []byte(`[true]`)}
					}
					if _, err := s.Finish(ctx, &store.FinishParams{Owner: owner, Now: now.Add(time.Millisecond), Outcomes: outs}); err != nil {
						errs <- err
						return
					}
					left -= len(res.Instances)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatalf("fill: %v", err)
	}
}

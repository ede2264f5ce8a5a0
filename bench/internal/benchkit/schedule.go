package benchkit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Batcher is a Queue that can store many jobs in one call of the system's
// batch API (jobkit's Manager.ScheduleJobs, River's InsertMany). asynq has
// none.
type Batcher interface {
	// InsertBatch stores one ready job per stamp in one call.
	InsertBatch(ctx context.Context, stamps []int64) error
}

// ScheduleRate calls q.Insert n times (ready jobs, no worker running)
// from goroutines goroutines and times each call. Figures: "calls/s"
// (all n calls over the wall time), "p50 µs" and "p99 µs" (one call's
// latency).
func ScheduleRate(ctx context.Context, sys System, n, goroutines int, limit time.Duration) (Sample, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	// A few calls first, so connections and script caches are warm.
	for i := range 20 {
		if err := q.Insert(ctx, int64(i), time.Time{}); err != nil {
			return nil, fmt.Errorf("insert: %w", err)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var next atomic.Int64
	var firstErr atomic.Value
	lat := make([][]float64, goroutines)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range goroutines {
		lat[g] = make([]float64, 0, n/goroutines+1)
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				if err := q.Insert(lctx, t0.UnixNano(), time.Time{}); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[g] = append(lat[g], float64(time.Since(t0).Nanoseconds())/1e3)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	var all []float64
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	s := Sample{"calls/s": float64(len(all)) / el.Seconds()}
	if len(all) > 0 {
		s["p50 µs"], s["p99 µs"] = Percentile(all, 0.50), Percentile(all, 0.99)
	}
	if e, _ := firstErr.Load().(error); e != nil {
		if lctx.Err() != nil && ctx.Err() == nil {
			return s, fmt.Errorf("%d of %d calls in %v: %w", len(all), n, limit, ErrCutShort)
		}
		return nil, fmt.Errorf("insert: %w", e)
	}
	return s, nil
}

// BatchRate stores n ready jobs in calls of per jobs each through the
// queue's Batcher, one call at a time. Figure: "jobs/s".
func BatchRate(ctx context.Context, sys System, n, per int, limit time.Duration) (Sample, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	bq, ok := q.(Batcher)
	if !ok {
		return nil, fmt.Errorf("%s has no batch API", sys.Name())
	}
	if err := bq.InsertBatch(ctx, []int64{1, 2, 3}); err != nil { // warm up
		return nil, err
	}
	stamps := make([]int64, per)
	start := time.Now()
	deadline := start.Add(limit)
	done := 0
	for done < n {
		k := min(per, n-done)
		now := time.Now()
		if now.After(deadline) {
			return Sample{"jobs/s": float64(done) / time.Since(start).Seconds()}, fmt.Errorf("%d of %d jobs in %v: %w", done, n, limit, ErrCutShort)
		}
		for i := range k {
			stamps[i] = now.UnixNano()
		}
		if err := bq.InsertBatch(ctx, stamps[:k]); err != nil {
			return nil, err
		}
		done += k
	}
	return Sample{"jobs/s": float64(n) / time.Since(start).Seconds()}, nil
}

package benchkit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// WithKindLimit returns a view of j whose queues open with a cluster-wide
// concurrency limit of max running on the bench kind (0: none). It shares
// j's clients: close j, not the view.
func (j *Jobkit) WithKindLimit(max int) *Jobkit {
	c := *j
	c.cfg.KindLimit = max
	if max > 0 {
		c.cfg.Name = fmt.Sprintf("%s, limit %d", j.cfg.Name, max)
	}
	return &c
}

// LimitAccuracy stores n ready jobs of 1 ms with a concurrency limit of max
// on their kind, then burns them down with managers managers of workers
// workers each on one store (several handles' worth of claimers racing
// for the same slots). Figures: "jobs/s"; "peak executors", the most
// executors running at once (counted from an executor's start, after its
// claim counted it, to its return, before its outcome released the
// slot: never more than the store counted); "peak sampled", the most
// Processing instances of the kind that store counts read every 5 ms
// showed (Inspector.Counts).
func LimitAccuracy(ctx context.Context, sys *Jobkit, n, managers, workers, max int, limit time.Duration) (Sample, error) {
	q0, _, err := openFilled(ctx, sys.WithKindLimit(max), n, limit)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q0)
	q := q0.(*jobkitQueue)
	var running, peak, done atomic.Int64
	all := make(chan struct{})
	q.hooks.Store(&Hooks{
		Started: func(int64) {
			r := running.Add(1)
			for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
			}
		},
		Hold: func(context.Context) {
			time.Sleep(time.Millisecond) // the work: long enough for executors to overlap
			running.Add(-1)
		},
		Completed: func(int64) {
			if done.Add(1) == int64(n) {
				close(all)
			}
		},
	})
	var sampled atomic.Int64
	stopSampling := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
			cs, err := q.s.Counts(ctx, &store.CountsParams{Kind: benchKind})
			if err != nil {
				continue
			}
			var r int64
			for _, c := range cs {
				r += c.States[store.Processing]
			}
			if r > sampled.Load() {
				sampled.Store(r)
			}
		}
	})
	var ms []*job.Manager
	defer func() {
		close(stopSampling)
		wg.Wait()
		for _, m := range ms {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = m.Stop(sctx)
			cancel()
		}
	}()
	start := time.Now()
	for range managers {
		m, err := q.manager(workers)
		if err != nil {
			return nil, err
		}
		if err := m.Start(ctx); err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-all:
	case <-timer.C:
		return Sample{"jobs/s": float64(done.Load()) / limit.Seconds(), "peak executors": float64(peak.Load()), "peak sampled": float64(sampled.Load())},
			fmt.Errorf("limit accuracy of %d: %d done in %v: %w", n, done.Load(), limit, ErrCutShort)
	}
	return Sample{"jobs/s": float64(n) / time.Since(start).Seconds(), "peak executors": float64(peak.Load()), "peak sampled": float64(sampled.Load())}, nil
}

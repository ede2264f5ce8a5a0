package benchkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

func stopQueue(q Queue) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = q.Stop(ctx)
	_ = q.Close(ctx)
}

// openFilled opens a queue and fills it with n ready jobs (batched where
// the system can), returning the fill rate in jobs/s. The caller stops the
// queue.
func openFilled(ctx context.Context, sys System, n int, limit time.Duration) (Queue, float64, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, 0, err
	}
	t0 := time.Now()
	if err := fillWithin(ctx, q, n, time.Now(), limit); err != nil {
		stopQueue(q)
		return nil, 0, err
	}
	return q, float64(n) / time.Since(t0).Seconds(), nil
}

// Burndown stores n ready no-op jobs (not timed), then starts workers and
// times them until every job's completion is recorded. Figures: "jobs/s"
// (the burn-down) and "fill jobs/s" (the untimed store step, for the
// record).
func Burndown(ctx context.Context, sys System, n, workers int, limit time.Duration) (Sample, error) {
	q, fill, err := openFilled(ctx, sys, n, limit)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	var done atomic.Int64
	all := make(chan struct{})
	start := time.Now()
	if err := q.Run(ctx, workers, Hooks{Completed: func(int64) {
		if done.Add(1) == int64(n) {
			close(all)
		}
	}}); err != nil {
		return nil, err
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-all:
	case <-timer.C:
		d := done.Load()
		return Sample{"jobs/s": float64(d) / limit.Seconds(), "fill jobs/s": fill},
			fmt.Errorf("burn-down of %d: %d done in %v: %w", n, d, limit, ErrCutShort)
	}
	if dr, ok := q.(Drainer); ok {
		dctx, cancel := context.WithDeadline(ctx, start.Add(limit))
		err := dr.Drained(dctx)
		cancel()
		if err != nil {
			return Sample{"jobs/s": float64(n) / time.Since(start).Seconds(), "fill jobs/s": fill},
				fmt.Errorf("burn-down of %d: not drained in %v (%v): %w", n, limit, err, ErrCutShort)
		}
	}
	return Sample{"jobs/s": float64(n) / time.Since(start).Seconds(), "fill jobs/s": fill}, nil
}

// latencies collects start - stamp of every started job.
type latencies struct {
	mu  sync.Mutex
	ns  []int64
	got chan struct{}
}

func newLatencies(n int) *latencies {
	return &latencies{ns: make([]int64, 0, n), got: make(chan struct{}, 1)}
}

// started records the latency of a job inserted at stamp (Unix ns).
func (l *latencies) started(stamp int64) { l.add(time.Now().UnixNano() - stamp) }

func (l *latencies) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ns)
}

func (l *latencies) sorted() []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return millis(l.ns)
}

// waitCount waits until l holds n values or the deadline passes.
func (l *latencies) waitCount(n int, deadline time.Time) bool {
	for l.count() < n {
		d := time.Until(deadline)
		if d <= 0 {
			return false
		}
		select {
		case <-l.got:
		case <-time.After(min(d, 50*time.Millisecond)):
		}
	}
	return true
}

// Steady inserts jobs one by one at rate per second for d from 4
// producers while workers run them, and returns the pick-up latency (start
// − insert call) p50/p99/p999 in ms and the rate achieved. limit bounds
// the whole run, draining included.
func Steady(ctx context.Context, sys System, rate int, d time.Duration, workers int, limit time.Duration) (Sample, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	n := int(float64(rate) * d.Seconds())
	lat := newLatencies(n)
	if err := q.Run(ctx, workers, Hooks{Started: lat.started}); err != nil {
		return nil, err
	}
	end := time.Now().Add(limit)
	t0 := time.Now()
	var next atomic.Int64
	var inserted atomic.Int64
	var wg sync.WaitGroup
	var insertErr atomic.Value
	for range 4 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || time.Now().After(end) {
					return
				}
				if w := time.Until(t0.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))); w > 0 {
					time.Sleep(w)
				}
				if err := q.Insert(ctx, time.Now().UnixNano(), time.Time{}); err != nil {
					insertErr.Store(err)
					return
				}
				inserted.Add(1)
			}
		})
	}
	wg.Wait()
	sent := time.Since(t0)
	if e, _ := insertErr.Load().(error); e != nil {
		return nil, fmt.Errorf("insert: %w", e)
	}
	ok := lat.waitCount(int(inserted.Load()), end)
	v := lat.sorted()
	s := Sample{"p50 ms": Percentile(v, .5), "p99 ms": Percentile(v, .99), "p999 ms": Percentile(v, .999),
		"rate/s": float64(inserted.Load()) / sent.Seconds()}
	if !ok || inserted.Load() < int64(n) {
		return s, fmt.Errorf("steady load: %d of %d inserted, %d started within %v: %w", inserted.Load(), n, len(v), limit, ErrCutShort)
	}
	return s, nil
}

// Rest runs workers for d with no jobs at all: what an idle system costs
// its store (bench/pgcost.sh PGCOST_ONLY=rest reads the store's counters
// around it). It returns the time it rested in seconds.
func Rest(ctx context.Context, sys System, workers int, d time.Duration) (Sample, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	if err := q.Run(ctx, workers, Hooks{}); err != nil {
		return nil, err
	}
	t0 := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return Sample{"s": time.Since(t0).Seconds()}, nil
}

// Idle inserts n jobs one at a time on idle workers, waiting for each to
// start and then 1–5 ms, and returns the insert→start latency p50/p99 in
// ms.
func Idle(ctx context.Context, sys System, n int, limit time.Duration) (Sample, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	lat := newLatencies(n)
	if err := q.Run(ctx, 8, Hooks{Started: lat.started}); err != nil {
		return nil, err
	}
	end := time.Now().Add(limit)
	cut, err := trickle(ctx, q, n, func(i int) (bool, error) { return lat.waitCount(i, end), nil })
	if err != nil {
		return nil, err
	}
	return lat.sample("idle latency", n, limit, cut)
}

// trickle inserts n jobs due now one at a time, 1–5 ms apart, calling
// started(i) after the i-th to wait until it has started; started
// returning false (out of time) stops it early with cut set.
func trickle(ctx context.Context, q Queue, n int, started func(i int) (bool, error)) (cut bool, err error) {
	for i := range n {
		if err := q.Insert(ctx, time.Now().UnixNano(), time.Time{}); err != nil {
			return false, fmt.Errorf("insert: %w", err)
		}
		ok, err := started(i + 1)
		if err != nil {
			return false, err
		}
		if !ok {
			return true, nil
		}
		time.Sleep(time.Millisecond + rand.N(4*time.Millisecond))
	}
	return false, nil
}

// sample returns the p50 and p99 of the latencies recorded, and
// ErrCutShort when the run that recorded them (what) was cut short.
func (l *latencies) sample(what string, n int, limit time.Duration, cut bool) (Sample, error) {
	v := l.sorted()
	s := Sample{"p50 ms": Percentile(v, .5), "p99 ms": Percentile(v, .99)}
	if cut {
		return s, fmt.Errorf("%s: %d of %d jobs in %v: %w", what, len(v), n, limit, ErrCutShort)
	}
	return s, nil
}

// Scheduled inserts n jobs due lead from now and spread evenly over
// spread (each at least minAhead after its insert call), with workers running, and returns start − due p50/p99 in ms
// (negative: early), the p99 of |start − due| and the share of jobs that
// started early.
func Scheduled(ctx context.Context, sys System, n int, lead, spread time.Duration, limit time.Duration) (Sample, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	lat := newLatencies(n)
	if err := q.Run(ctx, 8, Hooks{Started: lat.started}); err != nil {
		return nil, err
	}
	end := time.Now().Add(limit)
	t0 := time.Now().Add(lead)
	for i := range n {
		due := t0.Add(time.Duration(int64(spread) * int64(i) / int64(n)))
		// A slow store must not make a job late before it is stored: each
		// job is due at least minAhead after its insert call.
		due = later(due, time.Now().Add(minAhead))
		if err := q.Insert(ctx, due.UnixNano(), due); err != nil {
			return nil, fmt.Errorf("insert: %w", err)
		}
	}
	ok := lat.waitCount(n, end)
	v := lat.sorted()
	early := 0
	abs := make([]float64, len(v))
	for i, x := range v {
		if x < 0 {
			early++
		}
		abs[i] = max(x, -x)
	}
	slices.Sort(abs)
	s := Sample{"p50 ms": Percentile(v, .5), "p99 ms": Percentile(v, .99), "abs p99 ms": Percentile(abs, .99),
		"early %": 100 * float64(early) / float64(max(len(v), 1))}
	if !ok {
		return s, fmt.Errorf("scheduled accuracy: %d of %d started within %v: %w", len(v), n, limit, ErrCutShort)
	}
	return s, nil
}

// minAhead is the least time between a job's insert call and its due
// time in Scheduled.
const minAhead = 200 * time.Millisecond

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// MemoryPerPending stores n ready jobs with no worker running and returns
// the growth per job of this process's heap ("heap B/job") and of the
// server's memory ("server B/job"), when sys is a MemoryMeter.
func MemoryPerPending(ctx context.Context, sys System, n int, limit time.Duration) (Sample, error) {
	mm, ok := sys.(MemoryMeter)
	if !ok {
		return nil, fmt.Errorf("%s cannot report memory", sys.Name())
	}
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	before, err := mm.Memory(ctx)
	if err != nil {
		return nil, err
	}
	if err := fillWithin(ctx, q, n, time.Now(), limit); err != nil {
		return nil, err
	}
	after, err := mm.Memory(ctx)
	if err != nil {
		return nil, err
	}
	// Growth below zero is collector noise: report none.
	heap := max(0, float64(after.Heap-before.Heap)/float64(n))
	s := Sample{"heap B/job": heap, "total B/job": heap}
	if mm.ServerMemoryName() != "" {
		srv := max(0, float64(after.Server-before.Server)/float64(n))
		s["server B/job"] = srv
		s["total B/job"] = heap + srv
	}
	return s, nil
}

// DepthCost fills one queue to each depth in turn (ascending) and times
// one worker through k jobs at that depth, from the first job's start to
// the k-th completion, so the worker's start-up is left out. Figures: "µs/job @DEPTH".
// Refilling between depths is not timed.
func DepthCost(ctx context.Context, sys System, depths []int, k int, limit time.Duration) (Sample, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	ds := slices.Clone(depths)
	slices.Sort(ds)
	s := Sample{}
	end := time.Now().Add(limit)
	have := 0
	for _, depth := range ds {
		if depth > have {
			if err := fillWithin(ctx, q, depth-have, time.Now(), time.Until(end)); err != nil {
				return s, fmt.Errorf("depth %d: %w", depth, err)
			}
			have = depth
		}
		want := min(k, depth)
		var done atomic.Int64
		var first, last atomic.Int64
		all := make(chan struct{})
		if err := q.Run(ctx, 1, Hooks{
			Started: func(int64) { first.CompareAndSwap(0, time.Now().UnixNano()) },
			Completed: func(int64) {
				if done.Add(1) == int64(want) {
					last.Store(time.Now().UnixNano())
					close(all)
				}
			}}); err != nil {
			return s, err
		}
		var cut bool
		select {
		case <-all:
		case <-time.After(time.Until(end)):
			cut = true
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = q.Stop(sctx)
		cancel()
		have -= int(done.Load())
		if cut {
			return s, fmt.Errorf("depth cost: at depth %d only %d of %d jobs in the %v limit: %w", depth, done.Load(), want, limit, ErrCutShort)
		}
		s[fmt.Sprintf("µs/job @%d", depth)] = float64(last.Load()-first.Load()) / 1e3 / float64(want)
	}
	return s, nil
}

// ScheduleAndRun inserts n jobs one by one from producers goroutines while
// workers run them, and returns jobs per second from the first insert to
// the last completion.
func ScheduleAndRun(ctx context.Context, sys System, n, producers, workers int, limit time.Duration) (Sample, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	var done atomic.Int64
	all := make(chan struct{})
	if err := q.Run(ctx, workers, Hooks{Completed: func(int64) {
		if done.Add(1) == int64(n) {
			close(all)
		}
	}}); err != nil {
		return nil, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	var insertErr atomic.Value
	for p := range producers {
		wg.Go(func() {
			for i := p; i < n; i += producers {
				if err := q.Insert(ctx, time.Now().UnixNano(), time.Time{}); err != nil {
					insertErr.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if e, _ := insertErr.Load().(error); e != nil {
		return nil, fmt.Errorf("insert: %w", e)
	}
	select {
	case <-all:
	case <-time.After(time.Until(start.Add(limit))):
		d := done.Load()
		return Sample{"jobs/s": float64(d) / limit.Seconds()}, fmt.Errorf("schedule and run: %d of %d done in %v: %w", d, n, limit, ErrCutShort)
	}
	return Sample{"jobs/s": float64(n) / time.Since(start).Seconds()}, nil
}

// fillWithin runs q.Fill bounded by limit; running out of time is
// ErrCutShort.
func fillWithin(ctx context.Context, q Queue, n int, due time.Time, limit time.Duration) error {
	fctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t0 := time.Now()
	err := q.Fill(fctx, n, due)
	switch {
	case err == nil:
		return nil
	case fctx.Err() != nil && ctx.Err() == nil:
		return fmt.Errorf("storing %d jobs took longer than %v (%v): %w", n, limit, time.Since(t0).Round(time.Millisecond), ErrCutShort)
	}
	return fmt.Errorf("fill: %w", err)
}

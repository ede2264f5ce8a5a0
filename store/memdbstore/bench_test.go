package memdbstore_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/store/storetest"
)

var benchBase = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// benchInstance is a typical instance: a UUID-sized ID, a short kind and
// queue, a small JSON argument list.
func benchInstance(i int, queue string) *store.Instance {
	return &store.Instance{
		ID:         fmt.Sprintf("%08x-0000-4000-8000-%012x", i*2654435761&0xffffffff, i),
		Kind:       "email.send",
		Queue:      queue,
		Args:       []byte(`["user@example.com","welcome",42]`),
		Priority:   i % 3,
		RunAt:      benchBase,
		MaxRetries: 3,
		Timeout:    time.Minute,
		CreatedAt:  benchBase,
	}
}

// fill enqueues n instances into queue in batches of 1000, starting at ID
// number from.
func fill(tb testing.TB, s *memdbstore.Store, queue string, from, n int, mod func(*store.Instance)) {
	tb.Helper()
	ctx := context.Background()
	batch := make([]*store.Instance, 0, 1000)
	for i := from; i < from+n; i++ {
		in := benchInstance(i, queue)
		if mod != nil {
			mod(in)
		}
		batch = append(batch, in)
		if len(batch) == cap(batch) || i == from+n-1 {
			if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: batch, Node: "bench", Now: benchBase}); err != nil {
				tb.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

var (
	deepMu     sync.Mutex
	deepStores = map[int]*memdbstore.Store{}
)

// deepStore returns a store whose queue "deep" holds depth ready instances
// over three priority levels, under 1000 future instances of a higher
// priority that every claim must jump past. Built once per depth.
func deepStore(b *testing.B, depth int) *memdbstore.Store {
	deepMu.Lock()
	defer deepMu.Unlock()
	if s := deepStores[depth]; s != nil {
		return s
	}
	s := newStore(b)
	fill(b, s, "deep", 0, depth, nil)
	fill(b, s, "deep", depth, 1000, func(in *store.Instance) {
		in.Priority, in.RunAt = 10, benchBase.Add(time.Hour)
	})
	deepStores[depth] = s
	return s
}

// BenchmarkClaim claims one instance at the given queue depth and hands it
// back (Finish with Release), so the depth stays put. claim-ns/op is the
// Claim call alone.
func BenchmarkClaim(b *testing.B) {
	for _, depth := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			s := deepStore(b, depth)
			ctx := context.Background()
			now := benchBase.Add(time.Minute)
			var claimTime time.Duration
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				t0 := time.Now()
				res, err := s.Claim(ctx, &store.ClaimParams{Queue: "deep", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)})
				claimTime += time.Since(t0)
				if err != nil || len(res.Instances) != 1 {
					b.Fatalf("claim: %v, %d instances", err, len(res.Instances))
				}
				in := res.Instances[0]
				errs, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: now, Outcomes: []store.Outcome{{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: in.RunAt, Release: true}}})
				if err != nil || errs[0].Err != nil {
					b.Fatalf("release: %v %v", err, errs)
				}
			}
			b.ReportMetric(float64(claimTime.Nanoseconds())/float64(b.N), "claim-ns/op")
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkEnqueueBatch enqueues in batches of 64; one op is one instance.
func BenchmarkEnqueueBatch(b *testing.B) {
	s := newStore(b)
	ctx := context.Background()
	batch := make([]*store.Instance, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i += len(batch) {
		for j := range batch {
			batch[j] = benchInstance(i+j, "q")
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: batch, Node: "bench", Now: benchBase}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCycle is the engine's path for one job, amortised over batches:
// enqueue, claim, finish as Completed (4 history records per job), one
// write under the store's lock each. One op is one job; batch=64 is what the engine
// uses.
func BenchmarkCycle(b *testing.B) {
	for _, n := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) { benchCycle(b, n) })
	}
}

func benchCycle(b *testing.B, n int) {
	s := newStore(b)
	ctx := context.Background()
	batch := make([]*store.Instance, n)
	outs := make([]store.Outcome, 0, n)
	result := []byte(`[true]`)
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i += n {
		now := benchBase.Add(time.Duration(i) * time.Microsecond)
		for j := range batch {
			batch[j] = benchInstance(i+j, "q")
			batch[j].RunAt, batch[j].CreatedAt = now, now
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: batch, Node: "bench", Now: now}); err != nil {
			b.Fatal(err)
		}
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: n, Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || len(res.Instances) != n {
			b.Fatalf("claim: %v, %d instances", err, len(res.Instances))
		}
		outs = outs[:0]
		for _, in := range res.Instances {
			outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed, Result: result})
		}
		if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: now, Outcomes: outs}); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "jobs/cpu-s")
}

// BenchmarkHeapPending measures the heap that 100k pending instances (with
// their Created and Scheduled history records) take, after GC.
func BenchmarkHeapPending(b *testing.B) {
	const n = 100_000
	for range b.N {
		before := heapAlloc()
		s := newStore(b)
		fill(b, s, "q", 0, n, nil)
		after := heapAlloc()
		b.ReportMetric(float64(after-before)/n, "B/pending")
		b.ReportMetric(float64(after-before)/(1<<20), "MB/100k")
		runtime.KeepAlive(s)
	}
}

// cpuTime returns the CPU time the process has used (all threads, GC
// included), so a figure survives a busy machine better than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkLookupByState looks up instances by state in a store that holds
// 100k completed instances besides 20 scheduled and 20 processing ones:
// a lookup of what waits or runs, or a limited one, should cost what it
// returns, not what the store holds. kind_limit10 names no state.
func BenchmarkLookupByState(b *testing.B) {
	s := newStore(b)
	ctx := context.Background()
	const done = 100_000
	fill(b, s, "q", 0, done, nil)
	for {
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1000, Now: benchBase, LeaseUntil: benchBase.Add(time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Instances) == 0 {
			break
		}
		outs := make([]store.Outcome, len(res.Instances))
		for i, in := range res.Instances {
			outs[i] = store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed}
		}
		if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: benchBase, Outcomes: outs}); err != nil {
			b.Fatal(err)
		}
	}
	fill(b, s, "q", done, 40, nil)
	if res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 20, Now: benchBase, LeaseUntil: benchBase.Add(time.Hour)}); err != nil || len(res.Instances) != 20 {
		b.Fatalf("claim: %v, %d instances", err, len(res.Instances))
	}
	for _, tc := range []struct {
		name string
		q    store.Query
		want int
	}{
		{"processing", store.Query{States: []store.State{store.Processing}}, 20},
		{"scheduled", store.Query{States: []store.State{store.Scheduled}}, 20},
		{"scheduled+processing", store.Query{States: []store.State{store.Scheduled, store.Processing}}, 40},
		{"completed_limit10", store.Query{States: []store.State{store.Completed}, Limit: 10}, 10},
		{"kind_limit10", store.Query{Kind: "email.send", Limit: 10}, 10},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				got, err := s.LookupInstances(ctx, &tc.q)
				if err != nil || len(got) != tc.want {
					b.Fatalf("lookup: %v, %d instances, want %d", err, len(got), tc.want)
				}
			}
		})
	}
}

// newStore returns a new store, failing tb if New does.
func newStore(tb testing.TB, opts ...memdbstore.Option) *memdbstore.Store {
	tb.Helper()
	s, err := memdbstore.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// BenchmarkInspect measures counts, lag and first pages with a million
// completed instances and 10k ready (storetest.BenchInspect). The scale
// is JOBKIT_BENCH_COMPLETED (default 1000000).
//
//	go test -run '^$' -bench Inspect ./store/memdbstore/
func BenchmarkInspect(b *testing.B) {
	s, err := memdbstore.New()
	if err != nil {
		b.Fatal(err)
	}
	storetest.BenchInspect(b, s, benchCompleted(b), 10000)
}

func benchCompleted(b *testing.B) int {
	n := 1000000
	if v := os.Getenv("JOBKIT_BENCH_COMPLETED"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("JOBKIT_BENCH_COMPLETED=%q: %v", v, err)
		}
	}
	return n
}

// BenchmarkClaimLabels: claim cost with label requirements of before
// ("plain") and with expressions ("expr"), against none
// (storetest.BenchmarkClaimLabels; doc/benchmarks-appendix.md, "Issue 21"):
//
//	go test -run '^$' -bench ClaimLabels -benchtime 20000x -count 3 ./store/memdbstore/
func BenchmarkClaimLabels(b *testing.B) {
	storetest.BenchmarkClaimLabels(b, func(b *testing.B) store.Store { return newStore(b) }, 100_000)
}

package pgstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// BenchmarkClaimFinish measures one claimer's claim-and-finish cycle of
// 64 instances from a queue of b.N (at least 6400) filled first, so
// the cost per instance of the engine's two hot statements shows apart
// from any scheduling of goroutines.
//
//	JOBKIT_PG_URL=... go test -run '^$' -bench ClaimFinish -benchtime 20000x ./store/pgstore/
func BenchmarkClaimFinish(b *testing.B) {
	s := open(b, "bench-"+randHex(4))
	now := time.Now().UTC().Truncate(time.Millisecond)
	n := max(b.N, 6400)
	for i := 0; i < n; i += 1000 {
		var ins []*store.Instance
		for j := i; j < min(i+1000, n); j++ {
			ins = append(ins, &store.Instance{ID: fmt.Sprintf("b-%08d", j), Kind: "k", Queue: "q", Args: []byte(`[1]`),
				RunAt: now, CreatedAt: now, MaxRetries: 3})
		}
		if _, err := s.Enqueue(b.Context(), &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var claimT, finishT time.Duration
	for done := 0; done < b.N; {
		t0 := time.Now()
		res, err := s.Claim(b.Context(), &store.ClaimParams{Queue: "q", Owner: "w", Limit: 64, Now: now, LeaseUntil: now.Add(time.Minute), ClaimSeq: uint64(done + 1)})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		outs := make([]store.Outcome, len(res.Instances))
		for i, in := range res.Instances {
			outs[i] = store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed}
		}
		if _, err := s.Finish(b.Context(), &store.FinishParams{Owner: "w", Now: now, Outcomes: outs}); err != nil {
			b.Fatal(err)
		}
		claimT += t1.Sub(t0)
		finishT += time.Since(t1)
		done += len(res.Instances)
		if len(res.Instances) == 0 {
			b.Fatalf("queue empty after %d", done)
		}
	}
	b.ReportMetric(float64(claimT.Microseconds())/float64(b.N), "claim-µs/inst")
	b.ReportMetric(float64(finishT.Microseconds())/float64(b.N), "finish-µs/inst")
}

// BenchmarkEnqueue measures store.Enqueue throughput: one instance per
// call (8 callers at once) and batches of 1,000 per call, without and
// with unique keys.
//
//	JOBKIT_PG_URL=... go test -run '^$' -bench Enqueue -benchtime 20000x ./store/pgstore/
func BenchmarkEnqueue(b *testing.B) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	inst := func(ns string, i int) *store.Instance {
		return &store.Instance{ID: fmt.Sprintf("%s-%08d", ns, i), Kind: "k", Queue: "q", Args: []byte(`["user@example.com",42]`),
			RunAt: now, CreatedAt: now, MaxRetries: 3}
	}
	b.Run("single", func(b *testing.B) {
		s := open(b, "enq1-"+randHex(4))
		var next atomic.Int64
		b.SetParallelism(4) // 4 × GOMAXPROCS callers
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := int(next.Add(1))
				if _, err := s.Enqueue(b.Context(), &store.EnqueueParams{Instances: []*store.Instance{inst("s", i)}, Now: now}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	})
	b.Run("batch1000", func(b *testing.B) {
		s := open(b, "enqb-"+randHex(4))
		b.ResetTimer()
		for i := 0; i < b.N; i += 1000 {
			var ins []*store.Instance
			for j := i; j < min(i+1000, b.N); j++ {
				ins = append(ins, inst("b", j))
			}
			if _, err := s.Enqueue(b.Context(), &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	})
	// Batches of 1,000 whose instances each take a unique key of their
	// own (the path that upserts unique_keys).
	b.Run("batch1000unique", func(b *testing.B) {
		s := open(b, "enqu-"+randHex(4))
		b.ResetTimer()
		for i := 0; i < b.N; i += 1000 {
			var ins []*store.Instance
			for j := i; j < min(i+1000, b.N); j++ {
				in := inst("u", j)
				in.UniqueKey, in.UniqueUntil = fmt.Sprintf("key-%08d", j), now.Add(time.Hour)
				ins = append(ins, in)
			}
			res, err := s.Enqueue(b.Context(), &store.EnqueueParams{Instances: ins, Now: now})
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil || r.Existed {
					b.Fatalf("enqueue of %s: %+v", r.ID, r)
				}
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	})
}

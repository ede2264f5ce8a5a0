package etcdstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
)

var benchWindow = 32

var benchBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func benchInst(i int, queue string) *store.Instance {
	return &store.Instance{
		ID: fmt.Sprintf("b-%08d", i), Kind: "bench", Queue: queue, Args: []byte(`[1,2]`),
		Priority: i % 3, RunAt: benchBase, MaxRetries: 3, CreatedAt: benchBase,
	}
}

// fill enqueues n instances into queue in batches of 100.
func fill(b *testing.B, s *etcdstore.Store, queue string, from, n int) {
	b.Helper()
	ctx := context.Background()
	for i := from; i < from+n; i += 100 {
		var ins []*store.Instance
		for j := i; j < min(i+100, from+n); j++ {
			ins = append(ins, benchInst(j, queue))
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: benchBase, Node: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimDepth claims one instance at a time from queues holding
// 1k, 10k and 100k ready instances: the cost must stay flat. The queue is
// filled once per depth and topped up, untimed, so it never drops below
// the depth.
func BenchmarkClaimDepth(b *testing.B) {
	for _, depth := range []int{1000, 10000, 100000} {
		ns := namespace(b) + "-" + fmt.Sprint(depth)
		cleanup(b, ns)
		s := open(b, ns)
		fill(b, s, "q", 0, depth)
		next, left := depth, depth
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			ctx := context.Background()
			now := benchBase.Add(time.Hour)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if left < depth-500 {
					b.StopTimer()
					fill(b, s, "q", next, 500)
					next += 500
					left += 500
					b.StartTimer()
				}
				left--
				res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)})
				if err != nil || len(res.Instances) != 1 {
					b.Fatalf("claim: %v, %d instances", err, len(res.Instances))
				}
			}
		})
	}
}

// BenchmarkEnqueueBatch enqueues batches of 1, 10 and 100 instances; the
// ns/op is per instance.
func BenchmarkEnqueueBatch(b *testing.B) {
	for _, size := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			ns := namespace(b)
			cleanup(b, ns)
			s := open(b, ns)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i += size {
				var ins []*store.Instance
				for j := i; j < i+size; j++ {
					ins = append(ins, benchInst(j, "q"))
				}
				if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: benchBase, Node: "bench"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaimFinish runs the claim+finish cycle with a claim limit of 1,
// 10 and 50 (so 1, 10 or 50 instances share each transaction), by 1 and 8
// concurrent workers; ns/op is per instance.
func BenchmarkClaimFinish(b *testing.B) {
	for _, workers := range []int{1, 8} {
		for _, limit := range []int{1, 10, 50} {
			b.Run(fmt.Sprintf("workers=%d/limit=%d", workers, limit), func(b *testing.B) {
				ns := namespace(b)
				cleanup(b, ns)
				s := open(b, ns, etcdstore.WithClaimWindow(benchWindow))
				fill(b, s, "q", 0, b.N+limit*workers)
				ctx := context.Background()
				now := benchBase.Add(time.Hour)
				var done atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for w := range workers {
					wg.Go(func() {
						owner := fmt.Sprintf("w%d", w)
						for done.Load() < int64(b.N) {
							res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: owner, Limit: limit, Now: now, LeaseUntil: now.Add(time.Minute)})
							if err != nil {
								b.Error(err)
								return
							}
							var outs []store.Outcome
							for _, in := range res.Instances {
								outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed, Result: []byte(`[3]`)})
							}
							if len(outs) == 0 {
								continue
							}
							if _, err := s.Finish(ctx, &store.FinishParams{Owner: owner, Now: now, Outcomes: outs}); err != nil {
								b.Error(err)
								return
							}
							done.Add(int64(len(outs)))
						}
					})
				}
				wg.Wait()
			})
		}
	}
}

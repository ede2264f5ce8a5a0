package memdbstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// BenchmarkBurnDownKeyed burns down 20,000 instances over 1,000 or 10 keys in
// claims of 64, each finished at once: without limits, with a limit of
// the kind, and with a limit of 1 per key. One op is one instance.
func BenchmarkBurnDownKeyed(b *testing.B) {
	const n = 20_000
	for _, keys := range []int{1_000, 10} {
		for _, c := range []struct {
			name string
			ls   []store.ConcurrencyLimit
		}{
			{"none", nil},
			{"kind=64", []store.ConcurrencyLimit{{Kind: "k", Max: 64}}},
			{"perkey=1", []store.ConcurrencyLimit{{Kind: "k", Max: 1, PerKey: true}}},
		} {
			b.Run(fmt.Sprintf("keys=%d/%s", keys, c.name), func(b *testing.B) {
				ctx := context.Background()
				now := benchBase.Add(time.Minute)
				var total time.Duration
				for range b.N {
					s := newStore(b)
					batch := make([]*store.Instance, 0, 1000)
					for i := range n {
						in := benchInstance(i, "q")
						in.Kind, in.LimitKey = "k", fmt.Sprintf("key-%d", i%keys)
						batch = append(batch, in)
						if len(batch) == cap(batch) {
							if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: batch, Node: "bench", Now: benchBase}); err != nil {
								b.Fatal(err)
							}
							batch = batch[:0]
						}
					}
					t0 := time.Now()
					for done := 0; done < n; {
						res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 64, Now: now, LeaseUntil: now.Add(time.Minute), Limits: c.ls})
						if err != nil || len(res.Instances) == 0 {
							b.Fatalf("claim after %d done: %v, %d instances", done, err, len(res.Instances))
						}
						outs := make([]store.Outcome, len(res.Instances))
						for i, in := range res.Instances {
							outs[i] = store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed}
						}
						if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: now, Outcomes: outs}); err != nil {
							b.Fatal(err)
						}
						done += len(res.Instances)
					}
					total += time.Since(t0)
				}
				b.ReportMetric(float64(n*b.N)/total.Seconds(), "jobs/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

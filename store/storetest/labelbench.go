package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// labelBenchLanes are the label requirements of BenchmarkClaimLabels'
// instances, by case: eight lanes each, the first four satisfied by the
// claimer's labels (region=eu, zone=a), the last four not.
var labelBenchLanes = []struct {
	name  string
	lanes [][]string
}{
	{"none", [][]string{nil}},
	{"plain", [][]string{
		{"region=eu"}, {"zone=a"}, {"region=eu", "zone=a"}, nil,
		{"region=us"}, {"gpu=t4"}, {"zone=b"}, {"region=ap", "zone=a"},
	}},
	{"expr", [][]string{
		{"region=eu|us"}, {"!gpu"}, {"region!=ap", "zone in (a,b)"}, {"region"},
		{"region=ap|us"}, {"gpu"}, {"region notin (eu)"}, {"!zone"},
	}},
}

// BenchmarkClaimLabels measures one Claim (limit 1) by a claimer labelled
// region=eu and zone=a from a queue of depth ready instances spread
// round-robin over the lanes of a case, and hands what it took back
// (Finish with Release) so the depth stays put: "none" (no requirements,
// one lane), "plain" (the equality and bare-key forms of before), "expr"
// (set membership, not-equal, exists, not exists). Half the lanes of
// "plain" and "expr" are the claimer's. claim-µs/op is the Claim call
// alone. open returns a store on a fresh namespace.
//
//	func BenchmarkClaimLabels(b *testing.B) { storetest.BenchmarkClaimLabels(b, open, 100_000) }
func BenchmarkClaimLabels(b *testing.B, open func(b *testing.B) store.Store, depth int) {
	mine := []string{"region=eu", "zone=a"}
	for _, c := range labelBenchLanes {
		b.Run(fmt.Sprintf("reqs=%s/depth=%d", c.name, depth), func(b *testing.B) {
			s := open(b)
			ctx := context.Background()
			for start := 0; start < depth; start += 1000 {
				batch := make([]*store.Instance, 0, 1000)
				for i := start; i < min(start+1000, depth); i++ {
					in := inst(fmt.Sprintf("lb-%08d", i), "bench")
					in.Labels = c.lanes[i%len(c.lanes)]
					batch = append(batch, in)
				}
				if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: batch, Node: "bench", Now: base}); err != nil {
					b.Fatalf("Enqueue: %v", err)
				}
			}
			now := at(time.Minute)
			var claimTime time.Duration
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				res, err := s.Claim(ctx, &store.ClaimParams{Queue: "bench", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Labels: mine})
				claimTime += time.Since(t0)
				if err != nil || len(res.Instances) != 1 {
					b.Fatalf("Claim: %v, %d instances", err, len(res.Instances))
				}
				in := res.Instances[0]
				if !store.LabelsSatisfy(in.Labels, mine) {
					b.Fatalf("claimed %s requiring %q with labels %q", in.ID, in.Labels, mine)
				}
				fr, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: now, Outcomes: []store.Outcome{{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: in.RunAt, Release: true}}})
				if err != nil || fr[0].Err != nil {
					b.Fatalf("Finish (release): %v %v", err, fr)
				}
			}
			b.ReportMetric(float64(claimTime.Nanoseconds())/1e3/float64(b.N), "claim-µs/op")
		})
	}
}

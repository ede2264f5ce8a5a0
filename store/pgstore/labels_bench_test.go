package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// BenchmarkClaimLabelsSkip measures what pgstore's claim pays per row it
// must skip for labels: 2,000 instances the claimer (labels region=eu,
// zone=a) may not take wait ahead of 1,000 it may (a higher priority), so
// each claim (limit 1, released after) walks past all 2,000 in the claim
// index, filtering each. "plain" rows require region=us (a form of
// before), "expr" rows region=ap|us or !zone (expressions). It uses only
// the API of before requirement expressions, so it runs on older code too
// (doc/benchmarks-appendix.md, "Issue 21"):
//
//	JOBKIT_PG_URL=... go test -run '^$' -bench ClaimLabelsSkip -benchtime 300x ./store/pgstore/
func BenchmarkClaimLabelsSkip(b *testing.B) {
	for _, c := range []struct {
		name  string
		ahead [][]string
	}{
		{"plain", [][]string{{"region=us"}}},
		{"expr", [][]string{{"region=ap|us"}, {"!zone"}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := open(b, "lbench-"+randHex(4))
			now := time.Now().UTC().Truncate(time.Millisecond)
			var ins []*store.Instance
			for i := range 3000 {
				in := &store.Instance{ID: fmt.Sprintf("ls-%06d", i), Kind: "k", Queue: "q", Args: []byte(`[1]`), RunAt: now, CreatedAt: now, MaxRetries: 3}
				if i < 2000 {
					in.Priority, in.Labels = 1, c.ahead[i%len(c.ahead)]
				} else {
					in.Labels = []string{"region=eu"}
				}
				ins = append(ins, in)
			}
			for i := 0; i < len(ins); i += 1000 {
				if _, err := s.Enqueue(b.Context(), &store.EnqueueParams{Instances: ins[i : i+1000], Now: now}); err != nil {
					b.Fatal(err)
				}
			}
			mine := []string{"region=eu", "zone=a"}
			var claimT time.Duration
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				res, err := s.Claim(b.Context(), &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Labels: mine})
				claimT += time.Since(t0)
				if err != nil || len(res.Instances) != 1 || res.Instances[0].Priority != 0 {
					b.Fatalf("Claim: %v, %d instances", err, len(res.Instances))
				}
				in := res.Instances[0]
				if _, err := s.Finish(b.Context(), &store.FinishParams{Owner: "w", Now: now, Outcomes: []store.Outcome{{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: in.RunAt, Release: true}}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(claimT.Microseconds())/float64(b.N), "claim-µs/op")
		})
	}
}

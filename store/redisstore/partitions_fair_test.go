package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/redisstore"
)

// TestPartitionedClaimFairness measures claim fairness when one partition
// holds 90 % of the backlog: 8 partitions, 10,000 ready instances (9,000
// in partition 0, the rest spread over the other seven), 100 more
// arriving each step (90 in partition 0), and four claims of 30 each step
// (120 a step: 20 % over the arrivals). Time is the test's own: each step
// is one second of Now. A job's wait is the time from its RunAt to its
// claim. Every partition is served while it has work (the small ones
// drain, then the big one takes the claims' leftovers): no partition's
// mean wait may exceed twice the mean wait of all jobs, and each small
// partition's oldest job must be claimed within the first rotation.
func TestPartitionedClaimFairness(t *testing.T) {
	const parts = 8
	c := client(t)
	ctx := t.Context()
	// Place by the "p" metadata value, chosen per partition below.
	key := redisstore.WithPartitionKey(func(in *store.Instance) string { return in.Metadata["p"] })
	s := newPartitioned(t, c, fmt.Sprintf("fair-%d", time.Now().UnixNano()), parts, key)
	keyOf := make([]string, parts) // a key value that places into each partition
	for i, found := 0, 0; found < parts; i++ {
		k := fmt.Sprint("k", i)
		if p := s.Place(&store.Instance{Metadata: map[string]string{"p": k}}); keyOf[p] == "" {
			keyOf[p] = k
			found++
		}
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	enqueue := func(now time.Time, part, count int) {
		var ins []*store.Instance
		for range count {
			n++
			ins = append(ins, &store.Instance{ID: fmt.Sprintf("fair-%07d", n), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now, Metadata: map[string]string{"p": keyOf[part]}})
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Node: "n", Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	// The backlog: 9,000 in partition 0, 1,000 over the others.
	enqueue(t0, 0, 9000)
	for p := 1; p < parts; p++ {
		enqueue(t0, p, 1000/(parts-1))
	}
	type acc struct {
		n          int
		sum, worst time.Duration
		first      int // the claim that took the partition's first job
	}
	stats := make([]acc, parts)
	for p := range stats {
		stats[p].first = -1
	}
	claims := 0
	var all acc
	for step := 1; ; step++ {
		now := t0.Add(time.Duration(step) * time.Second)
		if step <= 100 {
			enqueue(now, 0, 90)
			for j := range 10 {
				enqueue(now, 1+(step*10+j)%(parts-1), 1)
			}
		}
		got := 0
		for range 4 {
			res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 30, Now: now, LeaseUntil: now.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range res.Instances {
				p := s.Place(in)
				w := now.Sub(in.RunAt)
				st := &stats[p]
				st.n++
				st.sum += w
				st.worst = max(st.worst, w)
				if st.first < 0 {
					st.first = claims
				}
				all.n++
				all.sum += w
			}
			got += len(res.Instances)
			claims++
		}
		if got == 0 && step > 100 {
			break
		}
		if step > 1000 {
			t.Fatal("the backlog did not drain in 1,000 steps")
		}
	}
	mean := all.sum / time.Duration(all.n)
	t.Logf("%d jobs claimed in %d claims; mean wait %v", all.n, claims, mean)
	for p, st := range stats {
		pm := st.sum / time.Duration(st.n)
		t.Logf("partition %d: %5d jobs, mean wait %6v (%.2f× the mean), worst %6v, first job at claim %d", p, st.n, pm, float64(pm)/float64(mean), st.worst, st.first)
		if pm > 2*mean {
			t.Errorf("partition %d waits %v on average, more than twice the mean %v", p, pm, mean)
		}
		if st.first < 0 || st.first >= parts {
			t.Errorf("partition %d's first job was claimed by claim %d; want one of the first %d (one rotation)", p, st.first, parts)
		}
	}
}

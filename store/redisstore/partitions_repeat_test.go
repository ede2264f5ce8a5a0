package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestPartitionedRepeatedEnqueue: an Enqueue repeated (the engine's retry
// after a lost reply, or the same call from another process) answers
// Existed and stores nothing twice. Instances without a key went to the
// call's rotating partition, so the repeat, one partition on, stored each
// ID a second time there: 9 instances for 5 IDs, two runs of one job.
func TestPartitionedRepeatedEnqueue(t *testing.T) {
	c := client(t)
	ns := fmt.Sprintf("repeat-%d", time.Now().UnixNano())
	now := time.Now()
	call := &store.EnqueueParams{Node: "n", Now: now}
	for i := range 4 {
		in := &store.Instance{ID: fmt.Sprintf("r-%d", i), Kind: "a", Queue: "q", RunAt: now, CreatedAt: now}
		if i == 3 {
			in.UniqueKey, in.UniqueUntil = "u-3", now.Add(time.Hour)
		}
		call.Instances = append(call.Instances, in)
	}
	lone := &store.EnqueueParams{Node: "n", Now: now, Instances: []*store.Instance{{ID: "lone", Kind: "a", Queue: "q", RunAt: now, CreatedAt: now}}}
	for try := range 3 {
		s := newPartitioned(t, c, ns, 4) // a fresh handle each time: another process
		for j := range try + 1 {         // other calls first, a different number each time
			if _, err := s.Enqueue(t.Context(), &store.EnqueueParams{Node: "n", Now: now, Instances: []*store.Instance{{ID: fmt.Sprintf("other-%d-%d", try, j), Kind: "a", Queue: "q", RunAt: now, CreatedAt: now}}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, ep := range []*store.EnqueueParams{call, lone} {
			res, err := s.Enqueue(t.Context(), ep)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r.Err != nil || r.Existed != (try > 0) {
					t.Errorf("try %d: %s: %+v; want existed %v", try, ep.Instances[i].ID, r, try > 0)
				}
			}
		}
	}
	all, err := newPartitioned(t, c, ns, 4).LookupInstances(t.Context(), &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, in := range all {
		seen[in.ID]++
	}
	if len(all) != 11 {
		t.Errorf("%d instances stored for 11 IDs: %v", len(all), seen)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s stored %d times", id, n)
		}
	}
}

package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestSharedCallInstancesGoReady: a store call that group commit shares
// carries instances created one after the other, each due at its own
// CreatedAt, with the call's Now the earliest of them (so that no Created
// record is stamped after its instance's RunAt). They are all due when
// the call is made, so they go to their lane's ready list, not to the
// scheduled set for a claim to move later (issue 19: from 8 goroutines,
// 7 of every 8 went there). An instance due after the last CreatedAt of
// the call still waits in the scheduled set.
func TestSharedCallInstancesGoReady(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	ns := fmt.Sprintf("shared_ready_%d", time.Now().UnixNano())
	s := newStore(t, c, ns)
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	var ins []*store.Instance
	for i := range 8 {
		at := t0.Add(time.Duration(i) * 30 * time.Microsecond)
		ins = append(ins, &store.Instance{ID: fmt.Sprintf("r-%d", i), Kind: "k", Queue: "default",
			Args: []byte(`[1]`), CreatedAt: at, RunAt: at})
	}
	last := ins[len(ins)-1].CreatedAt
	later := &store.Instance{ID: "later", Kind: "k", Queue: "default", Args: []byte(`[1]`),
		CreatedAt: last, RunAt: last.Add(time.Microsecond)}
	res, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: append(ins, later), Node: "n1", Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Existed {
			t.Fatalf("instance %d: %+v", i, r)
		}
	}
	prefix := "jobkit:{" + ns + "}:"
	ready, err := c.LLen(ctx, prefix+"q:default:r:0/1:k").Result()
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := c.ZCard(ctx, prefix+"q:default:s").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ready != 8 || waiting != 1 {
		t.Fatalf("%d instances in the ready list and %d in the scheduled set; want the 8 due at their CreatedAt ready and the 1 due after waiting", ready, waiting)
	}
	// Claimed in their order, the later one once due.
	got, err := s.Claim(ctx, &store.ClaimParams{Queue: "default", Owner: "n1", Limit: 20, Now: last, LeaseUntil: last.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Instances) != 8 {
		t.Fatalf("claimed %d at the last CreatedAt, want 8", len(got.Instances))
	}
	for i, in := range got.Instances {
		if want := fmt.Sprintf("r-%d", i); in.ID != want {
			t.Fatalf("claim %d is %s, want %s", i, in.ID, want)
		}
	}
}

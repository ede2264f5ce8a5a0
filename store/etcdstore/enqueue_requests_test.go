package etcdstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// enqueueOne enqueues in alone on s and returns its result.
func enqueueOne(t *testing.T, s store.Store, in *store.Instance) store.EnqueueResult {
	t.Helper()
	res, err := s.Enqueue(context.Background(), &store.EnqueueParams{Instances: []*store.Instance{in}, Now: t0, Node: "n"})
	if err != nil {
		t.Fatalf("enqueue %s: %v", in.ID, err)
	}
	if res[0].Err != nil {
		t.Fatalf("enqueue %s: %v", in.ID, res[0].Err)
	}
	return res[0]
}

// TestLoneEnqueueIsOneRequest: once a handle knows a lane, an Enqueue
// of one instance into it, with nothing else enqueued meanwhile, is one
// request: its write, numbered from a ticket it did not read (issue 34).
// It was two: a read for the ticket and the lane markers, then the write.
func TestLoneEnqueueIsOneRequest(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	s, reqs := countingStore(t, ns)
	last := enqueueOne(t, s, testInst("a0")) // learns the lane
	for i, id := range []string{"a1", "a2", "a3"} {
		before := reqs.Load()
		r := enqueueOne(t, s, testInst(id))
		if n := reqs.Load() - before; n != 1 {
			t.Fatalf("lone enqueue %d (%s) sent %d KV requests, want 1", i+1, id, n)
		}
		if r.Seq <= last.Seq {
			t.Fatalf("%s got Seq %d after %d: want increasing in enqueue order", id, r.Seq, last.Seq)
		}
		last = r
	}
	// A repeat is still answered with the stored instance.
	before := reqs.Load()
	r := enqueueOne(t, s, testInst("a2"))
	if !r.Existed || r.Seq == 0 || r.Seq >= last.Seq {
		t.Fatalf("repeated enqueue of a2: %+v, want Existed with a2's Seq (below a3's %d)", r, last.Seq)
	}
	if n := reqs.Load() - before; n > 2 {
		t.Fatalf("repeated enqueue sent %d KV requests, want at most 2", n)
	}
	got := claimAll(t, s)
	if want := []string{"a0", "a1", "a2", "a3"}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
}

// TestLoneEnqueueOrderAcrossHandles: a one-request Enqueue on a handle
// that has not seen another handle's Enqueue, which returned before it
// started, still numbers its instance after that one's (the other's write
// moved the ticket key past this handle's ticket, so the write's
// condition fails and it goes on from what its failure branch read).
func TestLoneEnqueueOrderAcrossHandles(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	a, reqs := countingStore(t, ns)
	b, _ := countingStore(t, ns)
	enqueueOne(t, a, testInst("a0"))
	a1 := enqueueOne(t, a, testInst("a1"))
	enqueueOne(t, b, testInst("b0"))
	b1 := enqueueOne(t, b, testInst("b1"))
	if b1.Seq <= a1.Seq {
		t.Fatalf("b1 got Seq %d after a1's %d: want increasing in enqueue order", b1.Seq, a1.Seq)
	}
	before := reqs.Load()
	a2 := enqueueOne(t, a, testInst("a2"))
	if a2.Seq <= b1.Seq {
		t.Fatalf("a2 got Seq %d after b1's %d on another handle: want increasing in enqueue order", a2.Seq, b1.Seq)
	}
	if n := reqs.Load() - before; n != 2 {
		t.Fatalf("a2's enqueue sent %d KV requests, want 2 (a write whose condition failed, then the write)", n)
	}
	got := claimAll(t, a)
	if want := []string{"a0", "a1", "b0", "b1", "a2"}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v (enqueue order)", got, want)
	}
}

// TestLoneEnqueueAfterLaneMarkerDeleted: a one-request Enqueue compares
// the lane marker it remembers; when the marker is gone (a claim found
// the lane empty and deleted it), the write fails and the call puts the
// marker again, so claims find the instance.
func TestLoneEnqueueAfterLaneMarkerDeleted(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	s, _ := countingStore(t, ns)
	enqueueOne(t, s, testInst("a0"))
	enqueueOne(t, s, testInst("a1"))
	if got := claimAll(t, s); !slices.Equal(got, []string{"a0", "a1"}) {
		t.Fatalf("claimed %v, want [a0 a1]", got)
	}
	cli := newClient(t, testserver.Etcd(t))
	resp, err := cli.Delete(context.Background(), keyPrefix(ns)+"qp/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Deleted == 0 {
		t.Fatalf("no lane marker to delete under %sqp/", keyPrefix(ns))
	}
	enqueueOne(t, s, testInst("a2"))
	if got := claimAll(t, s); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("claimed %v, want [a2]: the enqueue after the lane marker was deleted must put it again", got)
	}
}

// claimAll claims what is ready in queue q, in claim order.
func claimAll(t *testing.T, s store.Store) []string {
	t.Helper()
	res, err := s.Claim(context.Background(), &store.ClaimParams{Queue: "q", Owner: "w", Limit: 100, Now: t0, LeaseUntil: t0.Add(time.Minute)})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	var ids []string
	for _, in := range res.Instances {
		ids = append(ids, in.ID)
	}
	return ids
}

// TestLoneEnqueueAfterClaimSeesOtherHandle: a handle's reads (here a
// claim's) tell it the newest revision too, so after it has read past
// another handle's Enqueue its own lone Enqueue is still one request:
// in a cluster of several processes, workers claiming keep each
// process's ticket fresh.
func TestLoneEnqueueAfterClaimSeesOtherHandle(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	a, reqs := countingStore(t, ns)
	b, _ := countingStore(t, ns)
	enqueueOne(t, a, testInst("a0"))
	enqueueOne(t, b, testInst("b0"))
	if got := claimAll(t, a); !slices.Equal(got, []string{"a0", "b0"}) {
		t.Fatalf("claimed %v, want [a0 b0]", got)
	}
	before := reqs.Load()
	enqueueOne(t, a, testInst("a1"))
	if n := reqs.Load() - before; n != 1 {
		t.Fatalf("a1's enqueue, after a claim that read past b0, sent %d KV requests, want 1", n)
	}
	if got := claimAll(t, a); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("claimed %v, want [a1]", got)
	}
}

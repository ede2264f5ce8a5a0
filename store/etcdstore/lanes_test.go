package etcdstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// TestLegacyReadyKeys: ready keys and priority markers written before
// lanes (r/<queue>/<prio>/<runAt><seq>, qp/<queue>/<prio>) are still
// claimed, by kind; a cancel removes such a key, so a canceled instance of
// before is never claimed.
func TestLegacyReadyKeys(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	p := keyPrefix(ns)
	cleanup(t, ns)
	s := open(t, ns)
	a, b, c := testInst("la"), testInst("lb"), testInst("lc")
	b.Kind = "other"
	mustEnqueue(t, s, a, b, c)
	cli := newClient(t, testserver.Etcd(t))
	ctx := context.Background()
	// Rewrite the lane keys and markers as the store wrote them before.
	resp, err := cli.Get(ctx, p+"r/q/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 3 {
		t.Fatalf("ready keys: %d, %v; want 3", len(resp.Kvs), err)
	}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		i := strings.Index(k, "/z")
		j := strings.LastIndexByte(k, '/')
		legacy := k[:i] + k[j:]
		if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(k), clientv3.OpPut(legacy, string(kv.Value))).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	marks, err := cli.Get(ctx, p+"qp/q/", clientv3.WithPrefix())
	if err != nil || len(marks.Kvs) != 2 {
		t.Fatalf("lane markers: %d, %v; want 2", len(marks.Kvs), err)
	}
	for _, kv := range marks.Kvs {
		k := string(kv.Key)
		if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(k), clientv3.OpPut(k[:strings.Index(k, "/z")], "")).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	s2 := open(t, ns) // a handle that never saw the lane markers
	if _, err := s2.Cancel(ctx, &store.CancelParams{ID: "lc", Now: t0, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Second)
	claim := func(kinds ...string) []string {
		t.Helper()
		res, err := s2.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Kinds: kinds})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range res.Instances {
			ids = append(ids, in.ID)
		}
		return ids
	}
	if got := claim("other"); !slices.Equal(got, []string{"lb"}) {
		t.Fatalf("claim of kind other from keys of before: %v, want [lb]", got)
	}
	if got := claim("k", "other"); !slices.Equal(got, []string{"la"}) {
		t.Fatalf("claim of kind k from keys of before: %v, want [la] (lc was canceled)", got)
	}
}

// TestEmptyLaneMarkersDeleted: a claim that finds a lane with no instance
// left (ready or due later) deletes its marker, so markers do not pile up
// for every kind and label set ever enqueued; the queue stays listed, and an
// instance enqueued afterwards through the same handle (which wrote the
// marker before) is claimed again.
func TestEmptyLaneMarkersDeleted(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	p := keyPrefix(ns)
	cleanup(t, ns)
	s := open(t, ns)
	ctx := context.Background()
	cli := newClient(t, testserver.Etcd(t))
	markers := func() []string {
		t.Helper()
		resp, err := cli.Get(ctx, p+"qp/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range resp.Kvs {
			out = append(out, strings.TrimPrefix(string(kv.Key), p))
		}
		return out
	}
	one, two := testInst("one"), testInst("two")
	two.Kind = "other"
	mustEnqueue(t, s, one, two)
	if got := markers(); len(got) != 2 {
		t.Fatalf("markers after enqueueing two kinds: %v, want 2", got)
	}
	for range 2 {
		got := claimN(t, s, "w", 1)
		if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: t0, Outcomes: []store.Outcome{{ID: got[0].ID, Attempt: got[0].Attempt, State: store.Completed}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Both lanes are empty now: the next claim finds nothing and drops them.
	if got := claimN(t, s, "w", 1); len(got) != 0 {
		t.Fatalf("claimed %v from an empty queue", got)
	}
	if got := markers(); len(got) != 0 {
		t.Fatalf("markers of empty lanes left: %v", got)
	}
	qs, err := s.ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].Name != one.Queue {
		t.Fatalf("ListQueues after the lanes emptied: %+v, want %s", qs, one.Queue)
	}
	// The same handle enqueues into the dropped lane again.
	mustEnqueue(t, s, testInst("three"))
	if got := claimN(t, s, "w", 1); len(got) != 1 || got[0].ID != "three" {
		t.Fatalf("claim after re-enqueueing into a dropped lane: %v, want three", got)
	}
}

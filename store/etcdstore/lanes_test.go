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

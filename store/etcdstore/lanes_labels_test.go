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

// TestLegacyReadyKeysLabels: a ready key written before lanes whose
// instance requires labels is taken only by a claimer whose labels
// satisfy them, never by one with no kinds and no labels.
func TestLegacyReadyKeysLabels(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	p := keyPrefix(ns)
	cleanup(t, ns)
	s := open(t, ns)
	a, g := testInst("plain"), testInst("gpu")
	g.Labels = []string{"gpu"}
	mustEnqueue(t, s, a, g)
	cli := newClient(t, testserver.Etcd(t))
	ctx := context.Background()
	// Rewrite the lane keys and markers as the store wrote them before.
	resp, err := cli.Get(ctx, p+"r/q/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 2 {
		t.Fatalf("ready keys: %d, %v; want 2", len(resp.Kvs), err)
	}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		legacy := k[:strings.Index(k, "/z")] + k[strings.LastIndexByte(k, '/'):]
		if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(k), clientv3.OpPut(legacy, string(kv.Value))).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	marks, err := cli.Get(ctx, p+"qp/q/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range marks.Kvs {
		k := string(kv.Key)
		if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(k), clientv3.OpPut(k[:strings.Index(k, "/z")], "")).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	s2 := open(t, ns) // a handle that never saw the lane markers
	now := t0.Add(time.Second)
	claim := func(labels ...string) []string {
		t.Helper()
		res, err := s2.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range res.Instances {
			ids = append(ids, in.ID)
		}
		return ids
	}
	if got := claim(); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("claim with no kinds and no labels from keys of before: %v, want [plain]", got)
	}
	if got := claim("gpu=t4"); !slices.Equal(got, []string{"gpu"}) {
		t.Fatalf("claim with gpu=t4 from keys of before: %v, want [gpu]", got)
	}
}

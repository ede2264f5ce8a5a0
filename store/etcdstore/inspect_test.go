package etcdstore_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/storetest"
)

// TestCountsFoldsManyDeltas checks that the count deltas (three per
// instance here: enqueue, claim, finish) are folded in the background while
// they are written, that Counts is exact, and that Counts folds the rest.
func TestCountsFoldsManyDeltas(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	s := open(t, ns)
	storetest.FillCompleted(t, s, 2000, 2)
	cli := newClient(t, testserver.Etcd(t))
	pending := func() int64 {
		t.Helper()
		r, err := cli.Get(context.Background(), keyPrefix(ns)+"cn/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Count
	}
	if n := pending(); n >= 6000 {
		t.Fatalf("%d count deltas before Counts, want fewer than the 6000 written (folded in the background)", n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows, err := s.Counts(context.Background(), &store.CountsParams{})
		if err != nil {
			t.Fatalf("Counts: %v", err)
		}
		var done, other int64
		for _, r := range rows {
			done += r.States[store.Completed]
			other += r.Total() - r.States[store.Completed]
		}
		if done != 2000 || other != 0 || len(rows) != 2 {
			t.Fatalf("Counts = %+v; want 2000 completed in two queues and nothing else", rows)
		}
		n := pending()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d count deltas left after Counts, want all folded", n)
		}
	}
}

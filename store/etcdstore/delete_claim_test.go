package etcdstore

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// TestDeleteOfAWholeClaim deletes, in one call, every instance one claim
// took while they run. The claim record ends with them, and the call
// reads the owner's claim records once: it read all of them, and every
// other instance of the claim, once per deleted instance, so deleting n
// instances of one claim cost n² record reads (300 took longer than the
// store's 15 s operation timeout on a loaded machine) and left the record
// behind (each instance saw the others still running).
func TestDeleteOfAWholeClaim(t *testing.T) {
	t.Parallel()
	ns := "delclaim-" + time.Now().Format("150405.000000")
	s, h := ileaveStore(t, ns, true)
	ctx := t.Context()
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	const n = 120
	var ins []*store.Instance
	var ids []string
	for i := range n {
		id := fmt.Sprintf("dc-%03d", i)
		ids = append(ids, id)
		ins = append(ins, &store.Instance{ID: id, Kind: "k", Queue: "q", Args: []byte(`[1]`), RunAt: t0, CreatedAt: t0})
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: t0, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: n, Now: t0, LeaseUntil: t0.Add(time.Hour)})
	if err != nil || len(res.Instances) != n {
		t.Fatalf("claim: %d of %d, %v", len(res.Instances), n, err)
	}
	recs := func() int {
		resp, err := s.cli.Get(ctx, s.k.claimRecPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return int(resp.Count)
	}
	if got := recs(); got == 0 {
		t.Fatal("no claim record after the claim")
	}
	var recReads atomic.Int64
	hook := func(key string) {
		if strings.HasPrefix(key, s.k.claimRecPrefix()) {
			recReads.Add(1)
		}
	}
	h.before.Store(&hook)
	out, err := s.Delete(ctx, &store.DeleteParams{IDs: ids})
	h.before.Store(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out {
		if r.Err != nil || r.State != store.Processing {
			t.Fatalf("delete %s: %+v", r.ID, r)
		}
	}
	if got := recReads.Load(); got > 2 {
		t.Errorf("deleting %d running instances of one claim read the owner's claim records %d times; want once", n, got)
	}
	if got := recs(); got != 0 {
		t.Errorf("%d claim records left after deleting every instance they list", got)
	}
}

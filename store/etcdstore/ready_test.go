package etcdstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
)

// rangeRecorder opens a store whose client records the start keys of the
// ranges over the ready index (r/) that each transaction it sends reads
// in its success branch.
func rangeRecorder(t *testing.T, ns string) (*etcdstore.Store, *clientv3.Client, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var last []string
	rec := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if tx, ok := req.(*pb.TxnRequest); ok {
			var starts []string
			for _, op := range tx.Success {
				if r := op.GetRequestRange(); r != nil && strings.Contains(string(r.Key), "/r/") && len(r.RangeEnd) > 0 && r.Limit != 1 {
					starts = append(starts, string(r.Key))
				}
			}
			if len(starts) > 0 {
				mu.Lock()
				last = starts
				mu.Unlock()
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   testserver.Etcd(t),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rec)},
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	s, err := etcdstore.New(cli, etcdstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s, cli, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

func claimIDs(t *testing.T, s store.Store, now time.Time, limit int, seq uint64) []string {
	t.Helper()
	res, err := s.Claim(context.Background(), &store.ClaimParams{Queue: "q", Owner: "w", Limit: limit, Now: now, LeaseUntil: now.Add(time.Minute), ClaimSeq: seq})
	if err != nil {
		t.Fatalf("claim %d: %v", seq, err)
	}
	var ids []string
	for _, in := range res.Instances {
		ids = append(ids, in.ID)
	}
	return ids
}

// TestClaimReadsFromLowKey: once claims took the head of a lane, the next
// claim reads the lane from the head the claim before it found (so it
// walks no more than what that claim took), not from the lane's start, so etcd does not walk the keys claimed before (deleted,
// but in its index until compaction: at 1,000 jobs a second, 60,000 a
// minute). An instance enqueued due before them still comes first: its
// enqueue moves the lane marker, and the claim reads the lane from its
// start again.
func TestClaimReadsFromLowKey(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	s, cli, starts := rangeRecorder(t, ns)
	old := t0.Add(-time.Hour)
	var ins []*store.Instance
	for i := range 10 {
		in := testInst(fmt.Sprintf("a%d", i))
		in.RunAt = old
		ins = append(ins, in)
	}
	mustEnqueue(t, s, ins...)
	ready, err := cli.Get(context.Background(), s.Prefix()+"r/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(ready.Kvs) != 10 {
		t.Fatalf("ready keys: %d, %v; want 10", len(ready.Kvs), err)
	}
	if got := claimIDs(t, s, t0, 5, 1); strings.Join(got, ",") != "a0,a1,a2,a3,a4" {
		t.Fatalf("first claim took %v, want a0..a4", got)
	}
	// Each claim reads from the head the claim before it found: the
	// second from a0's key, the third from a5's.
	for i, want := range []string{"a5", "a6"} {
		if got := claimIDs(t, s, t0, 1, uint64(i+2)); strings.Join(got, ",") != want {
			t.Fatalf("claim %d took %v, want %s", i+2, got, want)
		}
		from := string(ready.Kvs[5*i].Key)
		for _, k := range starts() {
			if k != from {
				t.Fatalf("claim %d read the ready range from %q, want from %q", i+2, k, from)
			}
		}
	}
	// Due before everything: below where claims start reading.
	early := testInst("early")
	early.RunAt = old.Add(-time.Hour)
	mustEnqueue(t, s, early)
	if got := claimIDs(t, s, t0, 1, 4); strings.Join(got, ",") != "early" {
		t.Fatalf("claim after an enqueue due earlier took %v, want early", got)
	}
	if got := claimIDs(t, s, t0, 1, 5); strings.Join(got, ",") != "a7" {
		t.Fatalf("claim took %v, want a7", got)
	}
}

// TestClaimFindsUnmarkedLowKey: an instance that lands below a lane's low
// key without moving its marker (an enqueue whose clock is far behind the
// claimer's, so it did not count as due early) is still claimed within
// about a second: each handle reads every lane from its start at least
// that often.
func TestClaimFindsUnmarkedLowKey(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	s, _, _ := rangeRecorder(t, ns)
	mustEnqueue(t, s, testInst("a"), testInst("b"))
	if got := claimIDs(t, s, t0, 1, 1); strings.Join(got, ",") != "a" {
		t.Fatalf("claim took %v, want a", got)
	}
	behind := t0.Add(-time.Hour)
	lagging := testInst("lagging")
	lagging.RunAt, lagging.CreatedAt = behind, behind
	res, err := s.Enqueue(context.Background(), &store.EnqueueParams{Instances: []*store.Instance{lagging}, Now: behind, Node: "n"})
	if err != nil || res[0].Err != nil {
		t.Fatalf("enqueue: %v %v", err, res)
	}
	seq := uint64(2)
	deadline := time.Now().Add(5 * time.Second)
	var taken []string
	for !strings.Contains(strings.Join(taken, ","), "lagging") {
		if time.Now().After(deadline) {
			t.Fatalf("lagging instance not claimed within 5 s; claimed %v", taken)
		}
		taken = append(taken, claimIDs(t, s, t0, 1, seq)...)
		seq++
	}
}

package etcdstore_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
)

// countingStore opens a store whose client counts the KV requests (Range,
// Txn, Put, DeleteRange) it sends: on etcd 3.4 every one of them copies
// the server's buffer of uncommitted writes, so their number is what a
// claim costs etcd (doc/benchmarks-appendix.md, "Issue 18: etcd, per transaction
// or per key").
func countingStore(t *testing.T, ns string) (*etcdstore.Store, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasPrefix(method, "/etcdserverpb.KV/") {
			n.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   testserver.Etcd(t),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)},
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
	return s, &n
}

// TestClaimRequestsWhenFewReady: a claim on a queue with fewer ready
// instances than it asks for is one read and one write request, whether
// it takes some or none, and still tells when the next one is due (a
// queue kept drained by its workers, as under a steady load, claims like
// this every time). It read the next due time in a second request before.
// The handle's first claim is not counted: it also grants the handle's
// etcd lease and learns the queue's lanes.
func TestClaimRequestsWhenFewReady(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	s, reqs := countingStore(t, ns)
	later := t0.Add(time.Hour)
	future := testInst("future")
	future.RunAt = later
	mustEnqueue(t, s, testInst("first"), future)
	ctx := context.Background()
	claim := func(seq uint64) *store.ClaimResult {
		t.Helper()
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 4, Now: t0, LeaseUntil: t0.Add(time.Minute), ClaimSeq: seq})
		if err != nil {
			t.Fatalf("claim %d: %v", seq, err)
		}
		return res
	}
	if res := claim(1); len(res.Instances) != 1 {
		t.Fatalf("first claim took %d instances, want 1", len(res.Instances))
	}
	mustEnqueue(t, s, testInst("second"))
	for i, want := range []int{1, 0, 0} {
		before := reqs.Load()
		res := claim(uint64(i + 2))
		n := reqs.Load() - before
		if len(res.Instances) != want {
			t.Fatalf("claim %d took %d instances, want %d", i+2, len(res.Instances), want)
		}
		if !res.NextRunAt.Equal(later) {
			t.Fatalf("claim %d: NextRunAt %v, want %v (the future instance)", i+2, res.NextRunAt, later)
		}
		if n != 2 {
			t.Fatalf("claim %d (%d taken, fewer than the limit) sent %d KV requests, want 2: one read, one write", i+2, want, n)
		}
	}
}

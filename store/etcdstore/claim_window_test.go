package etcdstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
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

// TestClaimReadsItsWindowOnShortLanes: a claim from a lane holding fewer
// ready instances than the store's far-key depth (16 windows) reads
// about its window from etcd, not every ready key of the lane. It read
// all of them (keys only) on every claim before, in looking for a far
// key the lane was too short to have: 300 keys a claim here, some 30 KB,
// and at the tail of every burn-down the same for the last thousands.
func TestClaimReadsItsWindowOnShortLanes(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	var keys atomic.Int64 // keys returned by read-only transactions
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := reply.(*pb.TxnResponse); ok && strings.HasSuffix(method, "/Txn") {
			for _, op := range r.Responses {
				keys.Add(int64(len(op.GetResponseRange().GetKvs())))
			}
		}
		return err
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
	ctx := context.Background()
	const n, limit = 300, 4 // the depth is 16·(limit+32) = 576 keys
	var ins []*store.Instance
	for i := range n {
		in := testInst(fmt.Sprintf("w%03d", i))
		ins = append(ins, in)
	}
	mustEnqueue(t, s, ins...)
	claim := func(i int) []*store.Instance {
		t.Helper()
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: limit, Now: t0, LeaseUntil: t0.Add(time.Minute)})
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		return res.Instances
	}
	got := claim(0) // learns the lane, reads it whole
	const claims = 40
	before := keys.Load()
	for i := 1; i <= claims; i++ {
		took := claim(i)
		if len(took) != limit {
			t.Fatalf("claim %d took %d instances, want %d", i, len(took), limit)
		}
		got = append(got, took...)
	}
	per := float64(keys.Load()-before) / claims
	// A claim returns its window (limit+1 ready entries, the lane marker,
	// the static records it takes); refreshing the lane, which happens
	// when the part read up to its remembered end is used up, returns the
	// lane's keys again, but not on every claim.
	if per > 4*limit+20 {
		t.Errorf("claims read %.1f keys each from etcd, want about their window (%d taken a claim, %d ready)", per, limit, n)
	}
	for i, in := range got {
		if want := fmt.Sprintf("w%03d", i); in.ID != want {
			t.Fatalf("claimed %s as number %d, want %s: claims must still take the lane in order", in.ID, i, want)
		}
	}
}

package etcdstore_test

import (
	"context"
	"fmt"
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

// A lookup reads every page at the revision of its first read. When etcd
// is compacted past that revision while it runs (an operator's `etcdctl
// compact`, or auto-compaction in revision mode on a busy cluster), the
// lookup starts again at the newest revision instead of failing with
// "required revision has been compacted". The store's client here
// compacts a private etcd at its newest revision right after the first
// read of each lookup, so every lookup meets a compaction once.
func TestLookupDuringCompaction(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	admin := newClient(t, []string{srv.Addr})
	var armed atomic.Bool
	var compactErr atomic.Pointer[error]
	compacts := 0
	compactAfterFirstRead := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if strings.HasPrefix(method, "/etcdserverpb.KV/") && armed.CompareAndSwap(true, false) {
			resp, perr := admin.Put(ctx, "compact-probe", "")
			if perr == nil {
				_, perr = admin.Compact(ctx, resp.Header.Revision)
			}
			if perr != nil {
				compactErr.Store(&perr)
			}
			compacts++
		}
		return err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{srv.Addr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(compactAfterFirstRead)},
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	s, err := etcdstore.New(cli, etcdstore.WithNamespace(namespace(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const n = 600 // index pages of 256: three a walk
	for i := 0; i < n; i += 100 {
		var ins []*store.Instance
		for j := i; j < i+100; j++ {
			in := testInst(fmt.Sprintf("i%04d", j))
			in.CreatedAt = t0.Add(time.Duration(j) * time.Millisecond)
			ins = append(ins, in)
		}
		mustEnqueue(t, s, ins...)
	}
	ctx := context.Background()
	before, err := s.LookupHistory(ctx, &store.Query{Queue: "q"})
	if err != nil || len(before) < n {
		t.Fatalf("lookup history before compacting: %d records, %v; want at least %d", len(before), err, n)
	}

	armed.Store(true)
	ins, err := s.LookupInstances(ctx, &store.Query{Queue: "q"})
	if err != nil {
		t.Fatalf("lookup instances: %v", err)
	}
	if len(ins) != n {
		t.Fatalf("lookup instances: %d instances, want %d", len(ins), n)
	}
	armed.Store(true)
	hist, err := s.LookupHistory(ctx, &store.Query{Queue: "q"})
	if err != nil {
		t.Fatalf("lookup history: %v", err)
	}
	if len(hist) != len(before) {
		t.Fatalf("lookup history: %d records, want %d", len(hist), len(before))
	}
	if p := compactErr.Load(); p != nil {
		t.Fatalf("compact: %v", *p)
	}
	if compacts != 2 {
		t.Fatalf("%d compactions, want one in each lookup", compacts)
	}
}

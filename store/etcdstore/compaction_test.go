package etcdstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
)

// A lookup reads every page at one revision. When etcd is compacted past
// that revision while it runs (an operator's `etcdctl compact`, or
// auto-compaction in revision mode on a busy cluster), the lookup starts
// again at the newest revision instead of failing with "required revision
// has been compacted". The test compacts a private etcd at its newest
// revision, over and over, while lookups that need several pages run.
func TestLookupDuringCompaction(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	cli := newClient(t, []string{srv.Addr})
	s, err := etcdstore.New(cli, etcdstore.WithNamespace(namespace(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const n = 700 // index pages of 256: three per walk
	for i := 0; i < n; i += 100 {
		var ins []*store.Instance
		for j := i; j < i+100; j++ {
			in := testInst(fmt.Sprintf("i%04d", j))
			in.CreatedAt = t0.Add(time.Duration(j) * time.Millisecond)
			ins = append(ins, in)
		}
		mustEnqueue(t, s, ins...)
	}

	before, err := s.LookupHistory(context.Background(), &store.Query{Queue: "q"})
	if err != nil || len(before) < n {
		t.Fatalf("lookup history before compacting: %d records, %v; want at least %d", len(before), err, n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var compactErr error
	compactions := 0
	wg.Go(func() {
		// Paced: a compaction every 100 ms, most of them within a lookup,
		// not so many that a lookup never finishes between two.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
			resp, err := cli.Put(ctx, "compact-probe", "")
			if err == nil {
				_, err = cli.Compact(ctx, resp.Header.Revision)
			}
			if err != nil {
				if ctx.Err() == nil {
					compactErr = err
				}
				return
			}
			compactions++
		}
	})
	start := time.Now()
	defer func() {
		cancel()
		wg.Wait()
		if compactErr != nil {
			t.Errorf("compact: %v", compactErr)
		}
		t.Logf("%d compactions during 30 lookups of each kind (%v)", compactions, time.Since(start))
	}()
	for i := range 30 {
		ins, err := s.LookupInstances(context.Background(), &store.Query{Queue: "q"})
		if err != nil {
			t.Fatalf("lookup instances %d: %v", i, err)
		}
		if len(ins) != n {
			t.Fatalf("lookup instances %d: %d instances, want %d", i, len(ins), n)
		}
		hist, err := s.LookupHistory(context.Background(), &store.Query{Queue: "q"})
		if err != nil {
			t.Fatalf("lookup history %d: %v", i, err)
		}
		if len(hist) != len(before) {
			t.Fatalf("lookup history %d: %d records, want %d", i, len(hist), len(before))
		}
	}
}

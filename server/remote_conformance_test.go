package server

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/store/storetest"
)

// quiet is a logger that drops everything.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// executorServer serves namespace ns of st on a real loopback listener
// with remote executors on, and returns its URL.
func executorServer(t *testing.T, st store.Store, tokens []Token, namespaces ...string) (*Server, string) {
	t.Helper()
	mgrs := map[string]*job.Manager{}
	stores := map[string]store.Store{}
	for _, ns := range namespaces {
		m, err := job.NewManager(job.WithStore(st), job.WithWorkers(0))
		if err != nil {
			t.Fatal(err)
		}
		mgrs[ns], stores[ns] = m, st
	}
	srv, err := New(Config{Namespaces: mgrs, DefaultNamespace: namespaces[0], Tokens: tokens, ExecutorStores: stores, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, srv)
	serversMu.Lock()
	servers[url] = srv
	serversMu.Unlock()
	return srv, url
}

// serversMu guards servers.
var serversMu sync.Mutex

// TestRemoteStoreConformance runs the store contract suite against
// remote.Store: every call crosses the network to a jobd server (over
// TCP, h2c) that applies it to a memdb store. Each handle the suite opens
// is its own remote.Store with its own session, as separate worker
// processes would have.
func TestRemoteStoreConformance(t *testing.T) {
	const eventBuffer = 1024
	var mu sync.Mutex
	urls := map[string]string{}                  // by namespace
	byURL := map[string]*memdbstore.Store{}      // the store behind each server
	under := map[store.Store]*memdbstore.Store{} // the store behind each handle
	storetest.Run(t, storetest.Harness{
		Limits:     true,
		RateLimits: true,
		Open: func(tb testing.TB, ns string) store.Store {
			t := tb.(*testing.T)
			mu.Lock()
			url, ok := urls[ns]
			var st *memdbstore.Store
			if !ok {
				var err error
				st, err = memdbstore.New(memdbstore.WithEventBuffer(eventBuffer))
				if err != nil {
					mu.Unlock()
					t.Fatal(err)
				}
				_, url = executorServer(t, st, nil, "ns")
				urls[ns] = url
				byURL[url] = st
			}
			st = byURL[url]
			mu.Unlock()
			rs, err := remote.Dial(t.Context(), remote.Options{Address: url, NoPush: true, Logger: quiet})
			if err != nil {
				t.Fatalf("remote.Dial: %v", err)
			}
			t.Cleanup(func() { rs.Close() })
			mu.Lock()
			under[rs] = st
			mu.Unlock()
			return rs
		},
		ExpireEvents: func(t testing.TB, s store.Store) {
			mu.Lock()
			st := under[s]
			mu.Unlock()
			ins := make([]*store.Instance, eventBuffer/2+1)
			for i := range ins {
				id := fmt.Sprintf("overflow-%d-%d", time.Now().UnixNano(), i)
				ins[i] = &store.Instance{ID: id, Kind: "overflow", Queue: "overflow", RunAt: time.Unix(0, 0), CreatedAt: time.Unix(0, 0)}
			}
			if _, err := st.Enqueue(t.Context(), &store.EnqueueParams{Instances: ins, Now: time.Unix(0, 0)}); err != nil {
				t.Fatalf("overflow the event buffer: %v", err)
			}
		},
		ConcurrentInstances: 500,
		CancelNotifier:      true, // jobd relays its store's notices on the session
	})
}

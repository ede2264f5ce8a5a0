package server

import (
	"sync"
	"testing"

	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// TestRemoteManagerScenarios runs the manager-level scenario suite with
// every manager's store a remote.Store: each manager is a remote executor
// of a jobd server (over TCP, h2c) on a memdb store, with pushed tasks.
func TestRemoteManagerScenarios(t *testing.T) {
	var mu sync.Mutex
	urls := map[string]string{}
	jobtest.Run(t, jobtest.Harness{Open: func(tb testing.TB, ns string) store.Store {
		t := tb.(*testing.T)
		mu.Lock()
		url, ok := urls[ns]
		if !ok {
			st, err := memdbstore.New()
			if err != nil {
				mu.Unlock()
				t.Fatal(err)
			}
			_, url = executorServer(t, st, nil, "ns")
			urls[ns] = url
		}
		mu.Unlock()
		rs, err := remote.Dial(t.Context(), remote.Options{Address: url, Logger: quiet})
		if err != nil {
			t.Fatalf("remote.Dial: %v", err)
		}
		t.Cleanup(func() { rs.Close() })
		return rs
	}})
}

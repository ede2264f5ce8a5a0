package server

import (
	"sync"
	"testing"

	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
)

// TestRemoteManagerScenarios runs the manager-level scenario suite with
// every manager's store a remote.Store: each manager is a remote executor
// of a jobd server (over TCP, h2c) with pushed tasks, on each backend
// (memdb, Redis).
func TestRemoteManagerScenarios(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) { runRemoteScenarios(t, b) })
}

func runRemoteScenarios(t *testing.T, b backend) {
	var mu sync.Mutex
	urls := map[string]string{}
	jobtest.Run(t, jobtest.Harness{Open: func(tb testing.TB, ns string) store.Store {
		t := tb.(*testing.T)
		mu.Lock()
		url, ok := urls[ns]
		if !ok {
			_, url = executorServer(t, b.open(t, ns), nil, "ns")
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

package server

import (
	"sync"
	"testing"

	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/api/remote/wire"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
)

// TestRemoteManagerScenarios runs the manager-level scenario suite with
// every manager's store a remote.Store: each manager is a remote executor
// of a jobd server (over TCP, h2c) with pushed tasks, on each backend
// (memdb, Redis).
func TestRemoteManagerScenarios(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) { runRemoteScenarios(t, b, nil) })
}

// TestRemoteManagerScenariosOlderJobd runs the suite with workers of this
// version on a jobd that speaks only msgpack (as jobd did before
// msgpack-keyed) and one that speaks only JSON: the worker falls back to
// what jobd chose, and everything works as with the newest jobd.
func TestRemoteManagerScenariosOlderJobd(t *testing.T) {
	for _, c := range []struct {
		name      string
		encodings []string
	}{{"msgpack", []string{wire.Msgpack}}, {"json", []string{}}} {
		t.Run(c.name, func(t *testing.T) { runRemoteScenarios(t, backends[0], c.encodings) })
	}
}

// runRemoteScenarios runs the suite on backend b, with jobd's session
// encodings narrowed to encodings when not nil.
func runRemoteScenarios(t *testing.T, b backend, encodings []string) {
	var mu sync.Mutex
	urls := map[string]string{}
	jobtest.Run(t, jobtest.Harness{Open: func(tb testing.TB, ns string) store.Store {
		t := tb.(*testing.T)
		mu.Lock()
		url, ok := urls[ns]
		if !ok {
			var srv *Server
			srv, url = executorServer(t, b.open(t, ns), nil, "ns")
			srv.setEncodings(encodings)
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

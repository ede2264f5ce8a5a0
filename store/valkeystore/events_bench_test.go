package valkeystore_test

import (
	"testing"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store/storetest"
)

// BenchmarkEventLatency: from a transition (an Enqueue through one client)
// to its event on a follower with a client of its own.
//
//	go test -run '^$' -bench EventLatency -benchtime 5000x ./store/valkeystore/
func BenchmarkEventLatency(b *testing.B) {
	addr := testserver.Redis(b)
	ns := "bench-events-" + b.Name()
	storetest.BenchmarkEventLatency(b, newStore(b, newClient(b, addr), ns), newStore(b, newClient(b, addr), ns))
}

package redisstore_test

import (
	"testing"

	"github.com/jobkit/job/store/storetest"
)

// BenchmarkEventLatency: from a transition (an Enqueue through one client)
// to its event on a follower with a client of its own, on a redis-server
// of the benchmark's own.
//
//	go test -run '^$' -bench EventLatency -benchtime 5000x ./store/redisstore/
func BenchmarkEventLatency(b *testing.B) {
	ns := "bench-events-" + b.Name()
	storetest.BenchmarkEventLatency(b, newStore(b, benchClient(b), ns), newStore(b, benchClient(b), ns))
}

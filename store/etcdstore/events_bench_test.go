package etcdstore_test

import (
	"testing"

	"github.com/jobkit/job/store/storetest"
)

// BenchmarkEventLatency: from a transition (an Enqueue through one
// client) to its event on a follower with a client of its own.
//
//	go test -run '^$' -bench EventLatency -benchtime 2000x ./store/etcdstore/
func BenchmarkEventLatency(b *testing.B) {
	ns := namespace(b)
	cleanup(b, ns)
	storetest.BenchmarkEventLatency(b, open(b, ns), open(b, ns))
}

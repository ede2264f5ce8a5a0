package memdbstore_test

import (
	"testing"

	"github.com/jobkit/job/store/storetest"
)

// BenchmarkEventLatency: from a transition to its event on a follower.
//
//	go test -run '^$' -bench EventLatency -benchtime 5000x ./store/memdbstore/
func BenchmarkEventLatency(b *testing.B) {
	s := newStore(b)
	storetest.BenchmarkEventLatency(b, s, s)
}

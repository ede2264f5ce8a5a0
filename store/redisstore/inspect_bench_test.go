package redisstore_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/jobkit/job/store/storetest"
)

// BenchmarkInspect measures counts, lag and first pages with a million
// completed instances and 10k ready (storetest.BenchInspect) on a
// redis-server of its own. The scale is JOBKIT_BENCH_COMPLETED (default
// 1000000).
//
//	go test -run '^$' -bench Inspect -benchtime 200x ./store/redisstore/
func BenchmarkInspect(b *testing.B) {
	s := newStore(b, benchClient(b), "bench-inspect")
	storetest.BenchInspect(b, s, benchCompleted(b), 10000)
}

func benchCompleted(b *testing.B) int {
	n := 1000000
	if v := os.Getenv("JOBKIT_BENCH_COMPLETED"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("JOBKIT_BENCH_COMPLETED=%q: %v", v, err)
		}
	}
	return n
}

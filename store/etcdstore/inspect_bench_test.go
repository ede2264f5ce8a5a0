package etcdstore_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/jobkit/job/store/storetest"
)

// BenchmarkInspect measures counts, lag and first pages with completed
// instances and 10k ready (storetest.BenchInspect). The scale is
// JOBKIT_BENCH_COMPLETED (default 1000000; filling etcd through the queue
// API is slow, see doc/benchmarks-appendix.md).
//
//	go test -run '^$' -bench Inspect -benchtime 200x -timeout 3h ./store/etcdstore/
func BenchmarkInspect(b *testing.B) {
	ns := namespace(b)
	cleanup(b, ns)
	storetest.BenchInspect(b, open(b, ns), benchCompleted(b), 10000)
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

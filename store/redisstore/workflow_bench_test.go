package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
)

// BenchmarkWorkflowThroughput: 1,000 workflows of ten no-op tasks against
// 10,000 independent no-op jobs on Redis (see jobtest.WorkflowThroughput);
// one op is a whole run, reported as tasks/s.
func BenchmarkWorkflowThroughput(b *testing.B) {
	c := benchClient(b)
	for _, tc := range []struct {
		name   string
		asJobs bool
	}{{"workflows", false}, {"jobs", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var rate float64
			for i := range b.N {
				s := newStore(b, c, fmt.Sprintf("bench_wf_%s_%d_%d", tc.name, i, time.Now().UnixNano()))
				rate += jobtest.WorkflowThroughput(b, s, 1000, tc.asJobs)
			}
			b.ReportMetric(rate/float64(b.N), "tasks/s")
		})
	}
}

// BenchmarkWorkflowFanIn: 10,000 tasks into one join on Redis; reports how
// soon the join starts after the last of them ended.
func BenchmarkWorkflowFanIn(b *testing.B) {
	c := benchClient(b)
	jobtest.ReportWorkflowLatency(b, func(i int) store.Store {
		return newStore(b, c, fmt.Sprintf("bench_wf_fanin_%d_%d", i, time.Now().UnixNano()))
	}, func(tb testing.TB, st store.Store) jobtest.WorkflowLatency {
		return jobtest.WorkflowFanIn(tb, st, 10_000)
	})
}

// BenchmarkWorkflowChain: a chain of 1,000 no-op tasks on Redis; reports
// how soon each task starts after the one before it ended.
func BenchmarkWorkflowChain(b *testing.B) {
	c := benchClient(b)
	jobtest.ReportWorkflowLatency(b, func(i int) store.Store {
		return newStore(b, c, fmt.Sprintf("bench_wf_chain_%d_%d", i, time.Now().UnixNano()))
	}, func(tb testing.TB, st store.Store) jobtest.WorkflowLatency {
		return jobtest.WorkflowChain(tb, st, 1000)
	})
}

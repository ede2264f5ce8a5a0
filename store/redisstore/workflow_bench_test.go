package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/jobtest"
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

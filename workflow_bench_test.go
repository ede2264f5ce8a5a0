package job_test

import (
	"testing"

	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store/memdbstore"
)

// BenchmarkWorkflowThroughput: 1,000 workflows of ten no-op tasks against
// 10,000 independent no-op jobs on memdb (see jobtest.WorkflowThroughput);
// one op is a whole run, reported as tasks/s.
func BenchmarkWorkflowThroughput(b *testing.B) {
	for _, c := range []struct {
		name   string
		asJobs bool
	}{{"workflows", false}, {"jobs", true}} {
		b.Run(c.name, func(b *testing.B) {
			var rate float64
			for range b.N {
				st, err := memdbstore.New()
				if err != nil {
					b.Fatal(err)
				}
				rate += jobtest.WorkflowThroughput(b, st, 1000, c.asJobs)
			}
			b.ReportMetric(rate/float64(b.N), "tasks/s")
		})
	}
}

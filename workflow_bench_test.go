package job_test

import (
	"testing"

	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
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

// BenchmarkWorkflowFanIn: 10,000 tasks into one join on memdb; reports
// how soon the join starts after the last of them ended (one sample per
// run, so p99 is the worst of the runs when they are few).
func BenchmarkWorkflowFanIn(b *testing.B) {
	jobtest.ReportWorkflowLatency(b, newBenchStore(b), func(tb testing.TB, st store.Store) jobtest.WorkflowLatency {
		return jobtest.WorkflowFanIn(tb, st, 10_000)
	})
}

// BenchmarkWorkflowChain: a chain of 1,000 no-op tasks on memdb; reports
// how soon each task starts after the one before it ended.
func BenchmarkWorkflowChain(b *testing.B) {
	jobtest.ReportWorkflowLatency(b, newBenchStore(b), func(tb testing.TB, st store.Store) jobtest.WorkflowLatency {
		return jobtest.WorkflowChain(tb, st, 1000)
	})
}

func newBenchStore(b *testing.B) func(int) store.Store {
	return func(int) store.Store {
		st, err := memdbstore.New()
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
}

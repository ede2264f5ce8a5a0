package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	job "github.com/jobkit/job"
)

// WorkflowBuckets are the buckets of the workflow duration histogram, in
// seconds: 0.1 s to about 7 hours.
var WorkflowBuckets = prometheus.ExponentialBuckets(0.1, 4, 10)

// workflowMetrics count workflows per name (issue 35): the Collector is a
// job.WorkflowObserver.
type workflowMetrics struct {
	started  *prometheus.CounterVec   // workflow
	finished *prometheus.CounterVec   // workflow, state
	duration *prometheus.HistogramVec // workflow, state
}

var _ job.WorkflowObserver = (*Collector)(nil)

// newWorkflowMetrics makes the workflow metrics, named after naming.
func newWorkflowMetrics(naming Naming, cl prometheus.Labels) workflowMetrics {
	prefix := "jobkit_"
	if naming == GoJobNaming {
		prefix = "go_job_"
	}
	return workflowMetrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "workflows_started_total",
			Help: "Workflows this manager stored, by workflow name.", ConstLabels: cl}, []string{"workflow"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "workflows_finished_total",
			Help: "Workflows whose end this manager recorded, by workflow name and state (completed, failed, canceled).", ConstLabels: cl}, []string{"workflow", "state"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "workflow_duration_seconds",
			Help: "How long workflows ran, from stored to ended, in seconds, by workflow name and state.", Buckets: WorkflowBuckets, ConstLabels: cl}, []string{"workflow", "state"}),
	}
}

// WorkflowStarted counts a workflow stored.
func (c *Collector) WorkflowStarted(ev job.WorkflowStartedEvent) {
	c.wf.started.WithLabelValues(ev.Name).Inc()
}

// WorkflowFinished counts a workflow's end and observes its duration.
func (c *Collector) WorkflowFinished(ev job.WorkflowFinishedEvent) {
	c.wf.finished.WithLabelValues(ev.Name, string(ev.State)).Inc()
	c.wf.duration.WithLabelValues(ev.Name, string(ev.State)).Observe(ev.Duration.Seconds())
}

package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/metrics"
)

// TestWorkflowMetrics: workflows started and finished are counted per
// name and state, and their durations observed, on a real Manager.
func TestWorkflowMetrics(t *testing.T) {
	t.Parallel()
	c, err := metrics.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	m, err := job.NewManager(job.WithStore(memStore(t)), job.WithLogger(quiet), job.WithPollInterval(20*time.Millisecond), job.WithObserver(c))
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]job.JobOption{
		{job.WithKind("ok"), job.WithExecutor(func() {})},
		{job.WithKind("bad"), job.WithMaxRetries(0), job.WithExecutor(func() error { return errors.New("no") })},
	} {
		j, err := job.NewJob(opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Stop(context.Background()) }()
	for range 2 {
		if _, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("etl").Add("a", "ok").Add("b", "ok", job.After("a"))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("etl").Add("a", "bad").Add("b", "ok", job.After("a"))); err != nil {
		t.Fatal(err)
	}
	finished := func(state string) float64 {
		return testutil.ToFloat64(prometheusCounter(t, reg, "jobkit_workflows_finished_total", state, "etl"))
	}
	deadline := time.Now().Add(15 * time.Second)
	for finished("completed") < 2 || finished("failed") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("workflows finished: completed %v, failed %v; want 2 and 1", finished("completed"), finished("failed"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := testutil.ToFloat64(prometheusCounter(t, reg, "jobkit_workflows_started_total", "etl")); got != 3 {
		t.Errorf("jobkit_workflows_started_total{workflow=etl} = %v, want 3", got)
	}
	if n := histogramCount(t, reg, "jobkit_workflow_duration_seconds", "completed", "etl"); n != 2 {
		t.Errorf("jobkit_workflow_duration_seconds{workflow=etl,state=completed} holds %d samples, want 2", n)
	}
}

// prometheusCounter returns the gathered counter name with these label
// values (in the order of the label names, as gathered) as a collector testutil reads.
func prometheusCounter(t *testing.T, reg *prometheus.Registry, name string, values ...string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if labelsAre(mt.GetLabel(), values) {
				return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x", Help: "x"}, func() float64 { return mt.GetCounter().GetValue() })
			}
		}
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x", Help: "x"}, func() float64 { return 0 })
}

// histogramCount returns the sample count of the histogram name with
// these label values.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string, values ...string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, mt := range mf.GetMetric() {
				if labelsAre(mt.GetLabel(), values) {
					return mt.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func labelsAre[L interface{ GetValue() string }](labels []L, values []string) bool {
	if len(labels) != len(values) {
		return false
	}
	for i, l := range labels {
		if l.GetValue() != values[i] {
			return false
		}
	}
	return true
}

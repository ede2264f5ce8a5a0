package metrics_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/metrics"
)

// gaugeValue returns the value of the gauge name with these label values,
// and whether it was exported.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, values ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, mt := range mf.GetMetric() {
				if labelsAre(mt.GetLabel(), values) {
					return mt.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestLimitMetrics: a cluster concurrency limit is exported with its max,
// what runs and what waits for it, and the wait of the instances it
// matches is observed as they start, on a real Manager.
func TestLimitMetrics(t *testing.T) {
	t.Parallel()
	c, err := metrics.New(metrics.WithScrapeTTL(0))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	m, err := job.NewManager(job.WithStore(memStore(t)), job.WithLogger(quiet), job.WithPollInterval(20*time.Millisecond), job.WithObserver(c))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	for kind, exec := range map[string]any{
		"slow": func(ctx context.Context) {
			select {
			case <-release:
			case <-ctx.Done():
			}
		},
		"fast": func() {},
	} {
		j, err := job.NewJob(job.WithKind(kind), job.WithExecutor(exec))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Admin().SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: "slow", Max: 1}); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Stop(context.Background()) }()
	defer open()
	for _, kind := range []string{"slow", "slow", "slow", "fast"} {
		if _, err := m.ScheduleJob(ctx, kind); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	is := func(name string, want float64) func() bool {
		return func() bool { v, ok := gaugeValue(t, reg, name, "slow", ""); return ok && v == want }
	}
	wait("1 slow running, 2 waiting", func() bool {
		return is("jobkit_concurrency_limit_running", 1)() && is("jobkit_concurrency_limit_waiting", 2)()
	})
	if v, ok := gaugeValue(t, reg, "jobkit_concurrency_limit_max", "slow", ""); !ok || v != 1 {
		t.Fatalf("jobkit_concurrency_limit_max{kind=slow} = %v (exported %v); want 1", v, ok)
	}
	open()
	wait("every slow one started, its wait observed", func() bool {
		return histogramCount(t, reg, "jobkit_concurrency_limit_wait_seconds", "slow", "") == 3
	})
	wait("nothing running or waiting", func() bool {
		return is("jobkit_concurrency_limit_running", 0)() && is("jobkit_concurrency_limit_waiting", 0)()
	})
	if err := m.Admin().DeleteConcurrencyLimit(ctx, "slow", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := gaugeValue(t, reg, "jobkit_concurrency_limit_max", "slow", ""); ok {
		t.Fatal("a deleted limit is still exported")
	}
}

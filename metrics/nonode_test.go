package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobkit/job"
	"github.com/jobkit/job/metrics"
)

// TestQueuedNoNode: instances waiting on a kind that no live node runs
// (scheduled through its definition alone) are counted in
// jobkit_queued_no_node, the figure the no_node alert watches; a kind a
// live node runs counts 0 there.
func TestQueuedNoNode(t *testing.T) {
	t.Parallel()
	col, err := metrics.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	s := serve(t, reg)
	m, err := job.NewManager(job.WithLogger(quiet), job.WithStore(memStore(t)), job.WithObserver(col))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(mustJob(t, job.WithKind("run"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	ctx := context.Background()
	if _, err := m.PutDefinition(ctx, job.Definition{Kind: "orphan"}, 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := m.ScheduleJob(ctx, "orphan"); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := m.ScheduleJob(ctx, "run", job.WithScheduleAfter(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	var f families
	waitFor(t, "the node to show as live", func() bool {
		f = s.scrape()
		return f.value("jobkit_nodes", "status", "live") == 1
	})
	if got := f.value("jobkit_queued_no_node", "kind", "orphan"); got != 3 {
		t.Errorf("jobkit_queued_no_node{kind=orphan} = %v, want 3", got)
	}
	if got := f.value("jobkit_queued_no_node", "kind", "run"); got != 0 {
		t.Errorf("jobkit_queued_no_node{kind=run} = %v, want 0 (this node runs it)", got)
	}
	if got := f.value("jobkit_queued", "kind", "run"); got != 2 {
		t.Errorf("jobkit_queued{kind=run} = %v, want 2", got)
	}
}

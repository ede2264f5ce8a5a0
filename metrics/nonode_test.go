package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/metrics/internal/collectortest"
)

// TestQueuedNoNode: instances waiting on a kind that no live node runs
// (scheduled through its definition alone) are counted in
// jobkit_queued_no_node, the figure the no_node alert watches; a kind a
// live node runs counts 0 there.
func TestQueuedNoNode(t *testing.T) {
	t.Parallel()
	s, m := observedManager(t, collectortest.MustJob(t, job.WithKind("run"), job.WithExecutor(func() {})))
	ctx := context.Background()
	if _, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "orphan"}, 0); err != nil {
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
	var f collectortest.Families
	collectortest.WaitFor(t, "the node to show as live", func() bool {
		f = s.Scrape()
		return f.Value("jobkit_nodes", "status", "live") == 1
	})
	if got := f.Value("jobkit_queued_no_node", "kind", "orphan"); got != 3 {
		t.Errorf("jobkit_queued_no_node{kind=orphan} = %v, want 3", got)
	}
	if got := f.Value("jobkit_queued_no_node", "kind", "run"); got != 0 {
		t.Errorf("jobkit_queued_no_node{kind=run} = %v, want 0 (this node runs it)", got)
	}
	if got := f.Value("jobkit_queued", "kind", "run"); got != 2 {
		t.Errorf("jobkit_queued{kind=run} = %v, want 2", got)
	}
}

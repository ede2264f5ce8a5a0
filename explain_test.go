package job_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// TestExplainWaiting: a scheduled instance that no node may run says why,
// naming the kind, the requirements and the nodes; it runs once a node
// that matches starts.
func TestExplainWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newMemdb(t)
	// The scheduler runs nothing itself (it is never started).
	sched := newManager(t, job.WithStore(s), job.WithNodeID("sched"), job.WithLogger(quietLogger()))
	release := make(chan struct{})
	defer close(release)
	block := func(ctx context.Context) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	for _, j := range []*job.Job{
		mustJob(t, job.WithKind("render"), job.WithExecutor(block), job.WithRequiredLabels("gpu", "region in (eu,us)")),
		mustJob(t, job.WithKind("plain"), job.WithExecutor(block)),
		mustJob(t, job.WithKind("orphan"), job.WithExecutor(block)),
		mustJob(t, job.WithKind("elsewhere"), job.WithExecutor(block), job.WithQueue("other")),
	} {
		if err := sched.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	// A worker in eu without a gpu, one slot; it runs render, plain and
	// elsewhere (but claims only from the default queue).
	w := newManager(t, job.WithStore(s), job.WithNodeID("w-eu"), job.WithLabels("region=eu"), job.WithWorkers(1), job.WithLogger(quietLogger()))
	for _, kind := range []string{"render", "plain", "elsewhere"} {
		if err := w.RegisterJob(mustJob(t, job.WithKind(kind), job.WithExecutor(block))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "w-eu listed live", func() bool {
		ns, err := sched.Admin().ListNodes(ctx)
		return err == nil && slices.ContainsFunc(ns, func(n *store.NodeInfo) bool { return n.ID == "w-eu" && n.Status == store.NodeLive })
	})
	schedule := func(kind string, opts ...job.ScheduleOption) string {
		t.Helper()
		ji, err := sched.ScheduleJob(ctx, kind, opts...)
		if err != nil {
			t.Fatalf("ScheduleJob(%s): %v", kind, err)
		}
		return ji.ID
	}
	explain := func(id string) *job.WaitExplanation {
		t.Helper()
		ex, err := sched.ExplainWaiting(ctx, id)
		if err != nil {
			t.Fatalf("ExplainWaiting(%s): %v", id, err)
		}
		return ex
	}
	check := func(what string, ex *job.WaitExplanation, reason job.WaitReason, words ...string) {
		t.Helper()
		if ex.Reason != reason {
			t.Fatalf("%s: reason %q (%s); want %q", what, ex.Reason, ex.Message, reason)
		}
		for _, w := range words {
			if !strings.Contains(ex.Message, w) {
				t.Fatalf("%s: message %q does not mention %q", what, ex.Message, w)
			}
		}
	}

	render := schedule("render")
	ex := explain(render)
	check("render on a node without gpu", ex, job.WaitNoNodeWithLabels, "gpu region=eu|us", "w-eu has [region=eu], fails [gpu]")
	if !slices.Equal(ex.Requires, []string{"gpu", "region=eu|us"}) || len(ex.Matching) != 0 ||
		len(ex.Unmatched) != 1 || ex.Unmatched[0].Node != "w-eu" || !slices.Equal(ex.Unmatched[0].Unmet, []string{"gpu"}) {
		t.Fatalf("render: %+v; want requires [gpu region=eu|us], w-eu unmatched failing [gpu]", ex)
	}
	check("orphan", explain(schedule("orphan")), job.WaitNoNodeForKind, `kind "orphan"`)
	check("elsewhere", explain(schedule("elsewhere")), job.WaitNoNodeForQueue, `queue "other"`, "default")
	check("plain later", explain(schedule("plain", job.WithScheduleAfter(time.Hour))), job.WaitNotDue, "not due until")
	check("orphan later", explain(schedule("orphan", job.WithScheduleAfter(time.Hour))), job.WaitNotDue, "not due until", `no live node runs kind "orphan"`)

	// plain runs on w-eu and holds its only slot: the next one waits for
	// a busy node.
	first := schedule("plain")
	waitFor(t, "the first plain instance running", func() bool {
		ji, err := sched.GetInstance(ctx, first)
		return err == nil && ji.State == job.Processing
	})
	check("a running instance", explain(first), job.WaitNotWaiting, "processing")
	second := schedule("plain")
	waitFor(t, "w-eu's heartbeat reporting its slot busy", func() bool {
		ex := explain(second)
		return ex.Reason == job.WaitNodesBusy
	})
	check("plain behind a busy node", explain(second), job.WaitNodesBusy, "w-eu")

	if err := sched.Admin().PauseQueue(ctx, job.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	check("paused queue", explain(second), job.WaitQueuePaused, `queue "default" is paused`)
	if err := sched.Admin().ResumeQueue(ctx, job.DefaultQueue); err != nil {
		t.Fatal(err)
	}

	// A gpu node in us starts: render runs there.
	g := newManager(t, job.WithStore(s), job.WithNodeID("w-us-gpu"), job.WithLabels("gpu=a100", "region=us"), job.WithLogger(quietLogger()))
	if err := g.RegisterJob(mustJob(t, job.WithKind("render"), job.WithExecutor(block))); err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "render running on w-us-gpu", func() bool {
		ji, err := sched.GetInstance(ctx, render)
		return err == nil && ji.State == job.Processing
	})

	if _, err := sched.ExplainWaiting(ctx, "no-such-id"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("ExplainWaiting of an unknown ID: %v; want ErrNotFound", err)
	}
}

// TestRequiredLabelsInvalid: malformed requirements and node labels with
// operators are refused with errors that say what is wrong.
func TestRequiredLabelsInvalid(t *testing.T) {
	t.Parallel()
	exec := job.WithExecutor(func() {})
	for bad, word := range map[string]string{
		"region in (eu,us":  "unbalanced",
		"region in ()":      "empty value set",
		"region=eu||us":     "empty value",
		"=eu":               "without a key",
		"!gpu=a":            "key!=value",
		"region = eu":       "whitespace",
		"re gion in (eu)":   "\"in\" or \"notin\"",
		"region in (eu) or": "after",
	} {
		_, err := job.NewJob(job.WithKind("k"), exec, job.WithRequiredLabels("gpu", bad))
		if !errors.Is(err, job.ErrInvalidJob) || !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), word) {
			t.Errorf("WithRequiredLabels(%q) = %v; want ErrInvalidJob mentioning %q", bad, err, word)
		}
	}
	j, err := job.NewJob(job.WithKind("k"), exec, job.WithRequiredLabels("region in (us, eu)", "!gpu", "zone!=a", "ssd"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := j.Definition().Labels, []string{"!gpu", "region=eu|us", "ssd", "zone!=a"}; !slices.Equal(got, want) {
		t.Errorf("requirements kept as %q; want %q", got, want)
	}
	for _, bad := range []string{"!gpu", "region=eu|us", "region!=eu", "a=(b)"} {
		if _, err := job.NewManager(job.WithLabels(bad)); !errors.Is(err, job.ErrInvalidOption) {
			t.Errorf("WithLabels(%q) = %v; want ErrInvalidOption (node labels are key=value or key)", bad, err)
		}
	}
	d := job.Definition{Kind: "k", Queue: "q", Labels: []string{"region notin (eu"}}
	if err := d.Validate(); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a definition requiring %q: %v; want ErrInvalid", d.Labels[0], err)
	}
	d.Labels = []string{"region notin (eu)", "gpu"}
	if err := d.Validate(); err != nil {
		t.Errorf("a definition requiring %q: %v; want it valid", d.Labels, err)
	}
}

// TestDefinitionLabelsNormalised: a job built from a definition whose
// requirements use the set form schedules instances that carry the
// compact form, as the store keeps it.
func TestDefinitionLabelsNormalised(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t, job.WithStore(newMemdb(t)), job.WithLogger(quietLogger()))
	j := mustJob(t, job.WithDefinition(job.Definition{Kind: "k", Labels: []string{"region in (us,eu)", "!gpu"}}), job.WithExecutor(func() {}))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"!gpu", "region=eu|us"}
	if !slices.Equal(ji.Labels, want) {
		t.Errorf("scheduled instance labels %q; want %q", ji.Labels, want)
	}
	got, err := m.GetInstance(ctx, ji.ID)
	if err != nil || !slices.Equal(got.Labels, want) {
		t.Errorf("stored instance labels %q, %v; want %q", got.Labels, err, want)
	}
}

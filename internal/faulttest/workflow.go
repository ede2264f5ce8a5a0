package faulttest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
)

// WorkflowKilledBeforeRelease SIGKILLs a manager process between a
// workflow task's stored end and the release of its dependents: a worker
// run with -hold-release runs "a" of the workflow a -> b, and is killed
// once its end is stored and it is about to wake b. A second worker then
// completes the workflow, b running exactly once, released by the
// recheck (two seconds, set by the scheduling manager).
func WorkflowKilledBeforeRelease(t *testing.T, spec Spec) {
	ns := namespace(t)
	dir := t.TempDir()
	const recheck = 2 * time.Second
	sched, err := job.NewManager(job.WithStore(spec.Open(t, ns)), job.WithShardRecheck(recheck))
	if err != nil {
		t.Fatal(err)
	}
	step, err := job.NewJob(job.WithKind("wfstep"), job.WithExecutor(func(ji job.Instance) string { return "" }))
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.RegisterJob(step); err != nil {
		t.Fatal(err)
	}
	var common []string
	if spec.Start != nil {
		common = spec.Start(t, ns)
	}
	ctx := context.Background()
	held := startWorker(t, spec, ns, "held", dir, append([]string{"-hold-release"}, common...)...)
	wf, err := sched.ScheduleWorkflow(ctx, job.NewWorkflow("killed").Add("a", "wfstep").Add("b", "wfstep", job.After("a")))
	if err != nil {
		t.Fatal(err)
	}
	a, b := wf.Task("a"), wf.Task("b")
	waitFor(t, 30*time.Second, "the held worker to end a and hold its release", func() bool {
		log, _ := os.ReadFile(held.runlog)
		return strings.Contains(string(log), "release-held "+b.ID)
	})
	held.kill()
	got, err := sched.GetWorkflow(ctx, wf.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Task("a").State; s != job.Completed {
		t.Fatalf("a is %v when the release was held, want completed", s)
	}
	if s := got.Task("b").State; s != job.Scheduled {
		t.Fatalf("b is %v when the release was held, want scheduled (not released)", s)
	}
	other := startWorker(t, spec, ns, "other", dir, common...)
	waitFor(t, 30*time.Second, "the workflow to complete after the kill", func() bool {
		got, err = sched.GetWorkflow(ctx, wf.ID)
		return err == nil && got.State == job.WorkflowCompleted
	})
	other.stop(t)
	starts := map[string]int{}
	for _, r := range readRuns(t, []*worker{held, other}) {
		if r.op == "start" {
			starts[r.id]++
		}
	}
	if starts[a.ID] != 1 || starts[b.ID] != 1 {
		t.Fatalf("runs: a %d, b %d; want each exactly once", starts[a.ID], starts[b.ID])
	}
	var name string
	if err := got.Task("b").ResultsInto(&name); err != nil || name != "b" {
		t.Fatalf("b's result %q (%v), want \"b\"", name, err)
	}
}

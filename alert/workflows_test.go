package alert_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/alert"
)

// TestWorkflowFailedAlertsAndResolves: a workflow_failed rule fires when
// a workflow of a name fails, naming it and linking to its console page,
// and resolves when a workflow of that name completes; a rule with a
// scope is refused naming the fix.
func TestWorkflowFailedAlertsAndResolves(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	step, _ := job.NewJob(job.WithKind("step"), job.WithMaxRetries(0), job.WithExecutor(func() error {
		if failing.Load() {
			return errors.New("bucket gone")
		}
		return nil
	}))
	b := setup(t, nil, step)
	if _, err := b.svcs[0].PutRule(b.ctx, &alert.Rule{Name: "wf", Condition: alert.WorkflowFailed, Kind: "step", Channels: []string{"hook"}}, 0); err == nil || !strings.Contains(err.Error(), "leave kind, trigger and queue empty") {
		t.Fatalf("a workflow_failed rule with a kind: %v; want it refused naming the fix", err)
	}
	if _, err := b.svcs[1].PutRule(b.ctx, &alert.Rule{Name: "wf-failed", Condition: alert.WorkflowFailed, Channels: []string{"hook"}}, 0); err != nil {
		t.Fatal(err)
	}
	waitSteps(t, b, 2)
	run := func(want job.WorkflowState) string {
		t.Helper()
		info, err := b.mgr.ScheduleWorkflow(b.ctx, job.NewWorkflow("nightly").Add("a", "step").Add("b", "step", job.After("a")))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "workflow "+info.ID+" "+string(want), 10*time.Second, func() bool {
			w, err := b.mgr.GetWorkflow(b.ctx, info.ID)
			return err == nil && w.State == want
		})
		return info.ID
	}
	id := run(job.WorkflowFailed)
	waitFor(t, "the firing notification", 5*time.Second, func() bool { return len(b.recv.events("wf-failed")) >= 1 })
	p := b.recv.payloads()[0]
	if p.Event != alert.Firing || p.Workflow != "nightly" || p.Instance != id || !strings.Contains(p.Detail, "nightly") ||
		!strings.HasPrefix(p.ConsoleURL, "http://jobd.test/console/workflows/"+id) {
		t.Fatalf("firing payload %+v", p)
	}
	failing.Store(false)
	run(job.WorkflowCompleted)
	waitFor(t, "the resolved notification", 5*time.Second, func() bool { return len(b.recv.events("wf-failed")) >= 2 })
	waitSteps(t, b, 3)
	if got := b.recv.events("wf-failed"); !equal(got, alert.Firing, alert.ResolvedEvent) {
		t.Fatalf("notifications %v; want one firing then one resolved", got)
	}
}

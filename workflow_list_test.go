package job_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jobkit/job"
)

// TestListWorkflows: pages of workflows, newest first, each once, filtered
// by name and state, with a cursor; bad limits, states and cursors are
// refused naming the fix.
func TestListWorkflows(t *testing.T) {
	t.Parallel()
	ok := mustJob(t, job.WithKind("ok"), job.WithExecutor(func() {}))
	m := wfManager(t, newMemdb(t), ok)
	ctx := context.Background()
	var ids []string
	for i := range 7 {
		name := "even"
		if i%2 == 1 {
			name = "odd"
		}
		info, err := m.ScheduleWorkflow(ctx, job.NewWorkflow(name).Add("a", "ok").Add("b", "ok", job.After("a")))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
		// Plain jobs between workflows: ListWorkflows skips them.
		if _, err := m.ScheduleJob(ctx, "ok"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		waitWorkflow(t, m, id, job.WorkflowCompleted)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatalf("more than 10 pages of 3; got %v", got)
		}
		p, err := m.ListWorkflows(ctx, job.WorkflowQuery{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) > 3 {
			t.Fatalf("page of %d workflows, limit 3", len(p.Items))
		}
		for _, w := range p.Items {
			if w.State != job.WorkflowCompleted || len(w.Tasks) != 2 {
				t.Fatalf("workflow %s: state %s, %d tasks; want completed, 2", w.ID, w.State, len(w.Tasks))
			}
			got = append(got, w.ID)
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	want := make([]string, 0, len(ids))
	for i := len(ids) - 1; i >= 0; i-- {
		want = append(want, ids[i])
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("paged workflows\n got %v\nwant %v (newest first, each once)", got, want)
	}
	odd, err := m.ListWorkflows(ctx, job.WorkflowQuery{Name: "odd"})
	if err != nil {
		t.Fatal(err)
	}
	if len(odd.Items) != 3 || odd.Items[0].ID != ids[5] || odd.Items[0].Name != "odd" {
		t.Fatalf("Name odd: %d workflows, want 3 starting with %s", len(odd.Items), ids[5])
	}
	failed, err := m.ListWorkflows(ctx, job.WorkflowQuery{States: []job.WorkflowState{job.WorkflowFailed}})
	if err != nil || len(failed.Items) != 0 {
		t.Fatalf("States failed: %v, %v; want none", failed, err)
	}
	for _, q := range []job.WorkflowQuery{{Limit: 101}, {Limit: -1}, {Cursor: "nonsense"}, {States: []job.WorkflowState{"done"}}} {
		_, err := m.ListWorkflows(ctx, q)
		if !errors.Is(err, job.ErrInvalidOption) || !strings.Contains(err.Error(), "want") && !strings.Contains(err.Error(), "start again") {
			t.Errorf("ListWorkflows(%+v) = %v; want ErrInvalidOption naming the fix", q, err)
		}
	}
}

// TestRetryWorkflowTask: retrying a failed task by name re-arms its
// dependents and the workflow completes; unknown tasks and workflows are
// ErrNotFound, an open task ErrNotFinished.
func TestRetryWorkflowTask(t *testing.T) {
	t.Parallel()
	var tries atomic.Int32
	flaky := mustJob(t, job.WithKind("flaky"), job.WithMaxRetries(0), job.WithExecutor(func() error {
		if tries.Add(1) == 1 {
			return errors.New("first try fails")
		}
		return nil
	}))
	ok := mustJob(t, job.WithKind("ok"), job.WithExecutor(func() {}))
	m := wfManager(t, newMemdb(t), flaky, ok)
	ctx := context.Background()
	info, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("retry").Add("a", "flaky").Add("b", "ok", job.After("a")))
	if err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, m, info.ID, job.WorkflowFailed)
	if _, err := m.RetryWorkflowTask(ctx, info.ID, "zz"); !errors.Is(err, job.ErrNotFound) || !strings.Contains(err.Error(), `"a", "b"`) {
		t.Fatalf("RetryWorkflowTask(zz) = %v; want ErrNotFound listing the tasks", err)
	}
	if _, err := m.RetryWorkflowTask(ctx, "no-such-workflow", "a"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("RetryWorkflowTask(unknown workflow) = %v; want ErrNotFound", err)
	}
	if _, err := m.RetryWorkflowTask(ctx, info.ID, "a"); err != nil {
		t.Fatalf("RetryWorkflowTask(a): %v", err)
	}
	done := waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
	if done.Task("b").State != job.Completed {
		t.Fatalf("b %s after the retry, want completed", done.Task("b").State)
	}
}

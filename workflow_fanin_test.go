package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// TestWorkflowWideFanIn: a task with 250 dependencies waits for them
// through fan-in gates, so its record holds a few gate IDs, not 250
// dependency IDs; it runs once, after all, reads a dependency's results
// by name, and GetWorkflow lists its 250 dependencies. One failed
// dependency cancels it (DepCancel) with an error naming that task.
func TestWorkflowWideFanIn(t *testing.T) {
	t.Parallel()
	const width = 250
	var joins atomic.Int64
	part := mustJob(t, job.WithKind("fan.part"), job.WithExecutor(func(n int) (int, error) {
		if n < 0 {
			return 0, job.Permanent(errors.New("part failed"))
		}
		return n * 2, nil
	}))
	join := mustJob(t, job.WithKind("fan.join"), job.WithExecutor(func(ctx context.Context, ji job.Instance) (int, error) {
		joins.Add(1)
		var v int
		if err := job.DependencyResultsInto(ctx, ji, "p137", &v); err != nil {
			return 0, err
		}
		var x int
		if err := job.DependencyResultsInto(ctx, ji, "nope", &x); !errors.Is(err, job.ErrWorkflow) {
			return 0, fmt.Errorf("results of a task that is not a dependency: %v, want ErrWorkflow", err)
		}
		return v, nil
	}))
	st := newMemdb(t)
	m := wfManager(t, st, part, join)
	ctx := context.Background()
	build := func(failAt int) *job.Workflow {
		wf := job.NewWorkflow("wide")
		var names []string
		for i := range width {
			n := i
			if i == failAt {
				n = -1
			}
			wf.Add(fmt.Sprintf("p%d", i), "fan.part", job.WithArguments(n), job.WithMaxRetries(0))
			names = append(names, fmt.Sprintf("p%d", i))
		}
		return wf.Add("join", "fan.join", job.After(names...))
	}
	info, err := m.ScheduleWorkflow(ctx, build(-1))
	if err != nil {
		t.Fatal(err)
	}
	joinID := store.WorkflowTaskID(info.ID, "join")
	wantDeps := func(how string, deps []string) {
		t.Helper()
		if len(deps) != width {
			t.Fatalf("%s: the join depends on %d IDs, want its %d dependencies", how, len(deps), width)
		}
		for i, id := range deps {
			if id != store.WorkflowTaskID(info.ID, fmt.Sprintf("p%d", i)) {
				t.Fatalf("%s: the join's dependency %d is %s, want p%d's ID", how, i, id, i)
			}
		}
	}
	if len(info.Tasks) != width+1 {
		t.Fatalf("ScheduleWorkflow lists %d tasks, want %d (its fan-in gates left out)", len(info.Tasks), width+1)
	}
	wantDeps("ScheduleWorkflow", info.Task("join").DependsOn)
	ji, err := m.GetInstance(ctx, joinID)
	if err != nil {
		t.Fatal(err)
	}
	other, err := m.GetInstance(ctx, store.WorkflowTaskID(info.ID, "p3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ResolveDependsOn(ctx, ji, other, nil); err != nil {
		t.Fatal(err)
	}
	wantDeps("ResolveDependsOn", ji.DependsOn)
	if len(other.DependsOn) != 0 {
		t.Fatalf("ResolveDependsOn gave p3, which has no dependencies, %v", other.DependsOn)
	}
	got, err := st.LookupInstances(ctx, &store.Query{IDs: []string{joinID}})
	if err != nil || len(got) != 1 {
		t.Fatalf("reading the join: %v, %v", got, err)
	}
	if n := len(got[0].Task.Deps); n != 3 {
		t.Fatalf("the join's record holds %d dependency IDs; want 3 (its fan-in gates of up to 100 each)", n)
	}
	done := waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
	if joins.Load() != 1 {
		t.Fatalf("the join ran %d times, want once", joins.Load())
	}
	j := done.Task("join")
	var v int
	if err := j.ResultsInto(&v); err != nil || v != 274 {
		t.Fatalf("the join returned %d (%v); want 274, p137's result", v, err)
	}
	if len(done.Tasks) != width+1 || len(j.DependsOn) != width {
		t.Fatalf("GetWorkflow: %d tasks, the join depends on %d; want %d and %d", len(done.Tasks), len(j.DependsOn), width+1, width)
	}
	for i, id := range j.DependsOn {
		if id != store.WorkflowTaskID(info.ID, fmt.Sprintf("p%d", i)) {
			t.Fatalf("the join's dependency %d is %s, want p%d's ID", i, id, i)
		}
	}

	// One dependency fails: the join is canceled, naming it.
	failed, err := m.ScheduleWorkflow(ctx, build(205))
	if err != nil {
		t.Fatal(err)
	}
	end := waitWorkflow(t, m, failed.ID, job.WorkflowFailed)
	fj := end.Task("join")
	if fj.State != job.Canceled || !strings.Contains(fj.Error, `"p205"`) || !strings.Contains(fj.Error, "part failed") {
		t.Fatalf("the join after p205 failed: %s, %q; want canceled, naming p205 and its error", fj.State, fj.Error)
	}
	if joins.Load() != 1 {
		t.Fatalf("the join of the failed workflow ran")
	}
}

// TestWorkflowWideFanInRetryRearms: a dependency of a 150-dependency join
// fails, so its fan-in gate ends Terminated, the join is canceled and the
// workflow fails; retrying that dependency re-arms the gate, the join and
// the end, and once it completes the join runs once and the workflow
// completes.
func TestWorkflowWideFanInRetryRearms(t *testing.T) {
	t.Parallel()
	const width, failing = 150, 120
	var fail atomic.Bool
	fail.Store(true)
	var joins atomic.Int64
	part := mustJob(t, job.WithKind("fanr.part"), job.WithExecutor(func(n int) (int, error) {
		if n == failing && fail.Load() {
			return 0, job.Permanent(errors.New("part failed"))
		}
		return n, nil
	}))
	join := mustJob(t, job.WithKind("fanr.join"), job.WithExecutor(func(ctx context.Context, ji job.Instance) (int, error) {
		joins.Add(1)
		var v int
		err := job.DependencyResultsInto(ctx, ji, fmt.Sprintf("p%d", failing), &v)
		return v, err
	}))
	st := newMemdb(t)
	m := wfManager(t, st, part, join)
	ctx := context.Background()
	wf := job.NewWorkflow("wide-retry")
	var names []string
	for i := range width {
		wf.Add(fmt.Sprintf("p%d", i), "fanr.part", job.WithArguments(i), job.WithMaxRetries(0))
		names = append(names, fmt.Sprintf("p%d", i))
	}
	wf.Add("join", "fanr.join", job.After(names...))
	info, err := m.ScheduleWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	failed := waitWorkflow(t, m, info.ID, job.WorkflowFailed)
	if j := failed.Task("join"); j.State != job.Canceled {
		t.Fatalf("the join after p%d failed: %s %q; want canceled", failing, j.State, j.Error)
	}
	if joins.Load() != 0 {
		t.Fatal("the join ran though a dependency failed")
	}

	fail.Store(false)
	if _, err := m.RetryInstance(ctx, store.WorkflowTaskID(info.ID, fmt.Sprintf("p%d", failing)), job.WithResetAttempts()); err != nil {
		t.Fatal(err)
	}
	done := waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
	if n := joins.Load(); n != 1 {
		t.Fatalf("the join ran %d times after the retry, want once", n)
	}
	var v int
	if err := done.Task("join").ResultsInto(&v); err != nil || v != failing {
		t.Fatalf("the join returned %d (%v), want %d, the retried task's result", v, err, failing)
	}
}

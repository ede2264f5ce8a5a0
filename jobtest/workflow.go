package jobtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
)

func init() {
	register("Workflow", testWorkflow)
	register("WorkflowFailure", testWorkflowFailure)
	register("WorkflowAddTasks", testWorkflowAddTasks)
}

// waitWorkflow waits until the workflow id is in state want.
func waitWorkflow(t *testing.T, m *job.Manager, id string, want job.WorkflowState) *job.WorkflowInfo {
	t.Helper()
	var info *job.WorkflowInfo
	waitFor(t, deadline, fmt.Sprintf("workflow %s %s", id, want), func() bool {
		var err error
		info, err = m.GetWorkflow(context.Background(), id)
		if err != nil {
			t.Fatalf("GetWorkflow(%s): %v", id, err)
		}
		return info.State == want
	})
	return info
}

// runLog counts the runs of each task and checks that none started before
// its dependencies ended.
type runLog struct {
	mu    sync.Mutex
	ended map[string]bool
	runs  map[string]int
	early []string
}

func newRunLog() *runLog { return &runLog{ended: map[string]bool{}, runs: map[string]int{}} }

// start records that task started; deps must have ended.
func (l *runLog) start(task string, deps ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[task]++
	for _, d := range deps {
		if !l.ended[d] {
			l.early = append(l.early, task+" before "+d)
		}
	}
}

func (l *runLog) end(task string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended[task] = true
}

func (l *runLog) check(t *testing.T, tasks ...string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.early) > 0 {
		t.Fatalf("tasks released early: %v", l.early)
	}
	for _, n := range tasks {
		if l.runs[n] != 1 {
			t.Fatalf("task %s ran %d times, want once", n, l.runs[n])
		}
	}
}

// testWorkflow: a fan-out and fan-in on two managers, their recheck an
// hour away: each task runs once, after its dependencies, and reads their
// results; the fan-in of eight parents that end on either manager is
// released once.
func testWorkflow(t *testing.T, e *env) {
	log := newRunLog()
	jobs := func() []*job.Job {
		return []*job.Job{
			mustJob(t, job.WithKind("wf-src"), job.WithExecutor(func(ji job.Instance, n int) int {
				log.start(ji.Info().Task)
				defer log.end(ji.Info().Task)
				return n
			})),
			mustJob(t, job.WithKind("wf-mul"), job.WithExecutor(func(ctx context.Context, ji job.Instance, k int) (int, error) {
				log.start(ji.Info().Task, "src")
				defer log.end(ji.Info().Task)
				var n int
				if err := job.DependencyResultsInto(ctx, ji, "src", &n); err != nil {
					return 0, err
				}
				return n * k, nil
			})),
			mustJob(t, job.WithKind("wf-sum"), job.WithExecutor(func(ctx context.Context, ji job.Instance) (int, error) {
				var deps []string
				for k := range 8 {
					deps = append(deps, fmt.Sprint("mul", k))
				}
				log.start(ji.Info().Task, deps...)
				defer log.end(ji.Info().Task)
				total := 0
				for _, d := range deps {
					var v int
					if err := job.DependencyResultsInto(ctx, ji, d, &v); err != nil {
						return 0, err
					}
					total += v
				}
				return total, nil
			})),
		}
	}
	m1 := e.manager(t, jobs(), job.WithShardRecheck(time.Hour))
	m2 := e.manager(t, jobs(), job.WithShardRecheck(time.Hour))
	start(t, m1)
	start(t, m2)
	wf := job.NewWorkflow("wf-sum").Add("src", "wf-src", job.WithArguments(3))
	var muls []string
	for k := range 8 {
		muls = append(muls, fmt.Sprint("mul", k))
		wf.Add(muls[k], "wf-mul", job.WithArguments(k), job.After("src"))
	}
	wf.Add("sum", "wf-sum", job.After(muls...))
	info, err := m1.ScheduleWorkflow(context.Background(), wf)
	if err != nil {
		t.Fatalf("ScheduleWorkflow: %v", err)
	}
	done := waitWorkflow(t, m2, info.ID, job.WorkflowCompleted)
	log.check(t, append(muls, "src", "sum")...)
	var total int
	if err := done.Task("sum").ResultsInto(&total); err != nil || total != 3*28 {
		t.Fatalf("sum: %d (%v), want %d", total, err, 3*28)
	}
	if len(done.Tasks) != 10 {
		t.Fatalf("GetWorkflow: %d tasks, want 10", len(done.Tasks))
	}
	for _, ti := range done.Tasks {
		if ti.Attempt != 1 {
			t.Fatalf("task %s at attempt %d, want 1: waiting counts no attempt", ti.Task, ti.Attempt)
		}
	}
}

// testWorkflowFailure: a task that fails for good cancels its dependents
// (naming it), a DepRun dependent runs anyway, and the workflow fails.
func testWorkflowFailure(t *testing.T, e *env) {
	var mu sync.Mutex
	ran := map[string]int{}
	jobs := []*job.Job{
		mustJob(t, job.WithKind("wf-bad"), job.WithMaxRetries(0), job.WithExecutor(func() error { return errors.New("disk full") })),
		mustJob(t, job.WithKind("wf-ok"), job.WithExecutor(func(ji job.Instance) {
			mu.Lock()
			ran[ji.Info().Task]++
			mu.Unlock()
		})),
	}
	m := e.manager(t, jobs, job.WithShardRecheck(time.Hour))
	start(t, m)
	info, err := m.ScheduleWorkflow(context.Background(), job.NewWorkflow("wf-fail").
		Add("bad", "wf-bad").
		Add("next", "wf-ok", job.After("bad")).
		Add("last", "wf-ok", job.After("next")).
		Add("anyway", "wf-ok", job.After("bad"), job.WithDepFailure(job.DepRun)))
	if err != nil {
		t.Fatalf("ScheduleWorkflow: %v", err)
	}
	done := waitWorkflow(t, m, info.ID, job.WorkflowFailed)
	if n := done.Task("next"); n.State != job.Canceled || !strings.Contains(n.Error, `task "bad"`) {
		t.Fatalf("next: %v %q, want canceled naming task \"bad\"", n.State, n.Error)
	}
	if l := done.Task("last"); l.State != job.Canceled {
		t.Fatalf("last: %v, want canceled", l.State)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran["anyway"] != 1 || ran["next"] != 0 || ran["last"] != 0 {
		t.Fatalf("runs %v, want anyway once and no other", ran)
	}
}

// testWorkflowAddTasks: a task adds tasks to its workflow; its dependent
// waits for them and reads their results in the order added.
func testWorkflowAddTasks(t *testing.T, e *env) {
	var got []int
	jobs := []*job.Job{
		mustJob(t, job.WithKind("wf-scan"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
			var tasks []*job.TaskSpec
			for i := range 5 {
				tasks = append(tasks, job.NewTask(fmt.Sprint("f", i), "wf-sq", job.WithArguments(i)))
			}
			return job.AddTasks(ctx, ji, tasks...)
		})),
		mustJob(t, job.WithKind("wf-sq"), job.WithExecutor(func(i int) int { return i * i })),
		mustJob(t, job.WithKind("wf-collect"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
			return job.AddedResultsInto(ctx, ji, "scan", &got)
		})),
	}
	m := e.manager(t, jobs, job.WithShardRecheck(time.Hour))
	start(t, m)
	info, err := m.ScheduleWorkflow(context.Background(), job.NewWorkflow("wf-add").
		Add("scan", "wf-scan").
		Add("collect", "wf-collect", job.After("scan")))
	if err != nil {
		t.Fatalf("ScheduleWorkflow: %v", err)
	}
	done := waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
	if want := []int{0, 1, 4, 9, 16}; !slices.Equal(got, want) {
		t.Fatalf("collect read %v, want %v", got, want)
	}
	if len(done.Tasks) != 7 {
		t.Fatalf("GetWorkflow: %d tasks, want 7", len(done.Tasks))
	}
}

package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
)

// wfStepper counts the runs of the "wf.step" executor per task.
type wfStepper struct {
	mu   sync.Mutex
	runs map[string]int
	n    atomic.Int64
}

func (w *wfStepper) job(t *testing.T) *job.Job {
	j, err := job.NewJob(job.WithKind("wf.step"), job.WithExecutor(func(ji job.Instance, arg string) error {
		w.mu.Lock()
		w.runs[ji.Info().Task]++
		w.mu.Unlock()
		w.n.Add(1)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func wfManagerOn(t *testing.T, s store.Store, j *job.Job, recheck time.Duration) *job.Manager {
	t.Helper()
	m, err := job.NewManager(job.WithStore(s), job.WithPollInterval(50*time.Millisecond), job.WithShardRecheck(recheck))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
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
	return m
}

// bigWorkflow is a workflow of roots tasks without dependencies, each
// with a dependent, all joined by "last"; big of the roots carry an
// argument of bigArg bytes.
func bigWorkflow(id string, roots, big, bigArg int) *job.Workflow {
	wf := job.NewWorkflow("big", job.WithWorkflowID(id))
	var seconds []string
	for i := range roots {
		arg := "x"
		if i >= roots-big {
			arg = strings.Repeat("y", bigArg)
		}
		wf.Add(fmt.Sprintf("r%d", i), "wf.step", job.WithArguments(arg))
		wf.Add(fmt.Sprintf("s%d", i), "wf.step", job.WithArguments("x"), job.After(fmt.Sprintf("r%d", i)))
		seconds = append(seconds, fmt.Sprintf("s%d", i))
	}
	wf.Add("last", "wf.step", job.WithArguments("x"), job.After(seconds...))
	return wf
}

// TestScheduleWorkflowWholeOrNothing: a workflow too large for one etcd
// transaction whose write fails part way (etcd refuses the transaction
// that carries its large arguments, after others were applied) runs
// nothing: it is not visible (GetWorkflow finds no workflow), and the
// tasks stored are canceled without running. A workflow of the same size
// whose write succeeds runs every task once.
func TestScheduleWorkflowWholeOrNothing(t *testing.T) {
	t.Parallel()
	// A request limit below what the store packs into one transaction
	// (1 MiB): the transaction with three 150 KB arguments is refused.
	srv := testserver.StartEtcd(t, "--max-request-bytes", "400000")
	cli := newClient(t, []string{srv.Addr})
	s, err := etcdstore.New(cli, etcdstore.WithNamespace(namespace(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := &wfStepper{runs: map[string]int{}}
	m := wfManagerOn(t, s, w.job(t), 200*time.Millisecond)
	ctx := context.Background()

	const roots = 60
	_, err = m.ScheduleWorkflow(ctx, bigWorkflow("broken", roots, 3, 150<<10))
	if err == nil {
		t.Fatal("ScheduleWorkflow with a transaction etcd refuses succeeded")
	}
	t.Logf("the failed call: %v", err)
	ids := []string{"broken"}
	for i := range roots {
		ids = append(ids, store.WorkflowTaskID("broken", fmt.Sprintf("r%d", i)), store.WorkflowTaskID("broken", fmt.Sprintf("s%d", i)))
	}
	ids = append(ids, store.WorkflowTaskID("broken", "last"))
	var stored []*store.Instance
	waitFor(t, 30*time.Second, "every task stored by the failed call ended", func() bool {
		stored, err = s.LookupInstances(ctx, &store.Query{IDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range stored {
			if !in.State.Final() {
				return false
			}
		}
		return true
	})
	if len(stored) == 0 {
		t.Fatal("the failed call stored nothing: the test did not split the write (raise roots)")
	}
	t.Logf("the failed call left %d of %d instances stored", len(stored), len(ids))
	if n := w.n.Load(); n != 0 {
		t.Fatalf("%d tasks of a workflow whose ScheduleWorkflow failed ran; want none (whole or nothing)", n)
	}
	for _, in := range stored {
		if in.ID == "broken" {
			t.Fatalf("the end of a workflow whose write failed is stored: %+v", in)
		}
		if in.State != store.Canceled {
			t.Fatalf("task %s of the failed workflow ended %s; want canceled", in.Task.GetName(), in.State)
		}
	}
	if _, err := m.GetWorkflow(ctx, "broken"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetWorkflow of the failed workflow: %v; want not found", err)
	}

	// The same size, written whole: every task runs once.
	info, err := m.ScheduleWorkflow(ctx, bigWorkflow("whole", roots, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the whole workflow completed", func() bool {
		got, err := m.GetWorkflow(ctx, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == job.WorkflowFailed || got.State == job.WorkflowCanceled {
			t.Fatalf("the whole workflow ended %s: %v", got.State, got.End.Error)
		}
		return got.State == job.WorkflowCompleted
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.runs) != 2*roots+1 {
		t.Fatalf("%d tasks ran, want %d", len(w.runs), 2*roots+1)
	}
	for name, n := range w.runs {
		if n != 1 {
			t.Fatalf("task %s ran %d times, want once", name, n)
		}
	}
}

// cutBeforeEnd is the etcd store with the connection cut, once, right
// before the request that stores a workflow's end.
type cutBeforeEnd struct {
	*etcdstore.Store
	cut atomic.Bool
}

func (s *cutBeforeEnd) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	for _, in := range p.Instances {
		if in.Task != nil && in.Task.Name == store.EndTask && s.cut.CompareAndSwap(false, true) {
			return nil, store.OutcomeUnknown(errors.New("connection cut before the request was answered"))
		}
	}
	return s.Store.Enqueue(ctx, p)
}

// TestScheduleWorkflowRepeatAfterCut: the connection cut between the
// requests of a workflow stored in parts, before its end: the tasks
// stored wait (a gate holds each back, none runs) until the call is
// repeated with the same ID, which stores the end, and the workflow then
// runs whole, each task once.
func TestScheduleWorkflowRepeatAfterCut(t *testing.T) {
	t.Parallel()
	cli := newClient(t, testserver.Etcd(t))
	es, err := etcdstore.New(cli, etcdstore.WithNamespace(namespace(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { es.Close() })
	s := &cutBeforeEnd{Store: es}
	w := &wfStepper{runs: map[string]int{}}
	// A recheck long enough that the grace (ten of them) outlasts the test.
	m := wfManagerOn(t, s, w.job(t), 2*time.Second)
	ctx := context.Background()
	const roots = 40
	_, err = m.ScheduleWorkflow(ctx, bigWorkflow("cut", roots, 0, 0))
	if !errors.Is(err, store.ErrOutcomeUnknown) || !strings.Contains(err.Error(), `WithWorkflowID("cut")`) {
		t.Fatalf("ScheduleWorkflow with the connection cut: %v; want an unknown outcome naming WithWorkflowID", err)
	}
	if _, err := m.GetWorkflow(ctx, "cut"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetWorkflow before the end is stored: %v; want not found", err)
	}
	r0 := store.WorkflowTaskID("cut", "r0")
	waitFor(t, 30*time.Second, "a first task looked for its workflow's end and waited", func() bool {
		got, err := es.LookupInstances(ctx, &store.Query{IDs: []string{r0}})
		if err != nil {
			t.Fatal(err)
		}
		return len(got) == 1 && strings.Contains(got[0].Error, "end is not stored yet")
	})
	if n := w.n.Load(); n != 0 {
		t.Fatalf("%d tasks ran before the workflow's end was stored; want none", n)
	}
	info, err := m.ScheduleWorkflow(ctx, bigWorkflow("cut", roots, 0, 0))
	if err != nil {
		t.Fatalf("the repeated ScheduleWorkflow: %v", err)
	}
	waitFor(t, 60*time.Second, "the repeated workflow completed", func() bool {
		got, err := m.GetWorkflow(ctx, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == job.WorkflowFailed || got.State == job.WorkflowCanceled {
			t.Fatalf("the repeated workflow ended %s: %v", got.State, got.End.Error)
		}
		return got.State == job.WorkflowCompleted
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.runs) != 2*roots+1 {
		t.Fatalf("%d tasks ran, want %d", len(w.runs), 2*roots+1)
	}
	for name, n := range w.runs {
		if n != 1 {
			t.Fatalf("task %s ran %d times, want once", name, n)
		}
	}
}

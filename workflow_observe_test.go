package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
)

// wfWatcher records the workflow events a WorkflowObserver is told.
type wfWatcher struct {
	job.NopObserver
	mu       sync.Mutex
	started  []job.WorkflowStartedEvent
	finished []job.WorkflowFinishedEvent
}

func (w *wfWatcher) WorkflowStarted(e job.WorkflowStartedEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = append(w.started, e)
}

func (w *wfWatcher) WorkflowFinished(e job.WorkflowFinishedEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.finished = append(w.finished, e)
}

func (w *wfWatcher) finishedOf(id string) *job.WorkflowFinishedEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var got *job.WorkflowFinishedEvent
	for i := range w.finished {
		if w.finished[i].ID == id {
			if got != nil {
				panic(fmt.Sprintf("workflow %s reported finished twice", id))
			}
			got = &w.finished[i]
		}
	}
	return got
}

// TestWorkflowObserver: an Observer that is a WorkflowObserver is told of
// each workflow stored (not of a repeat) and of its end once, with its
// name, state and duration, completed, failed or canceled.
func TestWorkflowObserver(t *testing.T) {
	t.Parallel()
	w := &wfWatcher{}
	ok := mustJob(t, job.WithKind("ok"), job.WithExecutor(func() {}))
	bad := mustJob(t, job.WithKind("bad"), job.WithMaxRetries(0), job.WithExecutor(func() error { return errors.New("no") }))
	block := mustJob(t, job.WithKind("block"), job.WithExecutor(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }))
	m := newManager(t, job.WithStore(newMemdb(t)), job.WithPollInterval(50*time.Millisecond), job.WithShardRecheck(time.Minute), job.WithObserver(w))
	for _, j := range []*job.Job{ok, bad, block} {
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	good, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("good", job.WithWorkflowID("good-1")).Add("a", "ok").Add("b", "ok", job.After("a")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("good", job.WithWorkflowID("good-1")).Add("a", "ok").Add("b", "ok", job.After("a"))); err != nil {
		t.Fatal(err)
	}
	failed, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("broken").Add("a", "bad").Add("b", "ok", job.After("a")))
	if err != nil {
		t.Fatal(err)
	}
	canceled, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("stuck").Add("a", "block"))
	if err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, m, good.ID, job.WorkflowCompleted)
	waitWorkflow(t, m, failed.ID, job.WorkflowFailed)
	if _, err := m.CancelWorkflow(ctx, canceled.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id, name string
		state    job.WorkflowState
	}{{good.ID, "good", job.WorkflowCompleted}, {failed.ID, "broken", job.WorkflowFailed}, {canceled.ID, "stuck", job.WorkflowCanceled}} {
		waitFor(t, "workflow "+c.name+" reported finished", func() bool { return w.finishedOf(c.id) != nil })
		e := w.finishedOf(c.id)
		if e.Name != c.name || e.State != c.state || e.Duration <= 0 || e.Duration > time.Minute {
			t.Errorf("finished %s: %+v; want name %s, state %s, a duration", c.id, e, c.name, c.state)
		}
		if c.state == job.WorkflowFailed && !strings.Contains(e.Error, `"a"`) {
			t.Errorf("failed workflow's error %q does not name task \"a\"", e.Error)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.started) != 3 || w.started[0].Name != "good" || w.started[0].Tasks != 2 {
		t.Fatalf("started: %+v; want good (2 tasks, once despite the repeat), broken, stuck", w.started)
	}
}

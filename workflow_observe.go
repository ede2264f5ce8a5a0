package job

import (
	"context"
	"time"

	"github.com/jobkit/job/store"
)

// WorkflowObserver is an optional interface of an Observer (WithObserver):
// one that implements it is told when a workflow starts and when it
// finishes (module metrics counts them per workflow name).
type WorkflowObserver interface {
	// WorkflowStarted: this manager stored a new workflow
	// (ScheduleWorkflow; a repeat of one stored already is not reported).
	WorkflowStarted(WorkflowStartedEvent)
	// WorkflowFinished: this manager recorded the end of a workflow: its
	// last task ended, or it was canceled. Each workflow is reported once,
	// by the manager that recorded its end.
	WorkflowFinished(WorkflowFinishedEvent)
}

// WorkflowStartedEvent is a workflow stored by ScheduleWorkflow.
type WorkflowStartedEvent struct {
	ID, Name string
	Tasks    int
	Time     time.Time
}

// WorkflowFinishedEvent is a workflow's end.
type WorkflowFinishedEvent struct {
	ID, Name string
	// State is WorkflowCompleted, WorkflowFailed or WorkflowCanceled.
	State WorkflowState
	// Duration is from when the workflow was stored to its end.
	Duration time.Duration
	// Error names the tasks that did not complete (failed, canceled).
	Error string
	Time  time.Time
}

// workflowObservers are the observers among obs that implement
// WorkflowObserver, each guarded as obs are.
func (obs observers) workflowObservers() []WorkflowObserver {
	var out []WorkflowObserver
	for _, o := range obs {
		if g, ok := o.(*guardedObserver); ok {
			if wo, ok := g.o.(WorkflowObserver); ok {
				out = append(out, guardedWorkflowObserver{g, wo})
			}
			continue
		}
		if wo, ok := o.(WorkflowObserver); ok {
			out = append(out, wo)
		}
	}
	return out
}

// guardedWorkflowObserver contains a WorkflowObserver's panics, as
// guardedObserver does an Observer's.
type guardedWorkflowObserver struct {
	g  *guardedObserver
	wo WorkflowObserver
}

func (g guardedWorkflowObserver) WorkflowStarted(e WorkflowStartedEvent) {
	defer g.g.contain("WorkflowStarted")
	g.wo.WorkflowStarted(e)
}

func (g guardedWorkflowObserver) WorkflowFinished(e WorkflowFinishedEvent) {
	defer g.g.contain("WorkflowFinished")
	g.wo.WorkflowFinished(e)
}

// workflowStarted tells the observers of a workflow stored.
func (obs observers) workflowStarted(id, name string, tasks int, now time.Time) {
	if len(obs) == 0 {
		return
	}
	ev := WorkflowStartedEvent{ID: id, Name: name, Tasks: tasks, Time: now}
	for _, o := range obs.workflowObservers() {
		o.WorkflowStarted(ev)
	}
}

// workflowsFinished tells the observers of the workflow ends among recs
// that reached a final state. A record the completer made holds only the
// ID, task and state: the end is read for its name, times and error.
func (m *Manager) workflowsFinished(ctx context.Context, recs []*store.Instance) {
	if len(m.cfg.obs) == 0 {
		return
	}
	var ends []*store.Instance
	var thin []string
	for _, r := range recs {
		if r.Task == nil || r.Task.Name != store.EndTask || r.ID != r.Task.Workflow || !r.State.Final() {
			continue
		}
		if r.CreatedAt.IsZero() {
			thin = append(thin, r.ID)
			continue
		}
		ends = append(ends, r)
	}
	if len(ends)+len(thin) == 0 {
		return
	}
	wos := m.cfg.obs.workflowObservers()
	if len(wos) == 0 {
		return
	}
	if len(thin) > 0 {
		got, err := m.readIDs(ctx, thin)
		if err != nil {
			m.log.Warn("workflow: reading the ends of finished workflows for the observers; they are not told", "workflows", len(thin), "err", err)
		}
		for _, r := range got {
			if r != nil && r.State.Final() {
				ends = append(ends, r)
			}
		}
	}
	now := m.clock.Now()
	for _, r := range ends {
		end := r.FinishedAt
		if end.IsZero() {
			end = now
		}
		ev := WorkflowFinishedEvent{ID: r.ID, Name: endName(r), State: endState(r.State), Duration: max(0, end.Sub(r.CreatedAt)), Error: r.Error, Time: end}
		for _, o := range wos {
			o.WorkflowFinished(ev)
		}
	}
}

// endState is the state of a workflow whose end is in final state s.
func endState(s State) WorkflowState {
	switch s {
	case store.Completed:
		return WorkflowCompleted
	case store.Canceled:
		return WorkflowCanceled
	}
	return WorkflowFailed
}

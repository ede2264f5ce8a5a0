package job

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Wide fan-ins. A task with more than fanInWidth dependencies waits for
// them through fan-in gates: gate tasks (they run no executor) of at
// most fanInWidth dependencies each, which it depends on instead. So no
// record holds more than fanInWidth dependency IDs (a 10,000-task join's
// record holds 100 IDs, not 10,000: 4 KB, not 380 KB, read at each of
// its claims), and each release and gate looks at that many. A fan-in
// gate is named "$fanin:<task>:<k>", of the task's kind and queue, one
// priority above it (so a gate whose dependencies ended runs ahead of the
// tasks still waiting in the queue, and the last one is all that is left
// when the last dependency ends); it waits for all its dependencies and completes with their
// results (in order) when they all completed, and ends Terminated, naming
// the failed ones, otherwise, so the task then follows its policy.
// GetWorkflow lists the task's own dependencies in DependsOn, and
// DependencyResultsInto finds them through the gates.

// fanInWidth is the most dependencies a task waits for directly.
const fanInWidth = 100

// fanInPrefix starts the names of fan-in gates.
const fanInPrefix = "$fanin:"

// fanInGates returns the fan-in gates of the task rec among recs, whose
// dependencies are the records at deps: it sets rec's Deps to the gates
// and each dependency's Dependents entry to its gate.
func (m *Manager) fanInGates(recs []*store.Instance, deps []int, rec *store.Instance, runAt time.Time) []*store.Instance {
	t := rec.Task
	var gates []*store.Instance
	t.Deps = t.Deps[:0]
	for lo, k := 0, 0; lo < len(deps); lo, k = lo+fanInWidth, k+1 {
		name := fanInName(t.Name, k)
		g := &store.Instance{
			ID: store.WorkflowTaskID(t.Workflow, name), Kind: rec.Kind, Queue: rec.Queue, Priority: rec.Priority + 1,
			MaxRetries: RetryForever, CreatedAt: rec.CreatedAt, RunAt: runAt, Labels: rec.Labels, Args: []byte("[]"),
			Task: &store.WorkflowTask{Workflow: t.Workflow, Name: name, OnDepFailure: DepRun, Gate: true, Dependents: []string{rec.ID}},
		}
		for _, d := range deps[lo:min(lo+fanInWidth, len(deps))] {
			g.Task.Deps = append(g.Task.Deps, recs[d].ID)
			recs[d].Task.Dependents = append(recs[d].Task.Dependents, g.ID)
		}
		t.Deps = append(t.Deps, g.ID)
		gates = append(gates, g)
	}
	return gates
}

// fanInName is the name of the k-th fan-in gate of the task named task.
func fanInName(task string, k int) string {
	return fmt.Sprintf("%s%s:%d", fanInPrefix, task, k)
}

// behindFanIn reports whether the workflow task in waits through fan-in
// gates: its first dependency is its first gate (gate IDs are derived
// from the task's name, so no read is needed to tell).
func behindFanIn(in *InstanceInfo) bool {
	return in != nil && in.Workflow != "" && len(in.DependsOn) > 0 && len(in.DependsOn) <= store.MaxTaskDeps/fanInWidth+1 &&
		in.DependsOn[0] == store.WorkflowTaskID(in.Workflow, fanInName(in.Task, 0))
}

// ResolveDependsOn sets the DependsOn of each of infos that waits through
// fan-in gates (a workflow task with more than 100 dependencies) to the
// task's own dependencies, as GetWorkflow lists them, reading the gates
// (one store read for all of infos, none when no task waits through
// gates). The records, and so GetInstance and ListInstances, name the
// gates; jobd's API and console show what this returns.
func (m *Manager) ResolveDependsOn(ctx context.Context, infos ...*InstanceInfo) error {
	var ids []string
	for _, in := range infos {
		if behindFanIn(in) {
			ids = append(ids, in.DependsOn...)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	got, err := m.readIDs(ctx, ids)
	if err != nil {
		return fmt.Errorf("job: read the fan-in gates of workflow tasks: %w", err)
	}
	gates := make(map[string]*store.Instance, len(got))
	for _, g := range got {
		if isFanIn(g) {
			gates[g.ID] = g
		}
	}
	for _, in := range infos {
		if behindFanIn(in) {
			in.DependsOn = expandFanIn(in.DependsOn, gates)
		}
	}
	return nil
}

// taskInfos returns recs, the records of a workflow, as the tasks a
// WorkflowInfo lists: the gates (its end, the joins of added tasks, the
// fan-in gates) left out, and a task's fan-in gates replaced in its
// DependsOn by its own dependencies. running reports whether a listed
// task runs or has ended.
func taskInfos(recs []*store.Instance) (tasks []*InstanceInfo, running bool) {
	gates := map[string]*store.Instance{}
	for _, r := range recs {
		if isFanIn(r) {
			gates[r.ID] = r
		}
	}
	for _, r := range recs {
		if r.Task.Gate {
			continue // their tasks say it all
		}
		ti := newInfo(r)
		ti.DependsOn = expandFanIn(ti.DependsOn, gates)
		tasks = append(tasks, ti)
		running = running || r.State == store.Processing || r.State.Final()
	}
	return tasks, running
}

// isFanIn reports whether r is a fan-in gate.
func isFanIn(r *store.Instance) bool {
	return r != nil && r.Task != nil && r.Task.Gate && strings.HasPrefix(r.Task.Name, fanInPrefix)
}

// expandFanIn returns deps with each fan-in gate among them replaced by
// its own dependencies (as gates holds them by ID).
func expandFanIn(deps []string, gates map[string]*store.Instance) []string {
	var out []string
	for i, id := range deps {
		g, ok := gates[id]
		if !ok {
			if out != nil {
				out = append(out, id)
			}
			continue
		}
		if out == nil {
			out = append(make([]string, 0, len(deps)*fanInWidth), deps[:i]...)
		}
		out = append(out, g.Task.Deps...)
	}
	if out == nil {
		return deps
	}
	return out
}

// fanInDep returns, for DependencyResultsInto of the task t whose
// dependencies gates (read) include fan-in gates, the dependency named
// name (as given, or prefixed like t's own name) when it is one of t's,
// with the dependencies that are not gates; the caller reports a name not
// found.
func (m *Manager) fanInDep(ctx context.Context, t *store.WorkflowTask, name string, gates []*store.Instance) ([]*store.Instance, error) {
	var out []*store.Instance
	mine := map[string]bool{}
	for _, g := range gates {
		switch {
		case isFanIn(g):
			mine[g.ID] = true
		case g != nil:
			out = append(out, g)
		}
	}
	cands := []string{store.WorkflowTaskID(t.Workflow, name)}
	if k := strings.LastIndexByte(t.Name, '/'); k >= 0 {
		cands = append(cands, store.WorkflowTaskID(t.Workflow, t.Name[:k+1]+name))
	}
	got, err := m.readIDs(ctx, cands)
	if err != nil {
		return nil, err
	}
	for _, d := range got {
		if d != nil && d.Task != nil && slices.ContainsFunc(d.Task.Dependents, func(id string) bool { return mine[id] }) {
			return append(out, d), nil
		}
	}
	return out, nil
}

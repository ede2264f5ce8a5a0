package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// The workflow machinery around the attempts: the gate a task with
// dependencies passes when claimed, the release of dependents when a task
// ends, and the reads (results, lookups) and writes (AddTasks, cancel).

// gateChunk is how many dependencies a gate reads per store call; it stops
// at the first call that finds one pending.
const gateChunk = 1000

// gateCursor is the mark a waiting gate leaves in its hand-back's error:
// the dependencies before it (in Deps order) had all ended, so the next
// look starts there.
var gateCursor = regexp.MustCompile(`\[from (\d+)\]$`)

// gate runs in place of the executor, first, for a workflow task with
// dependencies (a step, step.go): it reports true when the executor is to
// run in this attempt (every dependency completed, or ended under
// DepRun); otherwise it has submitted the attempt's outcome: handed back
// to wait (attempt not counted), canceled for a failed dependency, or,
// for a gate task (the end, the join of added tasks), ended with its
// dependencies' results.
func (m *Manager) gate(a *attempt) bool {
	return m.step(a, func(ctx context.Context) stepDecision {
		out, results, err, run := m.gateOutcome(ctx, a.rec)
		return stepDecision{out: out, results: results, err: err, run: run}
	})
}

// depDesc describes a dependency that did not complete.
func depDesc(d *store.Instance) string {
	s := fmt.Sprintf("task %q (%s) %s", d.Task.Name, d.ID, d.State)
	if d.Error != "" {
		s += ": " + d.Error
	}
	return s
}

// taskName returns the name of the workflow task in, or its ID.
func taskName(in *store.Instance) string {
	if in.Task != nil {
		return in.Task.Name
	}
	return in.ID
}

// gateOutcome decides what the claimed task p does (see gate).
func (m *Manager) gateOutcome(ctx context.Context, p *store.Instance) (out store.Outcome, results []any, err error, run bool) {
	t := p.Task
	if t.Parted && !t.Gate {
		if out, err, ok := m.partedGate(ctx, p); !ok { // workflow_commit.go
			return out, nil, err, false
		}
	}
	d, ok := m.gateKnown(p) // every dependency done, as this manager saw
	if !ok {
		g := &gateLook{m: m, ctx: ctx, p: p, now: m.clock.Now(), from: gateFrom(p), waitsForAll: t.Gate || t.OnDepFailure == DepRun}
		d = g.decide()
	}
	return d.out, d.results, d.err, d.run
}

// gateFrom returns the index of the first dependency the claimed task p
// still waited for at its last look (its error's cursor), else 0.
func gateFrom(p *store.Instance) int {
	if g := gateCursor.FindStringSubmatch(p.Error); g != nil {
		if n, err := strconv.Atoi(g[1]); err == nil && n >= 0 && n <= len(p.Task.Deps) {
			return n
		}
	}
	return 0
}

// gateLook is one look of gateOutcome at the dependencies of p.
type gateLook struct {
	m   *Manager
	ctx context.Context
	p   *store.Instance
	now time.Time
	// from is where the last look stopped; waitsForAll: p ends only once
	// every dependency ended (a gate, or DepRun), failed or not.
	from        int
	waitsForAll bool
}

// wait hands p back to look again from dependency from.
func (g *gateLook) wait(why string, from int) stepDecision {
	return stepDecision{out: store.Outcome{ID: g.p.ID, Attempt: g.p.Attempt, State: store.Scheduled, RunAt: g.now.Add(g.m.shards.recheck), Release: true,
		Error: fmt.Sprintf("%s [from %d]", why, from)}}
}

// failed cancels p for its failed dependencies (and, under
// DepCancelWorkflow, the workflow).
func (g *gateLook) failed(failed []string) stepDecision {
	t := g.p.Task
	err := fmt.Errorf("%w: %s", ErrDependencyFailed, strings.Join(failed, "; "))
	if t.OnDepFailure == DepCancelWorkflow {
		if cerr := g.m.cancelWorkflowTasks(g.ctx, t.Workflow, g.p.ID); cerr != nil {
			g.m.log.Warn("workflow: canceling the workflow for a failed dependency", "workflow", t.Workflow, "task", t.Name, "err", cerr)
		}
		err = fmt.Errorf("%w; the workflow is canceled (DepCancelWorkflow)", err)
	}
	return stepDecision{out: store.Outcome{ID: g.p.ID, Attempt: g.p.Attempt, State: store.Canceled, Error: err.Error()}, err: err}
}

// decide looks at the dependencies: a long list first a chunk at a time,
// then all of them with the joins of what each added, in one read.
func (g *gateLook) decide() stepDecision {
	if len(g.p.Task.Deps) > gateChunk {
		if d, done := g.walkChunks(); done {
			return d
		}
	}
	return g.readAll()
}

// walkChunks reads a long list of dependencies from the cursor on, a
// chunk at a time, up to the first chunk that holds one still pending;
// done reports that d is the decision (wait, or canceled).
func (g *gateLook) walkChunks() (d stepDecision, done bool) {
	deps := g.p.Task.Deps
	for lo := g.from; lo < len(deps); lo += gateChunk {
		got, lerr := g.m.readIDs(g.ctx, deps[lo:min(lo+gateChunk, len(deps))])
		if lerr != nil {
			return g.wait("waiting for dependencies: looking them up: "+lerr.Error(), g.from), true
		}
		var failed []string
		for k, d := range got {
			switch {
			case d == nil || !d.State.Final():
				return g.wait(fmt.Sprintf("waiting for dependencies: %d of %d ended before %q", lo+k, len(deps), taskName(orID(d, deps[lo+k]))), lo+k), true
			case d.State != store.Completed:
				failed = append(failed, depDesc(d))
			}
		}
		if len(failed) > 0 && !g.waitsForAll {
			return g.failed(failed), true
		}
	}
	return stepDecision{}, false
}

// depsState is what readAll found of the dependencies: those that
// failed, up to three still pending (quoted), and the index of the first
// pending (-1 for none).
type depsState struct {
	failed, pending []string
	first           int
}

// classify sorts deps (and joins, the joins of what each added) into a
// depsState.
func (g *gateLook) classify(deps, joins []*store.Instance) depsState {
	st := depsState{first: -1}
	pend := func(k int, what string) {
		if st.first < 0 {
			st.first = k
		}
		if len(st.pending) < 3 {
			st.pending = append(st.pending, what)
		}
	}
	for k, d := range deps {
		j := joins[k]
		switch {
		case d == nil || !d.State.Final():
			pend(k, strconv.Quote(taskName(orID(d, g.p.Task.Deps[k]))))
		case d.State != store.Completed:
			st.failed = append(st.failed, depDesc(d))
		case j == nil:
		case !j.State.Final():
			pend(k, fmt.Sprintf("the tasks %q added", d.Task.Name))
		case j.State != store.Completed:
			st.failed = append(st.failed, fmt.Sprintf("a task %q added: %s", d.Task.Name, j.Error))
		}
	}
	return st
}

// readAll reads every dependency, and the join of the tasks each added
// (AddTasks), in one read, and decides: wait, cancel, run, or (a gate)
// end with their results.
func (g *gateLook) readAll() stepDecision {
	p, t := g.p, g.p.Task
	n := len(t.Deps)
	ids := make([]string, 0, 2*n)
	ids = append(ids, t.Deps...)
	for _, id := range t.Deps {
		ids = append(ids, addedJoinID(t.Workflow, id))
	}
	all, lerr := g.m.readIDs(g.ctx, ids)
	if lerr != nil {
		return g.wait("waiting for dependencies: reading them: "+lerr.Error(), g.from)
	}
	deps, joins := all[:n], all[n:]
	st := g.classify(deps, joins)
	switch {
	case len(st.failed) > 0 && !g.waitsForAll:
		return g.failed(st.failed)
	case st.first >= 0:
		return g.wait(fmt.Sprintf("waiting for dependencies: %d of %d ended, not %s", countFinal(deps), n, strings.Join(st.pending, ", ")), st.first)
	case !t.Gate:
		return stepDecision{run: true}
	case len(st.failed) > 0:
		err := Permanent(fmt.Errorf("%w: %s", ErrDependencyFailed, strings.Join(st.failed, "; ")))
		return stepDecision{out: store.Outcome{ID: p.ID, Attempt: p.Attempt, State: store.Terminated, Error: err.Error()}, err: err}
	}
	out, results, err := gateResults(p, deps)
	return stepDecision{out: out, results: results, err: err}
}

// gateResults completes the gate task p with its dependencies' results
// (deps, completed, in Deps order).
func gateResults(p *store.Instance, deps []*store.Instance) (store.Outcome, []any, error) {
	t := p.Task
	raw := make([]json.RawMessage, len(deps))
	results := make([]any, len(deps))
	for i, d := range deps {
		r := d.Result
		if len(r) == 0 {
			r = []byte("[]")
		}
		raw[i] = r
		if v, err := decodeJSONArray(r); err == nil {
			results[i] = v
		} else {
			results[i] = r
		}
	}
	b, err := json.Marshal(raw)
	if err != nil {
		err = Permanent(fmt.Errorf("%w: gathering the results of the dependencies of task %q: %w", ErrCorrupt, t.Name, err))
		return store.Outcome{ID: p.ID, Attempt: p.Attempt, State: store.Terminated, Error: err.Error()}, nil, err
	}
	return store.Outcome{ID: p.ID, Attempt: p.Attempt, State: store.Completed, Result: b}, results, nil
}

// orID returns in, or a stand-in named id when in is nil.
func orID(in *store.Instance, id string) *store.Instance {
	if in == nil {
		return &store.Instance{ID: id}
	}
	return in
}

// countFinal counts the ended instances among recs.
func countFinal(recs []*store.Instance) int {
	n := 0
	for _, r := range recs {
		if r != nil && r.State.Final() {
			n++
		}
	}
	return n
}

// readIDs reads the instances with ids, in the order of ids (nil where
// one is not stored), MaxQueryIDs at a time.
func (m *Manager) readIDs(ctx context.Context, ids []string) ([]*store.Instance, error) {
	out := make([]*store.Instance, len(ids))
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		at[id] = i
	}
	for lo := 0; lo < len(ids); lo += store.MaxQueryIDs {
		got, err := m.store.LookupInstances(ctx, &store.Query{IDs: ids[lo:min(lo+store.MaxQueryIDs, len(ids))]})
		if err != nil {
			return nil, err
		}
		for _, in := range got {
			if i, ok := at[in.ID]; ok {
				out[i] = in
			}
		}
	}
	return out, nil
}

// instancesEnded is the completer's, the rescuer's and CancelInstance's
// callback for instances that reached a final state: the join of sharded
// tasks and the release of workflow tasks.
func (m *Manager) instancesEnded(ctx context.Context, recs []*store.Instance) {
	m.shards.shardsEnded(ctx, recs)
	m.workflowsEnded(ctx, recs)
}

// GetWorkflow reads the workflow with that ID: its end, and every task
// reached from it through dependencies and the joins of added tasks (a
// few reads by ID per level of the graph, whatever else the store holds).
// ErrNotFound when its end is not stored (never stored, or pruned).
func (m *Manager) GetWorkflow(ctx context.Context, id string) (*WorkflowInfo, error) {
	recs, end, err := m.workflowRecs(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("job: lookup workflow %s: %w", id, err)
	}
	info := &WorkflowInfo{ID: id, End: newInfo(end)}
	if names, err := decodeJSONArray(end.Args); err == nil && len(names) == 1 {
		info.Name, _ = names[0].(string)
	}
	var running bool
	info.Tasks, running = taskInfos(recs) // workflow_fanin.go
	slices.SortFunc(info.Tasks, func(a, b *InstanceInfo) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return int(a.Seq) - int(b.Seq)
	})
	switch end.State {
	case store.Completed:
		info.State = WorkflowCompleted
	case store.Canceled:
		info.State = WorkflowCanceled
	case store.Terminated, store.TimedOut:
		info.State = WorkflowFailed
	default:
		info.State = WorkflowPending
		if running {
			info.State = WorkflowRunning
		}
	}
	return info, nil
}

// workflowRecs reads the end of workflow id and its tasks (added ones and
// their joins included).
func (m *Manager) workflowRecs(ctx context.Context, id string) ([]*store.Instance, *store.Instance, error) {
	got, err := m.readIDs(ctx, []string{id})
	if err != nil {
		return nil, nil, err
	}
	end := got[0]
	if end == nil || end.Task == nil || end.Task.Name != store.EndTask {
		return nil, nil, fmt.Errorf("%w: no workflow with ID %s", ErrNotFound, id)
	}
	seen := map[string]bool{id: true}
	var out []*store.Instance
	next := slices.Clone(end.Task.Deps)
	for len(next) > 0 {
		var ids []string
		for _, n := range next {
			if !seen[n] {
				seen[n] = true
				ids = append(ids, n)
			}
		}
		next = nil
		if len(ids) == 0 {
			break
		}
		recs, err := m.readIDs(ctx, ids)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range recs {
			if r == nil || r.Task == nil || r.Task.Workflow != id {
				continue
			}
			out = append(out, r)
			next = append(next, r.Task.Deps...)
			if !r.Task.Gate {
				next = append(next, addedJoinID(id, r.ID))
			}
		}
	}
	return out, end, nil
}

// CancelWorkflow cancels the workflow with that ID: its end first (so its
// state is canceled), then every task pending or running, as
// CancelInstance cancels each. Tasks that ended are left as they are.
func (m *Manager) CancelWorkflow(ctx context.Context, id string) (*WorkflowInfo, error) {
	if err := m.cancelWorkflowTasks(ctx, id, ""); err != nil {
		return nil, fmt.Errorf("job: cancel workflow %s: %w", id, err)
	}
	return m.GetWorkflow(ctx, id)
}

// cancelWorkflowTasks cancels the end and the open tasks of workflow id,
// except the instance except (a gate canceling its own workflow).
func (m *Manager) cancelWorkflowTasks(ctx context.Context, id, except string) error {
	recs, end, err := m.workflowRecs(ctx, id)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range append([]*store.Instance{end}, recs...) {
		if r.ID == except || r.State.Final() {
			continue
		}
		if _, err := m.CancelInstance(ctx, r.ID); err != nil && !errors.Is(err, ErrFinished) && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("task %q: %w", taskName(r), err))
		}
	}
	return errors.Join(errs...)
}

// taskOf returns the workflow task ji runs, or an error naming the fix.
func taskOf(ji Instance, what string) (*instance, *store.WorkflowTask, error) {
	i, ok := ji.(*instance)
	if !ok || i.rec == nil || i.rec.Task == nil {
		return nil, nil, fmt.Errorf("%w: %s outside a workflow task; call it with the Instance a workflow task's executor received", ErrWorkflow, what)
	}
	if i.mgr == nil {
		return nil, nil, fmt.Errorf("%w: %s outside a running attempt; call it from the task's executor", ErrWorkflow, what)
	}
	return i, i.rec.Task, nil
}

// fullName resolves name, as a task's code names a sibling, to the name
// stored: as given, or prefixed like the caller's own (tasks added by
// AddTasks are named "<adder>/<name>").
func fullName(t *store.WorkflowTask, name string, have func(string) bool) string {
	if have(name) {
		return name
	}
	if k := strings.LastIndexByte(t.Name, '/'); k >= 0 && have(t.Name[:k+1]+name) {
		return t.Name[:k+1] + name
	}
	return name
}

// DependencyResultsInto decodes the results of the dependency named task
// of the workflow task ji runs into ptrs, as InstanceInfo.ResultsInto
// does:
//
//	var path string
//	err := job.DependencyResultsInto(ctx, ji, "download", &path)
//
// Call it from the executor (ji is the Instance it received). An error
// wraps ErrWorkflow when task is not a dependency of ji's task (it names
// them), ErrDependencyFailed when that dependency did not complete
// (DepRun), and ErrInvalidResults when they do not decode into ptrs.
func DependencyResultsInto(ctx context.Context, ji Instance, task string, ptrs ...any) error {
	i, t, err := taskOf(ji, "DependencyResultsInto")
	if err != nil {
		return err
	}
	deps, err := i.mgr.readIDs(ctx, t.Deps)
	if err != nil {
		return fmt.Errorf("job: results of dependency %q of task %q: %w", task, t.Name, err)
	}
	if slices.ContainsFunc(deps, isFanIn) { // a wide fan-in: through its gates (workflow_fanin.go)
		if deps, err = i.mgr.fanInDep(ctx, t, task, deps); err != nil {
			return fmt.Errorf("job: results of dependency %q of task %q: %w", task, t.Name, err)
		}
	}
	byName := map[string]*store.Instance{}
	var names []string
	for _, d := range deps {
		if d != nil && d.Task != nil {
			byName[d.Task.Name] = d
			names = append(names, strconv.Quote(d.Task.Name))
		}
	}
	d := byName[fullName(t, task, func(n string) bool { return byName[n] != nil })]
	switch {
	case d == nil:
		return fmt.Errorf("%w: task %q has no dependency %q (its dependencies: %s); add it with After(%q)", ErrWorkflow, t.Name, task, strings.Join(names, ", "), task)
	case d.State != store.Completed:
		return fmt.Errorf("%w: %s", ErrDependencyFailed, depDesc(d))
	}
	if err := decodeInto(d.Result, ptrs, "result"); err != nil {
		return fmt.Errorf("job: results of dependency %q of task %q: %w: %w", task, t.Name, ErrInvalidResults, err)
	}
	return nil
}

// AddedResultsInto decodes the first result of each task that the task
// named task added (AddTasks) and that nothing else among them depends
// on, in the order they were added, into the slice slicePtr points to:
//
//	var sizes []int64
//	err := job.AddedResultsInto(ctx, ji, "scan", &sizes)
//
// task is a dependency of ji's task, or ji's task itself once its added
// tasks completed. Errors as DependencyResultsInto's; ErrNotFound when
// task added none.
func AddedResultsInto(ctx context.Context, ji Instance, task string, slicePtr any) error {
	i, t, err := taskOf(ji, "AddedResultsInto")
	if err != nil {
		return err
	}
	ids := []string{addedJoinID(t.Workflow, store.WorkflowTaskID(t.Workflow, task))}
	if k := strings.LastIndexByte(t.Name, '/'); k >= 0 {
		ids = append(ids, addedJoinID(t.Workflow, store.WorkflowTaskID(t.Workflow, t.Name[:k+1]+task)))
	}
	got, err := i.mgr.readIDs(ctx, ids)
	if err != nil {
		return fmt.Errorf("job: results of the tasks %q added: %w", task, err)
	}
	var j *store.Instance
	for _, g := range got {
		if g != nil {
			j = g
			break
		}
	}
	switch {
	case j == nil:
		return fmt.Errorf("%w: task %q of workflow %s added no tasks", ErrNotFound, task, t.Workflow)
	case j.State != store.Completed:
		return fmt.Errorf("%w: the tasks %q added have not all completed: %s", ErrDependencyFailed, task, depDesc(j))
	}
	var each []json.RawMessage
	if err := json.Unmarshal(j.Result, &each); err != nil {
		return fmt.Errorf("job: results of the tasks %q added: %w: %v", task, ErrCorrupt, err)
	}
	firsts := make([]json.RawMessage, len(each))
	for k, r := range each {
		var vals []json.RawMessage
		if err := json.Unmarshal(r, &vals); err != nil {
			return fmt.Errorf("job: results of the tasks %q added: %w: %v", task, ErrCorrupt, err)
		}
		firsts[k] = json.RawMessage("null")
		if len(vals) > 0 {
			firsts[k] = vals[0]
		}
	}
	b, _ := json.Marshal(firsts)
	if err := json.Unmarshal(b, slicePtr); err != nil {
		return fmt.Errorf("job: results of the tasks %q added, into %T: %w: %v", task, slicePtr, ErrInvalidResults, err)
	}
	return nil
}

// AddTasks adds tasks to the workflow of the task ji runs, from its
// executor, in one store call: one per file it found, say. Each is named
// "<task>/<name>" in the workflow; After among them names each other
// (unprefixed). The tasks that depend on ji's task then wait for these
// too (for those that nothing else among them depends on), and read
// their results with AddedResultsInto. Call it once per attempt, with
// every task; a retried attempt that adds the same names again stores
// nothing twice. Errors as ScheduleWorkflow's.
func AddTasks(ctx context.Context, ji Instance, tasks ...*TaskSpec) error {
	i, t, err := taskOf(ji, "AddTasks")
	if err != nil {
		return err
	}
	if t.Gate {
		return fmt.Errorf("%w: AddTasks from a gate task", ErrWorkflow)
	}
	if !i.added.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: AddTasks called twice in one attempt of task %q; add every task in one call", ErrWorkflow, t.Name)
	}
	m := i.mgr
	recs, err := m.workflowRecords(ctx, t.Workflow, "", t.OnDepFailure, tasks, i.rec)
	if err != nil {
		i.added.Store(false)
		return fmt.Errorf("job: add tasks to workflow %s from task %q: %w", t.Workflow, t.Name, err)
	}
	m.done.stored(recs)
	res, err := m.store.Enqueue(ctx, &store.EnqueueParams{Instances: recs, Node: m.node, Now: m.clock.Now()})
	if err != nil {
		i.added.Store(false)
		return scheduleError(fmt.Sprintf("%d tasks added to workflow %s by task %q", len(tasks), t.Workflow, t.Name), "", err)
	}
	for k, r := range res {
		if r.Err != nil {
			return fmt.Errorf("job: add task %q to workflow %s: %w", recs[k].Task.Name, t.Workflow, r.Err)
		}
	}
	m.notifyLocal()
	return nil
}

// gateWaiting reports whether out is a gate's hand-back to wait for rec's
// dependencies, and from which one on (the cursor it left).
func gateWaiting(rec *store.Instance, out store.Outcome) (from int, ok bool) {
	t := rec.Task
	if t == nil || len(t.Deps) == 0 && !t.Gate {
		return 0, false
	}
	g := gateCursor.FindStringSubmatch(out.Error)
	if g == nil {
		return 0, false
	}
	from, _ = strconv.Atoi(g[1])
	return from, true
}

// gateReady reports whether p's gate would not wait now: its dependencies
// from from on have ended (or one failed, for a task that does not wait
// for all), and so have the tasks they added. A failed read reports false
// (the recheck covers it).
func (m *Manager) gateReady(ctx context.Context, p *store.Instance, from int) bool {
	t := p.Task
	waitsForAll := t.Gate || t.OnDepFailure == DepRun
	if from < 0 || from > len(t.Deps) {
		from = 0
	}
	for lo := from; len(t.Deps) > gateChunk && lo < len(t.Deps); lo += gateChunk {
		got, err := m.readIDs(ctx, t.Deps[lo:min(lo+gateChunk, len(t.Deps))])
		if err != nil {
			return false
		}
		for _, d := range got {
			switch {
			case d == nil || !d.State.Final():
				return false
			case d.State != store.Completed && !waitsForAll:
				return true
			}
		}
	}
	ids := slices.Clone(t.Deps)
	for _, id := range t.Deps {
		ids = append(ids, addedJoinID(t.Workflow, id))
	}
	all, err := m.readIDs(ctx, ids)
	if err != nil {
		return false
	}
	ready := true
	for k, d := range all[:len(t.Deps)] {
		j := all[len(t.Deps)+k]
		switch {
		case d != nil && d.State.Final() && d.State != store.Completed && !waitsForAll:
			return true // the gate cancels it now
		case d == nil || !d.State.Final() || j != nil && !j.State.Final():
			ready = false
		}
	}
	return ready
}

// rearmDependents follows the retry of the workflow task rec: the
// dependents its failure canceled (their error wraps ErrDependencyFailed),
// theirs in turn, and the workflow's end when it failed, are retried to
// wait again (due one recheck later; the retried task's end wakes them).
// Tasks that ended otherwise, and the end of a canceled workflow, are
// left as they are.
func (m *Manager) rearmDependents(ctx context.Context, rec *store.Instance) error {
	seen := map[string]bool{rec.ID: true}
	next := slices.Clone(rec.Task.Dependents)
	var rearm []string
	for len(next) > 0 {
		var ids []string
		for _, id := range next {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		next = nil
		got, err := m.readIDs(ctx, ids)
		if err != nil {
			return err
		}
		for _, d := range got {
			if d == nil || d.Task == nil {
				continue
			}
			failedByDep := (d.State == store.Canceled || d.State == store.Terminated) && strings.Contains(d.Error, ErrDependencyFailed.Error())
			if !failedByDep {
				continue
			}
			rearm = append(rearm, d.ID)
			next = append(next, d.Task.Dependents...)
		}
	}
	if len(rearm) == 0 {
		return nil
	}
	now := m.clock.Now()
	res, err := m.store.Retry(ctx, &store.RetryParams{IDs: rearm, RunAt: now.Add(m.shards.recheck), Now: now, Node: m.node})
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range res {
		if r.Err != nil && !errors.Is(r.Err, store.ErrNotFound) {
			errs = append(errs, fmt.Errorf("dependent %s: %w", r.ID, r.Err))
		}
	}
	// rec was made ready before its dependents were re-armed, so it may
	// have ended already and its wake found them still ended: the direct
	// dependents look at once (a look that finds rec pending hands back
	// without counting an attempt, and rec's end wakes them again).
	var direct []string
	for _, id := range rearm {
		if slices.Contains(rec.Task.Dependents, id) {
			direct = append(direct, id)
		}
	}
	if len(direct) > 0 {
		if err := m.store.Wake(ctx, &store.WakeParams{IDs: direct, Now: now}); err != nil {
			m.log.Warn("workflow: waking the re-armed dependents of a retried task; they look again on their own", "instance", rec.ID, "err", err)
		} else {
			m.notifyLocal()
		}
	}
	return errors.Join(errs...)
}

package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/jobkit/job/store"
)

// Workflows: named tasks with dependencies (a DAG), each an ordinary
// instance, stored together and released as their dependencies complete.
// See doc/workflows.md.

// MaxWorkflowTasks is the most tasks one workflow holds.
const MaxWorkflowTasks = store.MaxWorkflowTasks

// ErrWorkflow is wrapped by the errors that refuse a workflow before
// anything is stored: a cycle, an unknown dependency, a duplicate or bad
// task name, too many tasks.
var ErrWorkflow = errors.New("job: invalid workflow")

// ErrDependencyFailed: a dependency of a workflow task ended without
// completing, so the task was canceled (DepCancel) or its workflow was
// (DepCancelWorkflow); the error names the dependency.
var ErrDependencyFailed = errors.New("job: workflow dependency did not complete")

// DepFailure says what a workflow task does when one of its dependencies
// ends Terminated, Canceled or TimedOut (see WithDepFailure).
type DepFailure = store.DepFailure

const (
	// DepCancel cancels the task, with an error naming the dependency;
	// its own dependents are canceled in turn. The default.
	DepCancel = store.DepCancel
	// DepRun runs the task anyway once every dependency has ended; it
	// reads what completed (DependencyResultsInto fails for the others).
	DepRun = store.DepRun
	// DepCancelWorkflow cancels every task of the workflow still pending
	// or running.
	DepCancelWorkflow = store.DepCancelWorkflow
)

// WorkflowState is the state of a workflow, derived from its tasks.
type WorkflowState string

const (
	// WorkflowPending: no task has started yet.
	WorkflowPending WorkflowState = "pending"
	// WorkflowRunning: a task runs or has ended, and the workflow has not.
	WorkflowRunning WorkflowState = "running"
	// WorkflowCompleted: every task completed.
	WorkflowCompleted WorkflowState = "completed"
	// WorkflowFailed: every task has ended and one did not complete.
	WorkflowFailed WorkflowState = "failed"
	// WorkflowCanceled: the workflow was canceled (CancelWorkflow, or a
	// task's DepCancelWorkflow).
	WorkflowCanceled WorkflowState = "canceled"
)

// Workflow is a set of named tasks with dependencies, built with
// NewWorkflow and Add and stored by Manager.ScheduleWorkflow. It is not
// safe for concurrent use while it is built.
type Workflow struct {
	name      string
	id        string
	onFailure DepFailure
	tasks     []*TaskSpec
	err       error // the first bad option, reported by ScheduleWorkflow
}

// TaskSpec is one task of a workflow: a name, a kind and the options of
// its instance (WithArguments, WithQueue, WithMaxRetries, After, ...).
// Workflow.Add makes one; NewTask makes one for AddTasks.
type TaskSpec struct {
	name string
	kind string
	opts []ScheduleOption
}

// NewTask returns the task name of kind with opts, for AddTasks.
func NewTask(name, kind string, opts ...ScheduleOption) *TaskSpec {
	return &TaskSpec{name: name, kind: kind, opts: opts}
}

// WorkflowOption configures a Workflow.
type WorkflowOption interface {
	applyWorkflow(*Workflow) error
}

type workflowOption func(*Workflow) error

func (o workflowOption) applyWorkflow(wf *Workflow) error { return o(wf) }

// WithWorkflowID gives the workflow its ID instead of a new UUID. Task IDs
// derive from it (store.WorkflowTaskID), so a ScheduleWorkflow repeated
// with the same ID (after a call whose reply was lost) stores nothing
// twice and returns the workflow stored first.
func WithWorkflowID(id string) WorkflowOption {
	return workflowOption(func(wf *Workflow) error {
		if id == "" || strings.ContainsRune(id, 0) {
			return fmt.Errorf("%w: WithWorkflowID(%q); want a non-empty ID without NUL bytes", ErrInvalidOption, id)
		}
		wf.id = id
		return nil
	})
}

// depFailureOption is WithDepFailure: an option of a workflow and of a
// task alike.
type depFailureOption DepFailure

func (o depFailureOption) applyWorkflow(wf *Workflow) error {
	if err := checkDepFailure(DepFailure(o)); err != nil {
		return err
	}
	wf.onFailure = DepFailure(o)
	return nil
}

func (o depFailureOption) applySchedule(c *scheduleConfig) error {
	if err := checkDepFailure(DepFailure(o)); err != nil {
		return err
	}
	p := DepFailure(o)
	c.depFailure = &p
	return nil
}

func checkDepFailure(p DepFailure) error {
	if p > DepCancelWorkflow {
		return fmt.Errorf("%w: WithDepFailure(%d); want DepCancel, DepRun or DepCancelWorkflow", ErrInvalidOption, p)
	}
	return nil
}

// DepFailureOption is what WithDepFailure returns: an option of a whole
// workflow (NewWorkflow) and of one task (Add) alike.
type DepFailureOption interface {
	WorkflowOption
	ScheduleOption
}

// WithDepFailure sets what a task does when a dependency fails: given
// to NewWorkflow, for every task; given to Add, for that task (which
// overrides the workflow's). Defaults to DepCancel.
func WithDepFailure(p DepFailure) DepFailureOption { return depFailureOption(p) }

// After makes the task wait for the tasks named deps (of the same
// workflow, or, for AddTasks, of the same call) to complete: it runs
// when all have completed. Only workflow tasks take it; ScheduleJob
// refuses it.
func After(deps ...string) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		for _, d := range deps {
			if d == "" {
				return fmt.Errorf("%w: After with an empty task name", ErrInvalidOption)
			}
		}
		c.deps = append(c.deps, deps...)
		return nil
	})
}

// NewWorkflow returns an empty workflow named name (a label for people
// and metrics: "nightly-report"; workflows are told apart by their IDs).
// A bad option is reported by ScheduleWorkflow.
func NewWorkflow(name string, opts ...WorkflowOption) *Workflow {
	wf := &Workflow{name: name}
	for _, o := range opts {
		if o == nil {
			wf.err = cmpErr(wf.err, fmt.Errorf("%w: nil workflow option", ErrInvalidOption))
			continue
		}
		if err := o.applyWorkflow(wf); err != nil {
			wf.err = cmpErr(wf.err, err)
		}
	}
	return wf
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Add adds the task name, an instance of kind with opts (After names its
// dependencies), and returns wf. Names are unique in the workflow and do
// not contain '$'. Mistakes (a duplicate, an unknown dependency, a cycle)
// are reported by ScheduleWorkflow, before anything is stored.
func (wf *Workflow) Add(name, kind string, opts ...ScheduleOption) *Workflow {
	wf.tasks = append(wf.tasks, NewTask(name, kind, opts...))
	return wf
}

// Name returns the workflow's name.
func (wf *Workflow) Name() string { return wf.name }

// WorkflowInfo is a workflow as read from the store: its tasks and the
// state they make.
type WorkflowInfo struct {
	// ID is the workflow's ID: its tasks' IDs derive from it
	// (store.WorkflowTaskID), and its end (an instance that waits for
	// every task and ends with the workflow) has it.
	ID string
	// Name is the name given NewWorkflow.
	Name string
	// State is derived from the tasks (see WorkflowState).
	State WorkflowState
	// Tasks are the workflow's tasks, those added by tasks (AddTasks)
	// included, in the order they were stored; the end is not among
	// them.
	Tasks []*InstanceInfo
	// End is the workflow's end instance.
	End *InstanceInfo
}

// Task returns the task named name, or nil.
func (w *WorkflowInfo) Task(name string) *InstanceInfo {
	for _, t := range w.Tasks {
		if t.Task == name {
			return t
		}
	}
	return nil
}

// endTaskArgs is the arguments of a workflow's end: its name.
func endTaskArgs(name string) []byte {
	b, _ := json.Marshal([]string{name})
	return b
}

// addedJoinName is the name of the join of the tasks that the task with
// ID id added (AddTasks): derived from the ID, so a gate reads its
// dependencies and their joins in one call.
func addedJoinName(id string) string { return "$added:" + id }

// addedJoinID is the ID of the join of the tasks that task id of workflow
// wf added.
func addedJoinID(wf, id string) string { return store.WorkflowTaskID(wf, addedJoinName(id)) }

// validTaskName reports a task name a user may give.
func validTaskName(name string) error {
	switch {
	case name == "":
		return errors.New("empty task name")
	case strings.ContainsAny(name, "$\x00"):
		return fmt.Errorf("task name %q contains '$' or a NUL byte, which the engine's own tasks use; rename it", name)
	}
	return nil
}

// ScheduleWorkflow stores wf's tasks, in one store call, with the
// workflow's end: the whole workflow or nothing (in the caller's
// PostgreSQL transaction too, with pgstore.WithTx). Tasks without
// dependencies are due at once (or at their WithScheduleAt); a task with
// dependencies waits, Scheduled and without a worker, until the manager
// that ends its last dependency wakes it, and runs when all have
// completed (see WithDepFailure for when one does not). Every manager
// looks again at a waiting task after the shard recheck interval
// (WithShardRecheck), so a wake-up lost to a crash only delays it.
//
// Before anything is stored it refuses, with an error wrapping
// ErrWorkflow (or ErrUnknownKind, ErrInvalidOption, ErrInvalidArguments)
// that names the task: no tasks, more than MaxWorkflowTasks, a duplicate
// or bad name, a dependency the workflow does not have, a cycle, an
// unknown kind, arguments the kind's executor does not take, more than
// store.MaxTaskDeps dependencies or dependents of one task, and options
// a workflow task cannot have (WithShards, WithUniqueKey,
// WithIdempotencyKey, a run time on a task with dependencies).
// Schedule middleware does not run for workflow tasks.
//
// On a store that splits large writes (etcd, past its transaction size),
// the workflow is stored in parts with its end last as the commit marker:
// a call that fails part way leaves tasks that never run (they are
// canceled after ten recheck intervals) and no workflow to see; repeat it
// with the same WithWorkflowID, which stores the rest, and it runs whole.
func (m *Manager) ScheduleWorkflow(ctx context.Context, wf *Workflow) (*WorkflowInfo, error) {
	if wf == nil {
		return nil, fmt.Errorf("%w: nil workflow", ErrWorkflow)
	}
	what := fmt.Sprintf("job: schedule workflow %q", wf.name)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if wf.err != nil {
		return nil, fmt.Errorf("%s: %w", what, wf.err)
	}
	id := wf.id
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("%s: new ID: %w", what, err)
		}
		id = u.String()
	}
	recs, err := m.workflowRecords(ctx, id, wf.name, wf.onFailure, wf.tasks, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	now := m.clock.Now()
	m.done.stored(recs)
	res, err := m.enqueueWorkflow(ctx, recs, now) // workflow_commit.go
	if err == nil && len(res) != len(recs) {
		err = fmt.Errorf("store returned %d results for %d instances", len(res), len(recs))
	}
	if err != nil {
		if errors.Is(err, ErrOutcomeUnknown) {
			return nil, fmt.Errorf("%s (%s) of %d tasks: %w; part of it may be stored, and it runs only if stored whole: repeat the call with WithWorkflowID(%q), which stores the rest and nothing twice", what, id, len(wf.tasks), err, id)
		}
		return nil, scheduleError(fmt.Sprintf("workflow %q (%s) of %d tasks", wf.name, id, len(wf.tasks)), "", err)
	}
	stored := false
	for i, r := range res {
		if r.Err != nil {
			return nil, fmt.Errorf("%s: task %q: %w", what, recs[i].Task.Name, r.Err)
		}
		if !r.Existed {
			stored = true
			recs[i].State, recs[i].Seq, recs[i].UpdatedAt = store.Scheduled, r.Seq, recs[i].CreatedAt
		}
	}
	if stored {
		m.notifyLocal()
	}
	if !stored || slices.ContainsFunc(res, func(r store.EnqueueResult) bool { return r.Existed }) {
		// A repeat (WithWorkflowID): what is stored.
		return m.GetWorkflow(ctx, id)
	}
	m.cfg.obs.workflowStarted(id, wf.name, len(wf.tasks), now) // workflow_observe.go
	info := &WorkflowInfo{ID: id, Name: wf.name, State: WorkflowPending, End: newInfo(recs[len(recs)-1])}
	info.Tasks, _ = taskInfos(recs) // workflow_fanin.go
	return info, nil
}

// workflowRecords builds the records of tasks for workflow id: with its
// end when adder is nil (ScheduleWorkflow), else with the join of the
// tasks adder added (AddTasks), whose names are then prefixed by the
// adder's.
func (m *Manager) workflowRecords(ctx context.Context, id, name string, onFailure DepFailure, tasks []*TaskSpec, adder *store.Instance) ([]*store.Instance, error) {
	byName, err := indexTasks(tasks)
	if err != nil {
		return nil, err
	}
	b := &recordsBuilder{m: m, id: id, onFailure: onFailure, adder: adder, byName: byName, jobs: map[string]*Job{}, now: m.clock.Now()}
	if adder != nil {
		b.prefix = adder.Task.Name + "/"
	}
	recs := make([]*store.Instance, len(tasks))
	deps := make([][]int, len(tasks))
	for i, t := range tasks {
		if recs[i], deps[i], err = b.taskRecord(ctx, i, t); err != nil {
			return nil, err
		}
	}
	if cyc := findCycle(tasks, deps); cyc != nil {
		return nil, fmt.Errorf("%w: the dependencies make a cycle: %s; remove one of these dependencies", ErrWorkflow, strings.Join(cyc, " -> "))
	}
	fanIn, leaves, err := b.linkDependents(tasks, recs, deps)
	if err != nil {
		return nil, err
	}
	recs = append(append(recs, fanIn...), b.endGate(name, recs, leaves))
	for _, r := range recs {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("task %q: %w", r.Task.Name, err)
		}
	}
	return recs, nil
}

// indexTasks checks the count and the names of tasks and returns the
// index of each by name.
func indexTasks(tasks []*TaskSpec) (map[string]int, error) {
	switch {
	case len(tasks) == 0:
		return nil, fmt.Errorf("%w: no tasks; Add at least one", ErrWorkflow)
	case len(tasks) > MaxWorkflowTasks:
		return nil, fmt.Errorf("%w: %d tasks, more than MaxWorkflowTasks (%d); split it into workflows", ErrWorkflow, len(tasks), MaxWorkflowTasks)
	}
	byName := make(map[string]int, len(tasks))
	for i, t := range tasks {
		if t == nil {
			return nil, fmt.Errorf("%w: task %d is nil", ErrWorkflow, i)
		}
		if err := validTaskName(t.name); err != nil {
			return nil, fmt.Errorf("%w: task %d (kind %q): %v", ErrWorkflow, i, t.kind, err)
		}
		if _, dup := byName[t.name]; dup {
			return nil, fmt.Errorf("%w: two tasks are named %q; give each task its own name", ErrWorkflow, t.name)
		}
		byName[t.name] = i
	}
	return byName, nil
}

// recordsBuilder holds what workflowRecords' steps share.
type recordsBuilder struct {
	m         *Manager
	id        string
	prefix    string // the adder's name and "/" (AddTasks), else ""
	onFailure DepFailure
	adder     *store.Instance
	byName    map[string]int
	jobs      map[string]*Job // by kind, looked up once
	now       time.Time
}

// checkTaskOptions refuses the schedule options a workflow task cannot
// take.
func checkTaskOptions(t *TaskSpec, c *scheduleConfig) error {
	switch {
	case c.shards > 0:
		return fmt.Errorf("task %q: %w: WithShards in a workflow; fan out with several tasks, or AddTasks", t.name, ErrInvalidOption)
	case c.uniqueKey != "":
		return fmt.Errorf("task %q: %w: WithUniqueKey in a workflow (a duplicate would store part of it); give the workflow an ID (WithWorkflowID)", t.name, ErrInvalidOption)
	case c.idemKey != "":
		return fmt.Errorf("task %q: %w: WithIdempotencyKey in a workflow; repeat the workflow with WithWorkflowID instead", t.name, ErrInvalidOption)
	case len(c.deps) > 0 && (!c.runAt.IsZero() || c.after > 0):
		return fmt.Errorf("task %q: %w: a run time (WithScheduleAt/After) on a task with dependencies; it runs when they complete: delay a task without dependencies, or the whole workflow", t.name, ErrInvalidOption)
	case len(c.deps) > store.MaxTaskDeps:
		return fmt.Errorf("%w: task %q has %d dependencies, more than store.MaxTaskDeps (%d); join them through intermediate tasks", ErrWorkflow, t.name, len(c.deps), store.MaxTaskDeps)
	}
	return nil
}

// taskRecord builds the record of the task t, the i-th, and returns it
// with the indexes of its dependencies.
func (b *recordsBuilder) taskRecord(ctx context.Context, i int, t *TaskSpec) (*store.Instance, []int, error) {
	j, ok := b.jobs[t.kind]
	if !ok {
		var err error
		if j, err = b.m.jobFor(ctx, t.kind); err != nil {
			return nil, nil, fmt.Errorf("task %q: %w", t.name, err)
		}
		b.jobs[t.kind] = j
	}
	var c scheduleConfig
	if err := c.apply(t.opts); err != nil {
		return nil, nil, fmt.Errorf("task %q: %w", t.name, err)
	}
	if err := checkTaskOptions(t, &c); err != nil {
		return nil, nil, err
	}
	rec, err := b.m.newRecord(j, &c)
	if err != nil {
		return nil, nil, fmt.Errorf("task %q: %w", t.name, err)
	}
	rec.UniqueKey, rec.UniqueUntil = "", time.Time{} // a kind's unique policy does not apply in a workflow
	full := b.prefix + t.name
	rec.ID = store.WorkflowTaskID(b.id, full)
	policy := b.onFailure
	if c.depFailure != nil {
		policy = *c.depFailure
	}
	rec.Task = &store.WorkflowTask{Workflow: b.id, Name: full, OnDepFailure: policy}
	deps, err := b.taskDeps(i, t, c.deps, rec.Task)
	if err != nil {
		return nil, nil, err
	}
	if len(deps) > 0 {
		rec.RunAt = b.now.Add(b.m.shards.recheck) // waits; woken by its dependencies' ends
	}
	return rec, deps, nil
}

// taskDeps resolves names, the dependencies of the task t (the i-th),
// into indexes, once each, and sets tt.Deps to their IDs.
func (b *recordsBuilder) taskDeps(i int, t *TaskSpec, names []string, tt *store.WorkflowTask) ([]int, error) {
	var deps []int
	seen := map[string]bool{}
	for _, d := range names {
		k, ok := b.byName[d]
		switch {
		case !ok && b.adder != nil:
			return nil, fmt.Errorf("%w: task %q depends on %q, which is not among the tasks of this AddTasks call; added tasks depend only on each other (the tasks that depend on %q wait for all of them)", ErrWorkflow, t.name, d, b.adder.Task.Name)
		case !ok:
			return nil, fmt.Errorf("%w: task %q depends on %q, which the workflow does not have; Add it, or remove it from After", ErrWorkflow, t.name, d)
		case k == i:
			return nil, fmt.Errorf("%w: task %q depends on itself; remove it from its After", ErrWorkflow, t.name)
		case seen[d]:
			continue
		}
		seen[d] = true
		deps = append(deps, k)
		tt.Deps = append(tt.Deps, store.WorkflowTaskID(b.id, b.prefix+d))
	}
	return deps, nil
}

// linkDependents sets each record's Dependents from deps, through fan-in
// gates for a task of more than fanInWidth dependencies, and returns
// those gates and the indexes of the tasks nothing depends on (the
// leaves), refusing too many dependents or leaves.
func (b *recordsBuilder) linkDependents(tasks []*TaskSpec, recs []*store.Instance, deps [][]int) (fanIn []*store.Instance, leaves []int, err error) {
	for i := range recs {
		if len(deps[i]) > fanInWidth {
			fanIn = append(fanIn, b.m.fanInGates(recs, deps[i], recs[i], b.now.Add(b.m.shards.recheck))...) // workflow_fanin.go
			continue
		}
		for _, k := range deps[i] {
			recs[k].Task.Dependents = append(recs[k].Task.Dependents, recs[i].ID)
		}
	}
	for i, r := range recs {
		if len(r.Task.Dependents) > store.MaxTaskDeps {
			return nil, nil, fmt.Errorf("%w: task %q has %d dependents, more than store.MaxTaskDeps (%d); fan out through intermediate tasks", ErrWorkflow, tasks[i].name, len(r.Task.Dependents), store.MaxTaskDeps)
		}
		if len(r.Task.Dependents) == 0 {
			leaves = append(leaves, i)
		}
	}
	if len(leaves) > store.MaxTaskDeps {
		return nil, nil, fmt.Errorf("%w: %d tasks have no dependents, more than store.MaxTaskDeps (%d) that one end can wait for; join them through intermediate tasks", ErrWorkflow, len(leaves), store.MaxTaskDeps)
	}
	return fanIn, leaves, nil
}

// endGate returns the end (ScheduleWorkflow) or the join of added tasks
// (AddTasks): a gate that waits for the leaves, of the last leaf's kind
// and queue (so the managers that run the workflow's tasks claim it), and
// makes it each leaf's dependent.
func (b *recordsBuilder) endGate(name string, recs []*store.Instance, leaves []int) *store.Instance {
	last := recs[leaves[len(leaves)-1]]
	gate := &store.Instance{
		Kind: last.Kind, Queue: last.Queue, Priority: last.Priority, MaxRetries: RetryForever,
		CreatedAt: b.now, RunAt: b.now.Add(b.m.shards.recheck), Labels: last.Labels,
	}
	gt := &store.WorkflowTask{Workflow: b.id, OnDepFailure: DepRun, Gate: true}
	if b.adder == nil {
		gate.ID, gt.Name, gate.Args = b.id, store.EndTask, endTaskArgs(name)
	} else {
		gt.Name = addedJoinName(b.adder.ID)
		gate.ID, gate.Args = store.WorkflowTaskID(b.id, gt.Name), []byte("[]")
		gate.Kind, gate.Queue, gate.Priority, gate.Labels = b.adder.Kind, b.adder.Queue, b.adder.Priority, b.adder.Labels
		gt.Dependents = slices.Clone(b.adder.Task.Dependents)
	}
	for _, i := range leaves {
		recs[i].Task.Dependents = append(recs[i].Task.Dependents, gate.ID)
		gt.Deps = append(gt.Deps, recs[i].ID)
	}
	gate.Task = gt
	return gate
}

// findCycle returns the names along a cycle of deps, or nil.
func findCycle(tasks []*TaskSpec, deps [][]int) []string {
	const (
		unseen = iota
		open
		done
	)
	mark := make([]uint8, len(tasks))
	var path []int
	var cycle []string
	var visit func(i int) bool
	visit = func(i int) bool {
		mark[i] = open
		path = append(path, i)
		for _, k := range deps[i] {
			switch mark[k] {
			case open:
				start := slices.Index(path, k)
				for _, p := range path[start:] {
					cycle = append(cycle, tasks[p].name)
				}
				cycle = append(cycle, tasks[k].name)
				return true
			case unseen:
				if visit(k) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		return false
	}
	for i := range tasks {
		if mark[i] == unseen && visit(i) {
			// Reverse: path follows dependencies; show the order they run.
			slices.Reverse(cycle)
			return cycle
		}
	}
	return nil
}

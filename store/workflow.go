package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Workflows: named tasks with dependencies, each an ordinary instance
// whose Task field says where it stands. A task that waits for others is
// stored Scheduled with a RunAt in the future (like a sharded task's
// parent); the engine that ends one of its dependencies wakes it
// (Shards.Wake), and it looks at its dependencies when claimed. A store
// keeps the Task field as given and returns it on every read; it never
// interprets it. See doc/workflows.md.

// MaxWorkflowTasks is the most tasks one workflow holds (the engine's
// limit; a store does not count them).
const MaxWorkflowTasks = 100_000

// MaxTaskDeps is the most dependencies, and the most dependents, one task
// names (WorkflowTask.Deps, WorkflowTask.Dependents); more is ErrInvalid
// from Enqueue. It bounds the size of one record (an ID is 36 bytes): join
// wider fan-ins through intermediate tasks.
const MaxTaskDeps = 10_000

// MaxQueryIDs is the most IDs one Query.IDs names.
const MaxQueryIDs = MaxTaskDeps

// EndTask is the name of a workflow's end task: the instance, with the
// workflow's ID, that waits for every other task and ends when they
// have ended (completed when they all completed). User task names never
// contain '$', which marks the engine's own tasks.
const EndTask = "$end"

// DepFailure says what a task does when one of its dependencies ended
// without completing (Terminated, Canceled, TimedOut).
type DepFailure uint8

const (
	// DepCancel cancels the task (the default), which in turn cancels
	// its own dependents.
	DepCancel DepFailure = iota
	// DepRun runs the task anyway, once every dependency has ended.
	DepRun
	// DepCancelWorkflow cancels every task of the workflow still pending
	// or running.
	DepCancelWorkflow
)

var depFailureNames = [...]string{DepCancel: "cancel", DepRun: "run", DepCancelWorkflow: "cancel-workflow"}

// String returns the policy's name ("cancel", "run", "cancel-workflow").
func (f DepFailure) String() string {
	if int(f) < len(depFailureNames) {
		return depFailureNames[f]
	}
	return fmt.Sprintf("depfailure(%d)", uint8(f))
}

// ParseDepFailure returns the policy named name, as String spells it.
func ParseDepFailure(name string) (DepFailure, error) {
	for i, n := range depFailureNames {
		if n == name {
			return DepFailure(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown dependency failure policy %q (want cancel, run or cancel-workflow)", ErrInvalid, name)
}

// WorkflowTask is the place of an instance in a workflow (Instance.Task):
// nil for an instance that is not part of one. Never changed after
// enqueue.
type WorkflowTask struct {
	// Workflow is the workflow's ID; its end task has this ID.
	Workflow string `json:"w"`
	// Name is the task's name, unique in the workflow; the instance's ID is
	// WorkflowTaskID(Workflow, Name) (the end task's is Workflow).
	Name string `json:"n"`
	// Deps are the IDs of the instances the task waits for, in the order
	// the workflow named them.
	Deps []string `json:"d,omitempty"`
	// Dependents are the IDs of the instances woken when the task ends.
	Dependents []string `json:"e,omitempty"`
	// OnDepFailure is what the task does when a dependency fails.
	OnDepFailure DepFailure `json:"f,omitempty"`
	// Gate is set on a task that runs no executor: it ends when its
	// dependencies have ended (the end task, and the join of the tasks
	// another task added).
	Gate bool `json:"g,omitempty"`
	// Parted is set on the tasks of a workflow the engine stored in
	// several Enqueue calls (on a PartialEnqueuer that could not take it
	// in one atomic write), its end last as the commit marker: such a task
	// runs only once its workflow's end is stored, and one left without
	// an end (the call failed part way) is canceled without running.
	Parted bool `json:"p,omitempty"`
}

// PartialEnqueuer is implemented by a store whose Enqueue splits a large
// call over several atomic writes, so that a call that fails part way
// may leave part of its instances stored (etcd, past one transaction).
// EnqueueAtomic reports whether p is written in one atomic step; when it
// is not, the engine stores a workflow in parts, under a commit marker
// (WorkflowTask.Parted). A store whose Enqueue is always all or nothing
// does not implement it.
type PartialEnqueuer interface {
	EnqueueAtomic(p *EnqueueParams) bool
}

// Clone returns a deep copy of t.
func (t *WorkflowTask) Clone() *WorkflowTask {
	if t == nil {
		return nil
	}
	c := *t
	c.Deps = slices.Clone(t.Deps)
	c.Dependents = slices.Clone(t.Dependents)
	return &c
}

// Equal reports whether t and u hold the same values (nil and nil are
// equal; an empty slice equals nil).
func (t *WorkflowTask) Equal(u *WorkflowTask) bool {
	if t == nil || u == nil {
		return t == u
	}
	return t.Workflow == u.Workflow && t.Name == u.Name && slices.Equal(t.Deps, u.Deps) &&
		slices.Equal(t.Dependents, u.Dependents) && t.OnDepFailure == u.OnDepFailure && t.Gate == u.Gate && t.Parted == u.Parted
}

// MarshalTask returns t as JSON, nil for nil: the form a store that keeps
// it as one value may use (UnmarshalTask reads it back).
func MarshalTask(t *WorkflowTask) []byte {
	if t == nil {
		return nil
	}
	b, _ := json.Marshal(t) // strings and small ints only: cannot fail
	return b
}

// UnmarshalTask is the inverse of MarshalTask; nil for empty b. An error
// wraps ErrCorrupt.
func UnmarshalTask(b []byte) (*WorkflowTask, error) {
	if len(b) == 0 {
		return nil, nil
	}
	t := new(WorkflowTask)
	if err := json.Unmarshal(b, t); err != nil || t.Workflow == "" {
		return nil, fmt.Errorf("%w: stored workflow task %q", ErrCorrupt, truncate(string(b), 64))
	}
	return t, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// WorkflowTaskID returns the instance ID of the task named name in the
// workflow with ID workflow: a name-based UUID (version 5 layout), so
// every process derives the same IDs (a dependent's, a dependency's)
// without an index, and a repeated Enqueue is recognised as a repeat.
func WorkflowTaskID(workflow, name string) string {
	return nameUUID("jobkit-task\x00" + workflow + "\x00" + name)
}

// validateTask checks the workflow fields of in.
func (in *Instance) validateTask() error {
	t := in.Task
	if t == nil {
		return nil
	}
	switch {
	case t.Workflow == "":
		return fmt.Errorf("%w: instance %s has a workflow task without a workflow ID", ErrInvalid, in.ID)
	case t.Name == "":
		return fmt.Errorf("%w: instance %s of workflow %s has no task name", ErrInvalid, in.ID, t.Workflow)
	case in.Parent != "" || in.ShardCount != 0:
		return fmt.Errorf("%w: task %q of workflow %s is also part of a sharded task; a workflow task is not sharded", ErrInvalid, t.Name, t.Workflow)
	case t.Name == EndTask && in.ID != t.Workflow:
		return fmt.Errorf("%w: the end task of workflow %s has ID %s; it has the workflow's ID", ErrInvalid, t.Workflow, in.ID)
	case t.Name != EndTask && in.ID != WorkflowTaskID(t.Workflow, t.Name):
		return fmt.Errorf("%w: task %q of workflow %s has ID %s; a task's ID is store.WorkflowTaskID(workflow, name) (%s)", ErrInvalid, t.Name, t.Workflow, in.ID, WorkflowTaskID(t.Workflow, t.Name))
	case len(t.Deps) > MaxTaskDeps || len(t.Dependents) > MaxTaskDeps:
		return fmt.Errorf("%w: task %q of workflow %s has %d dependencies and %d dependents; at most MaxTaskDeps (%d) each: join wider fan-ins through intermediate tasks", ErrInvalid, t.Name, t.Workflow, len(t.Deps), len(t.Dependents), MaxTaskDeps)
	case int(t.OnDepFailure) >= len(depFailureNames):
		return fmt.Errorf("%w: task %q of workflow %s has dependency failure policy %d; want DepCancel, DepRun or DepCancelWorkflow", ErrInvalid, t.Name, t.Workflow, t.OnDepFailure)
	}
	for _, ids := range [][]string{t.Deps, t.Dependents} {
		for _, id := range ids {
			switch {
			case id == "":
				return fmt.Errorf("%w: task %q of workflow %s names an empty ID among its dependencies or dependents", ErrInvalid, t.Name, t.Workflow)
			case id == in.ID:
				return fmt.Errorf("%w: task %q of workflow %s depends on itself", ErrInvalid, t.Name, t.Workflow)
			case strings.ContainsAny(id, "\x00"):
				return fmt.Errorf("%w: task %q of workflow %s names an ID with a NUL byte", ErrInvalid, t.Name, t.Workflow)
			}
		}
	}
	return nil
}

// LookupIDs answers History.LookupInstances for a query with IDs set, for
// a store that reads instances by ID: it reads q.IDs with get and returns
// those matching q newest first (by CreatedAt, then Seq), at most q.Limit.
// An error from get is returned with what could be read.
func LookupIDs(ctx context.Context, q *Query, get GetInstances) ([]*Instance, error) {
	ids := slices.Clone(q.IDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	got, err := get(ctx, ids)
	if err != nil && got == nil {
		return nil, err
	}
	out := got[:0:0]
	for _, in := range got {
		if q.MatchInstance(in) {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b *Instance) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.Seq, a.Seq))
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, err
}

// GetWorkflow returns t.Workflow, "" for nil.
func (t *WorkflowTask) GetWorkflow() string {
	if t == nil {
		return ""
	}
	return t.Workflow
}

// GetName returns t.Name, "" for nil.
func (t *WorkflowTask) GetName() string {
	if t == nil {
		return ""
	}
	return t.Name
}

// GetDeps returns t.Deps, nil for nil.
func (t *WorkflowTask) GetDeps() []string {
	if t == nil {
		return nil
	}
	return t.Deps
}

package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/store"
)

// InstanceInfo is one scheduled run of a job as data: every field the
// store keeps of it, read at one moment. It is what ScheduleJob,
// CancelInstance, RetryInstance and the lookups (GetInstance,
// LookupInstances, ListInstances, SearchInstances) return, and what an
// executor's Instance exposes through Info. It has no way to write
// anything: logging and progress belong to the Instance handle an
// executor, a handler or a middleware receives, so nothing read back from
// the store can write into an instance's logs.
//
// An InstanceInfo is a snapshot; reading it again (GetInstance) gives
// the current state. What a lookup returns belongs to the caller, who may
// change it; the one an Instance's Info returns is shared (see Info).
type InstanceInfo struct {
	// ID is the instance's unique ID (a UUIDv7 string).
	ID string
	// Kind is the kind of the job the instance runs.
	Kind string
	// Queue is the queue the instance waits in (the job's, or the one
	// WithQueue gave ScheduleJob).
	Queue string
	// State is the instance's state when it was read.
	State State
	// Priority orders claims: higher first, then the order instances
	// became ready.
	Priority Priority
	// Attempt is 0 before the first run and 1 during the first attempt.
	Attempt int
	// MaxRetries is the retries the instance allows; RetryForever is -1.
	MaxRetries int
	// Timeout bounds one attempt; 0 means none.
	Timeout time.Duration
	// RunAt is when the instance is (or was last) due.
	RunAt time.Time
	// CreatedAt is when ScheduleJob stored the instance.
	CreatedAt time.Time
	// UpdatedAt is when the store last wrote the instance's record.
	UpdatedAt time.Time
	// FinishedAt is when the instance reached a final state, or zero.
	FinishedAt time.Time
	// UniqueKey is the key given WithUniqueKey; for a recurring tick, the
	// tick's own key ("t:<kind>:<nanoseconds>"), which no user key can
	// equal. UniqueUntil is when the key is released, zero without one.
	UniqueKey   string
	UniqueUntil time.Time
	// LimitKey is the key its per-key concurrency limits count it under
	// (WithLimitKey, WithLimitKeyFunc); "" for none.
	LimitKey string
	// Labels are the label requirements a manager's labels must satisfy
	// to run the instance (WithRequiredLabels), in their compact form
	// ("region=eu|us"), sorted; nil for none.
	Labels []string
	// Metadata holds the string pairs stored with the instance when it
	// was scheduled (WithMetadata, and what Middleware added, such as a
	// trace context); nil for none.
	Metadata map[string]string
	// Parent, ShardIndex and ShardCount place a shard of a sharded task
	// (WithShards): a shard has Parent set to the parent's ID, its index
	// (0 to count-1) and the task's shard count; the parent has Parent ""
	// and the count; any other instance has all three zero.
	Parent     string
	ShardIndex int
	ShardCount int
	// Workflow, Task and DependsOn place a workflow task (ScheduleWorkflow):
	// the workflow's ID, the task's name in it, and the IDs of the
	// instances it waits for; "" and nil for any other instance. A
	// workflow's end has the workflow's ID and Task "$end".
	Workflow  string
	Task      string
	DependsOn []string
	// Args are the arguments as stored: a JSON array. Arguments and
	// ArgumentsInto decode them.
	Args json.RawMessage
	// Result is the results of a completed instance as stored: a JSON
	// array, nil before completion. Results and ResultsInto decode it.
	Result json.RawMessage
	// Error is the last attempt's error message, "" for none.
	Error string
	// LeaseOwner is the node running the instance and LeaseUntil when its
	// lease ends, while it is Processing; "" and zero otherwise.
	LeaseOwner string
	LeaseUntil time.Time
	// CancelRequested is set by CancelInstance on a Processing instance
	// until the node running it sees the request.
	CancelRequested bool
	// Seq is the number the store gave the instance when it was stored; it
	// orders instances of equal priority and RunAt first in, first out.
	Seq uint64
}

// newInfo returns rec as an InstanceInfo, sharing rec's slices and map.
func newInfo(rec *store.Instance) *InstanceInfo {
	in := &InstanceInfo{}
	in.fill(rec)
	return in
}

// fill sets in from rec, sharing rec's slices and map.
func (in *InstanceInfo) fill(rec *store.Instance) {
	*in = InstanceInfo{
		ID: rec.ID, Kind: rec.Kind, Queue: rec.Queue, State: rec.State, Priority: Priority(rec.Priority),
		Attempt: rec.Attempt, MaxRetries: rec.MaxRetries, Timeout: rec.Timeout, RunAt: rec.RunAt,
		CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, FinishedAt: rec.FinishedAt,
		UniqueKey: userUniqueKey(rec.UniqueKey), UniqueUntil: rec.UniqueUntil, LimitKey: rec.LimitKey,
		Labels: rec.Labels, Metadata: rec.Metadata,
		Parent: rec.Parent, ShardIndex: rec.ShardIndex, ShardCount: rec.ShardCount,
		Args: rec.Args, Result: rec.Result, Error: rec.Error,
		LeaseOwner: rec.LeaseOwner, LeaseUntil: rec.LeaseUntil, CancelRequested: rec.CancelRequested, Seq: rec.Seq,
	}
	if t := rec.Task; t != nil {
		in.Workflow, in.Task, in.DependsOn = t.Workflow, t.Name, t.Deps
	}
}

// Clone returns a deep copy of in.
func (in *InstanceInfo) Clone() *InstanceInfo {
	if in == nil {
		return nil
	}
	c := *in
	c.Args = cloneRaw(in.Args)
	c.Result = cloneRaw(in.Result)
	if in.Labels != nil {
		c.Labels = append([]string(nil), in.Labels...)
	}
	c.Metadata = store.CloneMetadata(in.Metadata)
	c.DependsOn = slices.Clone(in.DependsOn)
	return &c
}

func cloneRaw(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return append(json.RawMessage{}, b...)
}

// Arguments returns the stored arguments decoded from JSON into generic
// values (numbers as json.Number), or nil when they do not decode.
// ArgumentsInto reads them into typed values.
func (in *InstanceInfo) Arguments() []any {
	v, err := decodeJSONArray(in.Args)
	if err != nil {
		return nil
	}
	return v
}

// ArgumentsInto decodes the stored arguments into ptrs, one pointer per
// argument in order, as encoding/json decodes into them; a nil entry skips
// its argument. A count that differs from the stored one, or a value that
// does not decode into its pointer, is an error wrapping
// ErrInvalidArguments that names the argument.
func (in *InstanceInfo) ArgumentsInto(ptrs ...any) error {
	if err := decodeInto(in.Args, ptrs, "argument"); err != nil {
		return fmt.Errorf("job: arguments of instance %s: %w: %w", in.ID, ErrInvalidArguments, err)
	}
	return nil
}

// Results returns the results of a completed instance, decoded as
// Arguments decodes the arguments; nil before completion. ResultsInto
// reads them into typed values.
func (in *InstanceInfo) Results() []any {
	v, err := decodeJSONArray(in.Result)
	if err != nil {
		return nil
	}
	return v
}

// ResultsInto decodes the stored results of a completed instance into
// ptrs, as ArgumentsInto does the arguments:
//
//	var sum int
//	err := info.ResultsInto(&sum)
//
// Errors wrap ErrInvalidResults; an instance that has not completed has
// no results.
func (in *InstanceInfo) ResultsInto(ptrs ...any) error {
	if err := decodeInto(in.Result, ptrs, "result"); err != nil {
		return fmt.Errorf("job: results of instance %s (%s): %w: %w", in.ID, in.State, ErrInvalidResults, err)
	}
	return nil
}

// Err returns Error as an error, or nil when there is none.
func (in *InstanceInfo) Err() error {
	if in.Error == "" {
		return nil
	}
	return errors.New(in.Error)
}

// String returns "kind/id(state, attempt n)".
func (in *InstanceInfo) String() string {
	return fmt.Sprintf("%s/%s(%s, attempt %d)", in.Kind, in.ID, in.State, in.Attempt)
}

// Instance is the handle of one attempt of an instance: what an executor
// may take as a leading parameter (beside context.Context), and what
// handlers (WithCompleteProcessor, ...) and Middleware.Run receive. It
// writes the attempt's logs and progress; Info exposes the instance's
// data. Lookups return an InstanceInfo instead, which cannot write.
//
// Methods are safe for concurrent use.
type Instance interface {
	// Info returns the instance's stored fields as they were when the
	// handle was made (the claim, for an executor's). Every call returns
	// the same InstanceInfo, shared by all holders of the handle: do not
	// change it (Clone it to keep a copy of your own).
	Info() *InstanceInfo
	// Arguments returns the arguments: inside an executor with the
	// executor's parameter types, elsewhere decoded from JSON as
	// InstanceInfo.Arguments decodes them.
	Arguments() []any
	// Results returns the results: after a local run as the executor
	// returned them, elsewhere decoded as InstanceInfo.Results decodes
	// them.
	Results() []any

	// Debugf, Infof, Warnf and Errorf write a log record for the instance's
	// current attempt to the store (batched, asynchronously), where
	// Manager.LookupInstanceLogs finds it.
	Debugf(format string, args ...any)
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
	Errorf(format string, args ...any)

	// SetProgress reports how far the running attempt got: fraction done
	// in [0, 1] (clamped; NaN counts as 0) and a short message ("3 of 7
	// files", cut to store.MaxProgressMessage bytes). It never waits for
	// the store: the latest report is written at most once per
	// ProgressInterval, and the last one before the attempt ends is
	// written before its outcome. Manager.GetProgress reads it. Outside
	// a running attempt (a handler's handle) it does nothing.
	SetProgress(fraction float64, message string)
	// Progress returns the last progress reported through SetProgress on
	// this handle (clamped as stored), or the zero Progress.
	// Manager.GetProgress reads the stored one.
	Progress() Progress
}

// instance is the Instance the manager hands out.
type instance struct {
	rec     *store.Instance
	info    InstanceInfo // rec as data, sharing its slices
	args    []any        // typed arguments, set inside an executor
	results []any        // typed results, set after a local run
	logs    logSink
	prog    *progressReporter // nil outside a running attempt
	// mgr is set in a workflow task's running attempt, for its reads and
	// AddTasks (workflow_run.go); added is set once AddTasks stored.
	mgr   *Manager
	added atomic.Bool
}

// logSink receives an instance's log records.
type logSink interface {
	appendLog(rec *store.LogRecord)
}

func newInstance(rec *store.Instance, logs logSink) *instance {
	i := &instance{rec: rec, logs: logs}
	i.info.fill(rec)
	return i
}

func (i *instance) Info() *InstanceInfo { return &i.info }

func (i *instance) Arguments() []any {
	if i.args != nil {
		return append([]any(nil), i.args...)
	}
	return i.info.Arguments()
}

func (i *instance) Results() []any {
	if i.results != nil {
		return append([]any(nil), i.results...)
	}
	return i.info.Results()
}

func (i *instance) String() string { return i.info.String() }

func (i *instance) Debugf(format string, args ...any) { i.log(store.LevelDebug, format, args) }
func (i *instance) Infof(format string, args ...any)  { i.log(store.LevelInfo, format, args) }
func (i *instance) Warnf(format string, args ...any)  { i.log(store.LevelWarn, format, args) }
func (i *instance) Errorf(format string, args ...any) { i.log(store.LevelError, format, args) }

func (i *instance) SetProgress(fraction float64, message string) {
	if i.prog != nil {
		i.prog.set(fraction, message)
	}
}

func (i *instance) Progress() Progress {
	if i.prog == nil {
		return Progress{}
	}
	p, _ := i.prog.get()
	return p
}

func (i *instance) log(level store.LogLevel, format string, args []any) {
	if i.logs == nil {
		return
	}
	i.logs.appendLog(&store.LogRecord{
		InstanceID: i.rec.ID,
		Kind:       i.rec.Kind,
		Attempt:    i.rec.Attempt,
		Level:      level,
		Message:    fmt.Sprintf(format, args...),
	})
}

// valuesToAny converts decoded argument values for Instance.Arguments.
func valuesToAny(vals []reflect.Value) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		out[i] = v.Interface()
	}
	return out
}

// recordChanged hands the state-change handler of j, if any, a handle on
// a copy of rec, changed to state: the handler's Instance never shares
// its data with an InstanceInfo returned to a caller.
func (m *Manager) recordChanged(j *Job, rec *store.Instance, state State) {
	if j != nil && j.onStateChange != nil {
		m.stateChanged(j, newInstance(rec.Clone(), m.logs), state)
	}
}

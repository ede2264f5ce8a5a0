package store

import (
	"fmt"
	"time"
)

// State is the lifecycle state of an instance.
//
//	Created → Scheduled → Processing → Completed | Terminated | Canceled | TimedOut
//
// A failed or timed-out attempt with retries left goes from Processing back
// to Scheduled.
type State uint8

// The states. The zero value is not a state, so a record that forgot to set
// one is caught.
const (
	Created    State = iota + 1 // accepted, not yet queued
	Scheduled                   // waiting in the queue until RunAt
	Processing                  // claimed by a worker that holds its lease
	Completed                   // the executor returned without error
	Terminated                  // failed with no retries left
	Canceled                    // canceled by a user or the executor
	TimedOut                    // the last attempt ran past its timeout
)

var stateNames = [...]string{
	Created:    "created",
	Scheduled:  "scheduled",
	Processing: "processing",
	Completed:  "completed",
	Terminated: "terminated",
	Canceled:   "canceled",
	TimedOut:   "timedout",
}

// String returns the lower-case name of s ("scheduled").
func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool { return s >= Created && s <= TimedOut }

// Final reports whether s is a state an instance never leaves.
func (s State) Final() bool { return s >= Completed && s <= TimedOut }

// ParseState returns the state named name, as State.String spells it.
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if n != "" && n == name {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown state %q (want one of created, scheduled, processing, completed, terminated, canceled, timedout)", ErrInvalid, name)
}

// Instance is the stored record of one job instance.
type Instance struct {
	ID    string // unique, chosen by the engine (a UUID)
	Kind  string // the registered job kind that runs it
	Queue string // the queue it waits in
	// Args are the executor's arguments, JSON-encoded as an array.
	Args     []byte
	Priority int // higher runs first
	RunAt    time.Time
	State    State
	// Attempt counts claims: 0 while never run, 1 during the first attempt.
	Attempt int
	// MaxRetries is how many times a failed attempt is retried; negative
	// means forever.
	MaxRetries int
	// Timeout bounds one attempt; 0 means none.
	Timeout time.Duration
	// UniqueKey, when set, is held by this instance until UniqueUntil.
	UniqueKey   string
	UniqueUntil time.Time
	// LeaseOwner and LeaseUntil are set while Processing.
	LeaseOwner string
	LeaseUntil time.Time
	// CancelRequested is set by Cancel on a Processing instance.
	CancelRequested bool
	// Seq is assigned by the store at enqueue; it orders instances FIFO.
	Seq        uint64
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time // set in a final state
	// Result is the JSON-encoded results of the completed attempt.
	Result []byte
	// Error is the last attempt's error message.
	Error string
	// Labels are the label requirements a claimer must satisfy to take the
	// instance ("region=eu", "region=eu|us", "region!=us", "gpu", "!gpu";
	// see LabelRequirement): a claim takes it only when ClaimParams.Labels
	// satisfy every one (LabelsSatisfy). Stores keep them as NormLabels
	// returns them (compact forms, sorted, without duplicates), and apply
	// them inside the atomic claim; none means any claimer may take it.
	Labels []string
	// Metadata holds string pairs carried with the instance from schedule to
	// every attempt, unchanged: a W3C trace context ("traceparent",
	// "tracestate"), a request ID, a tenant. Stores keep them as given and
	// return them on every read of the instance; nil and empty are the same
	// (a store may return either). Bounded by MaxMetadataPairs and
	// MaxMetadataBytes; keys are not empty.
	Metadata map[string]string
	// Parent, ShardIndex and ShardCount make a sharded task: one parent
	// instance (Parent "", ShardCount N) and N shards, each with Parent
	// set to the parent's ID, its ShardIndex (0 to N-1), the same
	// ShardCount, and the ID ShardID(Parent, ShardIndex). Each shard runs
	// and retries on its own; the parent waits, Scheduled, until its
	// shards are done (see Shards). All zero for an instance that is not
	// part of a sharded task. Stores keep them as given and return them on
	// every read; Query.Parent selects the shards of a parent.
	Parent     string
	ShardIndex int
	ShardCount int
	// Task places the instance in a workflow (see WorkflowTask): nil for
	// one that is not part of a workflow. Stores keep it as given and
	// return it on every read.
	Task *WorkflowTask
	// LimitKey partitions the concurrency limits that bound the instance
	// per key (ConcurrencyLimit.PerKey): a per-key limit counts only the
	// Processing instances it matches with the same LimitKey (a customer
	// ID, a tenant). Empty is a key of its own. At most MaxLimitKeyBytes,
	// valid UTF-8. A store that enforces per-key limits
	// (KeyedLimitEnforcer) keeps it as given and returns it on every read.
	LimitKey string
}

// Clone returns a deep copy of in, so a store can hand out records that
// callers may change.
func (in *Instance) Clone() *Instance {
	if in == nil {
		return nil
	}
	c := *in
	c.Args = cloneBytes(in.Args)
	c.Result = cloneBytes(in.Result)
	if in.Labels != nil {
		c.Labels = append([]string(nil), in.Labels...)
	}
	c.Metadata = CloneMetadata(in.Metadata)
	c.Task = in.Task.Clone()
	return &c
}

// CloneMetadata returns a copy of md, nil when md is empty, so a store can
// keep or hand out metadata its caller may change.
func CloneMetadata(md map[string]string) map[string]string {
	if len(md) == 0 {
		return nil
	}
	c := make(map[string]string, len(md))
	for k, v := range md {
		c[k] = v
	}
	return c
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// Ready reports whether in can be claimed at now.
func (in *Instance) Ready(now time.Time) bool {
	return in.State == Scheduled && !in.RunAt.After(now)
}

// RetriesLeft reports whether a failed attempt of in may be retried.
func (in *Instance) RetriesLeft() bool {
	return in.MaxRetries < 0 || in.Attempt <= in.MaxRetries
}

// HistoryRecord is one state transition of one instance.
type HistoryRecord struct {
	InstanceID string
	Kind       string
	State      State
	Attempt    int
	Time       time.Time
	Node       string // the manager that made the transition
	Error      string
	Result     []byte // JSON-encoded results (Completed only)
	// Seq orders records of the same instance; assigned by the store.
	Seq uint64
}

// LogLevel is the severity of a log record.
type LogLevel uint8

// The log levels, in increasing severity.
const (
	LevelDebug LogLevel = iota + 1
	LevelInfo
	LevelWarn
	LevelError
)

var levelNames = [...]string{LevelDebug: "debug", LevelInfo: "info", LevelWarn: "warn", LevelError: "error"}

// String returns the lower-case name of l ("info").
func (l LogLevel) String() string {
	if int(l) < len(levelNames) && levelNames[l] != "" {
		return levelNames[l]
	}
	return fmt.Sprintf("level(%d)", uint8(l))
}

// LogRecord is one message an executor wrote through its instance.
type LogRecord struct {
	InstanceID string
	Kind       string
	Attempt    int
	Level      LogLevel
	Time       time.Time
	Node       string
	Message    string
	// Seq orders records of the same instance; assigned by the store.
	Seq uint64
}

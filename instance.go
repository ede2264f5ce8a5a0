package job

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/jobkit/job/store"
)

// Instance is one scheduled run of a job: what ScheduleJob and the lookups
// return, and what an executor may take as a leading parameter to read its
// own state and write logs.
//
// An Instance is a snapshot: its state is the state when it was read.
// Methods are safe for concurrent use.
type Instance interface {
	// ID is the instance's unique ID (a UUIDv7 string).
	ID() string
	// Kind is the kind of the job the instance runs.
	Kind() string
	// Queue is the queue the instance waits in (the job's, or the one
	// WithQueue gave ScheduleJob).
	Queue() string
	// State is the instance's state when it was read.
	State() State
	// Priority orders claims: higher first, then the order instances
	// became ready.
	Priority() Priority
	// Attempt is 0 before the first run and 1 during the first attempt.
	Attempt() int
	// MaxRetries is the retries the instance allows; RetryForever is -1.
	MaxRetries() int
	// Timeout bounds one attempt; 0 means none.
	Timeout() time.Duration
	// RunAt is when the instance is (or was last) due.
	RunAt() time.Time
	// CreatedAt is when ScheduleJob stored the instance.
	CreatedAt() time.Time
	// UpdatedAt is when the store last wrote the instance's record.
	UpdatedAt() time.Time
	// FinishedAt is when the instance reached a final state, or zero.
	FinishedAt() time.Time
	// UniqueKey is the key given WithUniqueKey; for a recurring tick, the
	// tick's own key ("t:<kind>:<nanoseconds>"), which no user key can
	// equal.
	UniqueKey() string
	// Labels are the label requirements a manager's labels must satisfy
	// to run the instance (WithRequiredLabels), in their compact form
	// ("region=eu|us"), sorted; nil for none.
	Labels() []string
	// Shard returns, for a shard of a sharded task (WithShards), its index
	// (0 to count-1) and the task's shard count; for the task's parent, 0
	// and the count; for any other instance, 0 and 0. Parent tells a shard
	// from its parent.
	Shard() (index, count int)
	// Parent is the ID of the sharded task's parent a shard belongs to; ""
	// for the parent itself and for any instance that is not a shard.
	Parent() string
	// Metadata returns a copy of the string pairs stored with the
	// instance when it was scheduled (WithMetadata, and what Middleware
	// added, such as a trace context); nil for none.
	Metadata() map[string]string
	// Arguments returns the arguments. Inside an executor they have the
	// executor's parameter types; read from a lookup they are decoded from
	// JSON into generic values (numbers as json.Number). ArgumentsInto
	// reads them into typed values.
	Arguments() []any
	// ArgumentsInto decodes the stored arguments into ptrs, one pointer
	// per argument in order, as encoding/json decodes into them; a nil
	// entry skips its argument. A count that differs from the stored one,
	// or a value that does not decode into its pointer, is an error
	// wrapping ErrInvalidArguments that names the argument.
	ArgumentsInto(ptrs ...any) error
	// Results returns the results of a completed instance, as Arguments
	// decodes them. ResultsInto reads them into typed values.
	Results() []any
	// ResultsInto decodes the stored results of a completed instance into
	// ptrs, as ArgumentsInto does the arguments:
	//
	//	var sum int
	//	err := ji.ResultsInto(&sum)
	//
	// Errors wrap ErrInvalidResults; an instance that has not completed
	// has no results.
	ResultsInto(ptrs ...any) error
	// Error returns the last attempt's error, or nil.
	Error() error

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
	// written before its outcome. Manager.LookupProgress reads it. Outside
	// a running attempt (an instance from a lookup) it does nothing.
	SetProgress(fraction float64, message string)
	// Progress returns the last progress reported through SetProgress on
	// this instance (clamped as stored), or the zero Progress. An
	// instance from a lookup has none: Manager.LookupProgress reads the
	// stored one.
	Progress() Progress
}

// instance is the Instance the manager hands out.
type instance struct {
	rec     *store.Instance
	args    []any // typed arguments, set inside an executor
	results []any // typed results, set after a local run
	logs    logSink
	prog    *progressReporter // nil outside a running attempt
}

// logSink receives an instance's log records.
type logSink interface {
	appendLog(rec *store.LogRecord)
}

func newInstance(rec *store.Instance, logs logSink) *instance {
	return &instance{rec: rec, logs: logs}
}

func (i *instance) ID() string             { return i.rec.ID }
func (i *instance) Kind() string           { return i.rec.Kind }
func (i *instance) Queue() string          { return i.rec.Queue }
func (i *instance) State() State           { return i.rec.State }
func (i *instance) Priority() Priority     { return Priority(i.rec.Priority) }
func (i *instance) Attempt() int           { return i.rec.Attempt }
func (i *instance) MaxRetries() int        { return i.rec.MaxRetries }
func (i *instance) Timeout() time.Duration { return i.rec.Timeout }
func (i *instance) RunAt() time.Time       { return i.rec.RunAt }
func (i *instance) CreatedAt() time.Time   { return i.rec.CreatedAt }
func (i *instance) UpdatedAt() time.Time   { return i.rec.UpdatedAt }
func (i *instance) FinishedAt() time.Time  { return i.rec.FinishedAt }
func (i *instance) UniqueKey() string      { return userUniqueKey(i.rec.UniqueKey) }
func (i *instance) Labels() []string       { return append([]string(nil), i.rec.Labels...) }

func (i *instance) Arguments() []any {
	if i.args != nil {
		return append([]any(nil), i.args...)
	}
	v, err := decodeJSONArray(i.rec.Args)
	if err != nil {
		return nil
	}
	return v
}

func (i *instance) Results() []any {
	if i.results != nil {
		return append([]any(nil), i.results...)
	}
	v, err := decodeJSONArray(i.rec.Result)
	if err != nil {
		return nil
	}
	return v
}

func (i *instance) ArgumentsInto(ptrs ...any) error {
	if err := decodeInto(i.rec.Args, ptrs, "argument"); err != nil {
		return fmt.Errorf("job: arguments of instance %s: %w: %w", i.rec.ID, ErrInvalidArguments, err)
	}
	return nil
}

func (i *instance) ResultsInto(ptrs ...any) error {
	if err := decodeInto(i.rec.Result, ptrs, "result"); err != nil {
		return fmt.Errorf("job: results of instance %s (%s): %w: %w", i.rec.ID, i.rec.State, ErrInvalidResults, err)
	}
	return nil
}

func (i *instance) Error() error {
	if i.rec.Error == "" {
		return nil
	}
	return errors.New(i.rec.Error)
}

func (i *instance) String() string {
	return fmt.Sprintf("%s/%s(%s, attempt %d)", i.rec.Kind, i.rec.ID, i.rec.State, i.rec.Attempt)
}

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

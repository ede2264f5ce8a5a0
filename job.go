package job

import (
	"fmt"
	"time"

	"github.com/jobkit/job/schedule"
	"github.com/jobkit/job/store"
)

// DefaultQueue is the queue of a job that names none.
const DefaultQueue = "default"

// Job is a registered kind of work: an executor plus the policy its
// instances run under (priority, retries, backoff, timeout, queue), the
// handlers told of their state changes, and optionally a recurring
// schedule. Create one with NewJob and register it with Manager.RegisterJob.
type Job struct {
	kind       string
	exec       *executor
	queue      string
	priority   Priority
	maxRetries int
	backoff    Backoff
	timeout    time.Duration
	recurring  *recurrence
	// Policy that is data only (see WithDefinition, Job.Definition):
	// backoffSpec describes backoff unless backoffFunc (WithBackoff set a
	// Go func); labels are required of the node that runs an instance.
	backoffSpec store.Backoff
	backoffFunc bool
	unique      *store.UniquePolicy
	labels      []string
	description string
	// convertArgs: arguments are converted to the executor's parameter
	// types (WithArgumentConversion).
	convertArgs bool
	// The overlap and missed-tick policies of a recurring job; zero: allow
	// and skip.
	overlap       OverlapPolicy
	missed        MissedTickPolicy
	catchUpWithin time.Duration
	// The stored calendar a recurring job runs on (WithCalendar), and its
	// policy; empty: none.
	calendar  string
	calPolicy schedule.Policy

	// A job built from a stored definition naming an executor type
	// (executortypes.go): the type, and the definition's version and
	// update time it was built from. execType is "" for a Go function.
	execType   string
	defVersion int64
	defUpdated time.Time

	onStateChange func(Instance, State)
	onComplete    func(Instance, []any)
	onTerminate   func(Instance, error)
	verdict       func(Instance, error) error       // WithTerminateVerdict
	limitKey      func(args []byte) (string, error) // WithLimitKeyFunc (limitkey.go)
}

// JobOption configures a Job given to NewJob. The options of this package
// implement it; see the package documentation for how options are named.
type JobOption interface {
	applyJob(*Job) error
}

// jobOption is a JobOption that is nothing else.
type jobOption func(*Job) error

func (o jobOption) applyJob(j *Job) error { return o(j) }

// NewJob returns a job definition. WithKind and WithExecutor are required.
// Every option's error is returned, wrapped in ErrInvalidJob.
func NewJob(opts ...JobOption) (*Job, error) {
	j := &Job{queue: DefaultQueue, maxRetries: DefaultMaxRetries, backoff: defaultBackoff}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil job option", ErrInvalidJob)
		}
		if err := o.applyJob(j); err != nil {
			return nil, err
		}
	}
	if j.kind == "" {
		return nil, fmt.Errorf("%w: no kind; add job.WithKind(\"name\")", ErrInvalidJob)
	}
	if j.exec == nil {
		return nil, fmt.Errorf("%w: job %q has no executor; add job.WithExecutor(func(...){...})", ErrInvalidJob, j.kind)
	}
	if j.convertArgs && !j.exec.convert {
		e := *j.exec
		e.convert = true
		j.exec = &e
	}
	if j.recurring == nil && (j.overlap != "" || j.missed != "") {
		return nil, fmt.Errorf("%w: job %q has an overlap or missed-tick policy but no schedule; add job.WithCronSpec or job.WithInterval", ErrInvalidJob, j.kind)
	}
	if j.recurring == nil && j.calendar != "" {
		return nil, fmt.Errorf("%w: job %q runs on calendar %q but has no schedule; add job.WithCronSpec or job.WithInterval", ErrInvalidJob, j.kind, j.calendar)
	}
	if j.recurring != nil {
		if _, err := j.exec.encodeArgs(j.recurring.args); err != nil {
			return nil, fmt.Errorf("%w: recurring arguments of job %q: %w", ErrInvalidJob, j.kind, err)
		}
	}
	return j, nil
}

// Kind returns the job's kind, the name instances are scheduled by.
func (j *Job) Kind() string { return j.kind }

// Queue returns the queue the job's instances wait in.
func (j *Job) Queue() string { return j.queue }

// WithKind names the job. The kind is how instances are scheduled and
// looked up, and what every manager of a cluster must register under the
// same name to run them.
func WithKind(kind string) JobOption {
	return jobOption(func(j *Job) error {
		if kind == "" {
			return fmt.Errorf("%w: empty kind", ErrInvalidJob)
		}
		j.kind = kind
		return nil
	})
}

// WithExecutor sets the function that runs an instance. It may have any
// signature: leading context.Context and Instance parameters are injected;
// the rest are decoded from the instance's arguments (stored as JSON) into
// the declared types; a trailing error result is the attempt's error and
// the other results are kept as the instance's results.
func WithExecutor(fn any) JobOption {
	return jobOption(func(j *Job) error {
		e, err := newExecutor(fn)
		if err != nil {
			return err
		}
		j.exec = e
		return nil
	})
}

// WithBackoff sets the wait before each retry. Defaults to DefaultBackoff().
func WithBackoff(b Backoff) JobOption {
	return jobOption(func(j *Job) error {
		if b == nil {
			return fmt.Errorf("%w: nil backoff", ErrInvalidJob)
		}
		j.backoff, j.backoffFunc = b, true
		return nil
	})
}

// WithStateChangeProcessor calls fn after each state change of an instance
// that this manager made (scheduled, processing, retried, finished). While
// the manager runs, handlers run one at a time on a goroutine of their own
// (see WithHandlerQueue), so a slow or panicking handler stalls only other
// handlers, never the engine; a panic is recovered, logged and counted
// (Manager.HandlerStats). Calls run in the order the changes were queued,
// so the Scheduled call of an instance scheduled while the manager runs
// may come after its Processing call; the store's history is the ordered
// record. Before Start and after Stop, the call runs on the goroutine of
// ScheduleJob or CancelInstance.
func WithStateChangeProcessor(fn func(ji Instance, state State)) JobOption {
	return jobOption(func(j *Job) error { j.onStateChange = fn; return nil })
}

// WithCompleteProcessor calls fn with the results after an instance
// completed on this manager, on the handler goroutine (see
// WithStateChangeProcessor), after the state-change handler of that change.
func WithCompleteProcessor(fn func(ji Instance, results []any)) JobOption {
	return jobOption(func(j *Job) error { j.onComplete = fn; return nil })
}

// WithTerminateProcessor calls fn with the error after an instance ended on
// this manager as Terminated or TimedOut (no retries left). It reports
// and cannot change the outcome; go-job's terminate processor, which
// returns an error that decides it, is WithTerminateVerdict.
func WithTerminateProcessor(fn func(ji Instance, err error)) JobOption {
	return jobOption(func(j *Job) error { j.onTerminate = fn; return nil })
}

package job

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jobkit/job/store"
)

// Sentinel errors. Functions wrap them with %w and a message that names the
// job or instance and, where there is one, the fix; test with errors.Is.
var (
	// ErrUnknownKind: no job of that kind is registered with the manager.
	ErrUnknownKind = errors.New("job: unknown kind")
	// ErrDuplicateKind: a job of that kind is already registered.
	ErrDuplicateKind = errors.New("job: kind already registered")
	// ErrInvalidJob: a job definition is unusable (no kind, an executor that
	// is not a func, an invalid cron spec, a negative retry count, ...).
	ErrInvalidJob = errors.New("job: invalid job definition")
	// ErrInvalidArguments: the arguments do not fit the executor's
	// parameters (count or type), or cannot be encoded or decoded.
	ErrInvalidArguments = errors.New("job: invalid arguments")
	// ErrInvalidOption: an option has an unusable value.
	ErrInvalidOption = errors.New("job: invalid option")
	// ErrDuplicate: the instance's unique key is held by another instance;
	// ScheduleJob returns the holder alongside it.
	ErrDuplicate = store.ErrDuplicate
	// ErrNotFound: no instance has that ID.
	ErrNotFound = store.ErrNotFound
	// ErrFinished: the instance has already reached a final state.
	ErrFinished = store.ErrFinished
	// ErrInvalidResults: the stored results do not fit the values given to
	// InstanceInfo.ResultsInto (count or type).
	ErrInvalidResults = errors.New("job: results do not fit")
	// ErrCorrupt: the store holds a record it cannot decode. Lookups leave
	// such records out and report them in an error wrapping ErrCorrupt,
	// alongside the rest; a claimed one ends Terminated with the error.
	ErrCorrupt = store.ErrCorrupt
	// ErrTooLarge: the instance (its arguments, most likely) or a result
	// exceeds what the store holds in one value; see the store's options.
	ErrTooLarge = store.ErrTooLarge
	// ErrOutcomeUnknown: a ScheduleJob or ScheduleJobs call ended after
	// its write reached the store and before the store answered (its
	// ctx's deadline passed or it was canceled, the connection broke, the
	// store stalled), so the instance may or may not be stored; it may run
	// even though the call failed. The error wraps the cause too
	// (errors.Is(err, context.DeadlineExceeded) still holds) and its
	// message names the safe retry: schedule WithIdempotencyKey and repeat
	// the call with the same key, which returns the instance when the
	// first call stored it and stores it once when it did not. A call that
	// certainly stored nothing (its ctx ended before the write was sent or
	// while it waited for a batch, the store refused the connection,
	// invalid input, ErrDuplicate) never wraps it. Concurrent calls share
	// store writes (see ScheduleJob): a caller whose ctx ends while its
	// shared write is in flight gets it too, even on memdbstore, which
	// answers every write of its own before it returns and never returns
	// it. Each store's package doc says which of its errors are which. It
	// is store.ErrOutcomeUnknown.
	ErrOutcomeUnknown = store.ErrOutcomeUnknown
	// ErrPanic: the executor panicked; the error carries the panic value and
	// the stack.
	ErrPanic = errors.New("job: executor panicked")
	// ErrTimeout: the attempt ran past its timeout. It is also the cause
	// of the attempt's context then; an executor that ignores it for the
	// grace period after is abandoned (see Manager.Stuck).
	ErrTimeout = errors.New("job: attempt timed out")
	// ErrCanceled: the instance was canceled.
	ErrCanceled = errors.New("job: instance canceled")
	// ErrLeaseLost: the manager lost the attempt's lease (the store says
	// another manager rescued it), or could not renew it in time, so
	// another manager may rescue it soon; the attempt's context is canceled
	// with this cause. When the store said the lease is lost, the outcome
	// is discarded. When the lease could not be renewed in time, or the
	// node fenced itself (its heartbeats failed, see WithHeartbeat), the
	// lease may still be its own: the outcome is written then (handed back,
	// the attempt not counted, when the executor returned on this cancel),
	// and the store refuses it if lost.
	ErrLeaseLost = store.ErrLeaseLost
	// ErrShutdown: the manager is stopping; running attempts are canceled
	// with this cause and, once their executors return on it, handed back
	// to the queue (an executor that returns nil or an error of its own ran
	// to its end: its outcome is recorded).
	ErrShutdown = errors.New("job: manager shutting down")
	// ErrNotRunning: the call needs a started manager.
	ErrNotRunning = errors.New("job: manager not running")
	// ErrAlreadyStarted: Start was called twice.
	ErrAlreadyStarted = errors.New("job: manager already started")
	// ErrPermanent marks an executor error that must not be retried; see
	// Permanent.
	ErrPermanent = errors.New("job: permanent failure")
)

// Permanent wraps err so the attempt that returns it is not retried: the
// instance goes straight to Terminated, whatever retries are left.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() []error {
	return []error{e.err, ErrPermanent}
}

// scheduleError is the error of a schedule call (what names it: `"kind"`,
// `3 instances`) that failed with err. When the outcome is unknown
// (ErrOutcomeUnknown) it names the safe retry: the same idempotency key
// when the call had one (idemKey), WithIdempotencyKey otherwise.
func scheduleError(what, idemKey string, err error) error {
	if !errors.Is(err, ErrOutcomeUnknown) {
		return fmt.Errorf("job: schedule %s: %w", what, err)
	}
	if idemKey != "" {
		return fmt.Errorf("job: schedule %s: %w; the instance may or may not be stored: repeat the call with the same WithIdempotencyKey(%q), which returns the instance if it was stored and stores it once if not", what, err, idemKey)
	}
	return fmt.Errorf("job: schedule %s: %w; the instance may or may not be stored: to retry safely, schedule it WithIdempotencyKey and repeat the call with the same key, which stores it at most once", what, err)
}

// fixError is an error whose fix reads differently where its message is
// read: its message is problem, then the fix for a caller of this
// package (goFix), such as "register it with Manager.RegisterJob". A
// server that relays it to other readers (jobd's API, jobctl, the
// console) finds that fix with errors.As and an interface{ GoFix()
// string; Subject() string }, and puts the fix that fits its readers in
// its place. errors.Is matches sentinel.
type fixError struct {
	sentinel error
	subject  string // what it is about: the kind
	problem  string
	goFix    string
}

func (e *fixError) Error() string { return e.problem + "; " + e.goFix }
func (e *fixError) Unwrap() error { return e.sentinel }

// GoFix returns the part of the message that names the fix for a Go
// caller.
func (e *fixError) GoFix() string { return e.goFix }

// Subject returns what the error is about (the kind).
func (e *fixError) Subject() string { return e.subject }

// unknownKind is the error of a kind that nothing runs and nothing
// defines: problem names the kind and where it was looked for.
func unknownKind(kind, problem string) error {
	return &fixError{
		sentinel: ErrUnknownKind,
		subject:  kind,
		problem:  fmt.Sprintf("unknown kind %q: %s", kind, problem),
		goFix:    "register it with Manager.RegisterJob, or store a definition of it with Manager.PutDefinition",
	}
}

// readerError is an error with a message written for its reader that
// keeps the error it stands for (a store's, with the store's own words)
// in its chain for errors.Is and errors.As.
type readerError struct {
	msg string
	err error
}

func (e *readerError) Error() string { return e.msg }
func (e *readerError) Unwrap() error { return e.err }

// kindList lists kinds for a message: "none", or "a, b".
func kindList(kinds []string) string {
	if len(kinds) == 0 {
		return "none"
	}
	return strings.Join(kinds, ", ")
}

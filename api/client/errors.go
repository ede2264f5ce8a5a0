package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// Code is a status code of the API (connect.Code): CodeNotFound,
// CodeInvalidArgument, ... Its String is the lower-case name the Connect
// protocol uses ("not_found").
type Code = connect.Code

// The codes the API answers with; see doc/api.md for when.
const (
	CodeCanceled           = connect.CodeCanceled
	CodeUnknown            = connect.CodeUnknown
	CodeInvalidArgument    = connect.CodeInvalidArgument
	CodeDeadlineExceeded   = connect.CodeDeadlineExceeded
	CodeNotFound           = connect.CodeNotFound
	CodeAlreadyExists      = connect.CodeAlreadyExists
	CodePermissionDenied   = connect.CodePermissionDenied
	CodeResourceExhausted  = connect.CodeResourceExhausted
	CodeFailedPrecondition = connect.CodeFailedPrecondition
	CodeAborted            = connect.CodeAborted
	CodeOutOfRange         = connect.CodeOutOfRange
	CodeUnimplemented      = connect.CodeUnimplemented
	CodeInternal           = connect.CodeInternal
	CodeUnavailable        = connect.CodeUnavailable
	CodeDataLoss           = connect.CodeDataLoss
	CodeUnauthenticated    = connect.CodeUnauthenticated
)

// CodeOf returns the status code of an error a Client method returned:
// the server's code, CodeCanceled or CodeDeadlineExceeded when the ctx
// ended, CodeUnavailable when the server could not be reached, and
// CodeUnknown for any other error. It returns 0 for nil.
func CodeOf(err error) Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

// Error is an error the server answered (or the transport met), with its
// status code. It unwraps to the *connect.Error and, for the codes that
// have one, to the sentinel of package job: errors.Is(err,
// job.ErrNotFound) holds for CodeNotFound, errors.Is(err,
// job.ErrDuplicate) for CodeAlreadyExists, errors.Is(err,
// context.DeadlineExceeded) for CodeDeadlineExceeded and errors.Is(err,
// context.Canceled) for CodeCanceled (whether the client's ctx ended or
// the server answered so), and errors.Is(err, job.ErrInvalidOption) for
// an option the client refused before sending the call.
//
// A ScheduleJob or ScheduleJobs call that may or may not have stored its
// instances wraps job.ErrOutcomeUnknown, and its message names
// WithIdempotencyKey as the safe retry: the server said so (its store
// call was cut short after the write was sent; see OutcomeHeader), or the
// call's ctx ended or its connection broke after the request may have
// reached the server and before its answer came. A call that never
// connected (refused, no route) or that the server answered otherwise
// does not wrap it.
type Error struct {
	// Op is the call ("schedule", "get instance 0194…").
	Op  string
	err *connect.Error
	// also is a further error the chain holds (job.ErrInvalidOption for
	// a call the client refused before sending it, job.ErrOutcomeUnknown
	// for an ambiguous schedule).
	also error
}

// OutcomeHeader is the error metadata (a response header or trailer) by
// which the server says that a schedule failed after its write reached
// the store, so that its instance may or may not be stored; its value is
// then OutcomeUnknown.
const OutcomeHeader = "Jobkit-Outcome"

// OutcomeUnknown is the value of OutcomeHeader for an ambiguous write.
const OutcomeUnknown = "unknown"

// Error returns the call, the code and the server's message; for an
// ambiguous schedule, also the safe retry. When the message begins by
// naming the call itself, as the engine's do (`job: retry 0194…: …`),
// the call is named once; when it names what the call is about (`channel
// "ops": url …` for `create channel "ops"`, `unknown kind "x"` for a batch
// item "(x)"), the call is named without it.
func (e *Error) Error() string {
	m := e.err.Message()
	op := e.Op
	if rest, ok := strings.CutPrefix(strings.TrimPrefix(m, "job: "), op+": "); ok && op != "" {
		m = rest
	}
	if i := strings.LastIndexByte(op, ' '); i > 0 {
		if name := strings.Trim(op[i+1:], `()"`); name != "" && strings.Contains(m, strconv.Quote(name)) {
			op = op[:i]
		}
	}
	msg := fmt.Sprintf("jobkit: %s: %s: %s", op, e.err.Code(), m)
	if e.also == job.ErrOutcomeUnknown && !strings.Contains(msg, "WithIdempotencyKey") {
		msg += " (outcome unknown: the instance may or may not be stored; to retry safely, give the call WithIdempotencyKey and repeat it with the same key, which stores it at most once)"
	}
	return msg
}

// Fix returns the server's ErrorFix detail: what the error is about and
// the fix its message names for an API caller, which a client that names
// the fix its own way replaces (jobctl does); nil when the error has none.
func (e *Error) Fix() *jobkitv1.ErrorFix {
	for _, d := range e.err.Details() {
		v, err := d.Value()
		if err != nil {
			continue
		}
		if f, ok := v.(*jobkitv1.ErrorFix); ok {
			return f
		}
	}
	return nil
}

// The reasons of an ErrorFix (see Error.Fix).
const (
	// FixUnknownKind: no node runs the kind and no definition of it is
	// stored; the subject is the kind.
	FixUnknownKind = "unknown_kind"
	// FixNoToken: the call carried no token.
	FixNoToken = "no_token"
)

// Code returns the status code.
func (e *Error) Code() Code { return e.err.Code() }

// Message returns the server's message, without the code.
func (e *Error) Message() string { return e.err.Message() }

// Unwrap returns the *connect.Error and the job sentinel of its code, if
// any.
func (e *Error) Unwrap() []error {
	errs := []error{e.err}
	if s := sentinel(e.err.Code()); s != nil {
		errs = append(errs, s)
	}
	if e.also != nil {
		errs = append(errs, e.also)
	}
	return errs
}

// sentinel returns the error of package job that a code means, or nil.
func sentinel(c Code) error {
	switch c {
	case connect.CodeNotFound:
		return job.ErrNotFound
	case connect.CodeAlreadyExists:
		return job.ErrDuplicate
	case connect.CodeDeadlineExceeded:
		// The server's answer, when its own deadline (the call's, which
		// the client sends) passed first: as when the client's did.
		return context.DeadlineExceeded
	case connect.CodeCanceled:
		return context.Canceled
	}
	return nil
}

// wrap turns a call's error into an *Error naming op; nil stays nil.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		ce = connect.NewError(connect.CodeOf(err), err)
	}
	return &Error{Op: op, err: ce}
}

// invalid is the error of a call the client refuses before sending it:
// CodeInvalidArgument, and it wraps job.ErrInvalidOption.
func invalid(op string, err error) error {
	return &Error{Op: op, err: connect.NewError(connect.CodeInvalidArgument, err), also: job.ErrInvalidOption}
}

// wrapSchedule is wrap for a schedule call (ScheduleJob, ScheduleJobs):
// the error wraps job.ErrOutcomeUnknown when the instances may or may not
// be stored (see Error).
func wrapSchedule(op string, err error) error {
	e := wrap(op, err)
	if ce, ok := e.(*Error); ok && scheduleUnknown(err, ce.err) {
		ce.also = job.ErrOutcomeUnknown
	}
	return e
}

// scheduleUnknown reports whether a schedule call that failed with err
// (ce) may have stored its instances: the server said so, or no answer
// came after the request may have reached it.
func scheduleUnknown(err error, ce *connect.Error) bool {
	if ce.Meta().Get(OutcomeHeader) == OutcomeUnknown {
		return true
	}
	if len(ce.Meta()) > 0 {
		return false // the server's own answer
	}
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		return false // never connected
	}
	switch ce.Code() {
	case connect.CodeCanceled, connect.CodeDeadlineExceeded, connect.CodeUnavailable, connect.CodeUnknown:
		return true
	}
	return false
}

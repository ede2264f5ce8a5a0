package client

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
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
// job.ErrDuplicate) for CodeAlreadyExists, and errors.Is(err,
// job.ErrInvalidOption) for an option the client refused before sending
// the call.
type Error struct {
	// Op is the call ("schedule", "get instance 0194…").
	Op  string
	err *connect.Error
	// also is a further error the chain holds (job.ErrInvalidOption for
	// a call the client refused before sending it).
	also error
}

// Error returns the call and the server's message.
func (e *Error) Error() string {
	return fmt.Sprintf("jobkit: %s: %s: %s", e.Op, e.err.Code(), e.err.Message())
}

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

package server

import (
	"context"
	"errors"
	"net"
	"strings"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// codeRule maps errors wrapping one sentinel to a status code, with a hint
// added to the message when the engine's own message may not name the fix.
type codeRule struct {
	sentinel error
	code     connect.Code
	hint     string
}

// codeRules is the one table of what the engine's and the store's
// sentinels mean on the wire, most specific first: an error wrapping
// several (a bad page cursor wraps ErrInvalidOption and store.ErrInvalid)
// gets the first that matches.
var codeRules = []codeRule{
	{context.Canceled, connect.CodeCanceled, ""},
	{context.DeadlineExceeded, connect.CodeDeadlineExceeded, "give the call a longer deadline"},
	{job.ErrUnknownKind, connect.CodeNotFound, ""}, // see unknownKindFix
	{store.ErrNotFound, connect.CodeNotFound, "check the name or ID: list them to see what exists"},
	{store.ErrCursorExpired, connect.CodeInvalidArgument, "the cursor is older than what the store retains; start again without a cursor"},
	{job.ErrInvalidArguments, connect.CodeInvalidArgument, ""},
	{job.ErrInvalidOption, connect.CodeInvalidArgument, ""},
	{job.ErrInvalidJob, connect.CodeInvalidArgument, ""},
	{store.ErrInvalid, connect.CodeInvalidArgument, ""},
	{store.ErrDuplicate, connect.CodeAlreadyExists, ""}, // the engine's message names the fix
	{job.ErrDuplicateKind, connect.CodeAlreadyExists, ""},
	{store.ErrConflict, connect.CodeFailedPrecondition, ""},
	{job.ErrDefinitionInUse, connect.CodeFailedPrecondition, ""},
	{store.ErrFinished, connect.CodeFailedPrecondition, ""},    // the engine's message names the state and the fix
	{store.ErrNotFinished, connect.CodeFailedPrecondition, ""}, // likewise
	{store.ErrTooLarge, connect.CodeResourceExhausted, "send smaller arguments"},
	{store.ErrFull, connect.CodeResourceExhausted, "the store refuses writes until space is freed (prune or delete instances)"},
	{store.ErrCorrupt, connect.CodeDataLoss, ""},
	{store.ErrLeaseLost, connect.CodeAborted, "retry the call"},
	{job.ErrShutdown, connect.CodeUnavailable, "the server is shutting down; retry on another"},
	{job.ErrNotRunning, connect.CodeUnavailable, "the server's manager is not running; retry later"},
}

// toConnect turns an error of the engine into a *connect.Error with the
// code its sentinel means (codeRules) and the engine's message, followed
// by the table's hint naming the fix where the engine's messages lack one. A *connect.Error is returned as it is; an error
// reaching the network is Unavailable; anything else is Internal.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	if ce := new(connect.Error); errors.As(err, &ce) {
		return err
	}
	ce := toConnectCode(err)
	if errors.Is(err, store.ErrOutcomeUnknown) {
		ce.Meta().Set(client.OutcomeHeader, client.OutcomeUnknown) // see client.Error
	}
	return ce
}

// unknownKindFix is the fix an API caller reads for an unknown kind, in
// the place of the engine's, which names Go calls (RegisterJob).
const unknownKindFix = "create its definition (DefinitionService.CreateDefinition), or start a worker that registers it"

// goFixer is an engine error whose message ends with a fix for a Go
// caller (package job's fixError): the API names its own in its place.
type goFixer interface {
	GoFix() string
	Subject() string
}

// toConnectCode is toConnect for an error that is not a *connect.Error.
func toConnectCode(err error) *connect.Error {
	if gf := goFixer(nil); errors.Is(err, job.ErrUnknownKind) && errors.As(err, &gf) {
		msg, ok := strings.CutSuffix(err.Error(), gf.GoFix())
		if !ok { // the fix is not last: replace it where it is
			msg = strings.Replace(err.Error(), gf.GoFix(), unknownKindFix, 1)
		} else {
			msg += unknownKindFix
		}
		ce := connect.NewError(connect.CodeNotFound, errors.New(msg))
		if d, derr := connect.NewErrorDetail(&pb.ErrorFix{Reason: client.FixUnknownKind, Subject: gf.Subject(), Fix: unknownKindFix}); derr == nil {
			ce.AddDetail(d)
		}
		return ce
	}
	for _, r := range codeRules {
		if errors.Is(err, r.sentinel) {
			msg := err.Error()
			if r.hint != "" {
				msg += " (" + r.hint + ")"
			}
			return connect.NewError(r.code, errors.New(msg))
		}
	}
	if ne := net.Error(nil); errors.As(err, &ne) {
		return connect.NewError(connect.CodeUnavailable, errors.New(err.Error()+" (the server cannot reach its store; retry later)"))
	}
	return connect.NewError(connect.CodeInternal, err)
}

// invalid returns an InvalidArgument error with msg, which names the fix.
func invalid(msg string) error {
	return connect.NewError(connect.CodeInvalidArgument, errors.New(msg))
}

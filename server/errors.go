package server

import (
	"context"
	"errors"
	"net"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
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
	{job.ErrUnknownKind, connect.CodeNotFound, "over the API: create its definition with DefinitionService.CreateDefinition, or run a node that registers the kind"},
	{store.ErrNotFound, connect.CodeNotFound, "check the name or ID (list them to see what exists)"},
	{store.ErrCursorExpired, connect.CodeInvalidArgument, "the cursor is older than what the store retains; start again without a cursor"},
	{job.ErrInvalidArguments, connect.CodeInvalidArgument, ""},
	{job.ErrInvalidOption, connect.CodeInvalidArgument, ""},
	{job.ErrInvalidJob, connect.CodeInvalidArgument, ""},
	{store.ErrInvalid, connect.CodeInvalidArgument, ""},
	{store.ErrDuplicate, connect.CodeAlreadyExists, "use another unique key, or wait until the held one expires"},
	{job.ErrDuplicateKind, connect.CodeAlreadyExists, ""},
	{store.ErrConflict, connect.CodeFailedPrecondition, ""},
	{job.ErrDefinitionInUse, connect.CodeFailedPrecondition, ""},
	{store.ErrFinished, connect.CodeFailedPrecondition, "the instance has finished; retry it to run it again"},
	{store.ErrNotFinished, connect.CodeFailedPrecondition, "the instance has not finished; cancel it first or wait for it"},
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

// toConnectCode is toConnect for an error that is not a *connect.Error.
func toConnectCode(err error) *connect.Error {
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

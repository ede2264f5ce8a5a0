package redisscript

import (
	"context"
	"strings"
	"sync/atomic"
)

// FunctionClient is what a plugin's client library offers for Functions:
// a plugin wraps it in a Functions to get a Runner's Run.
type FunctionClient interface {
	// FCall calls function fn of Library (FCALL, or FCALL_RO when ro) and
	// returns its reply as Runner.Run does.
	FCall(ctx context.Context, fn string, ro bool, keys, args []string) (any, error)
	// FunctionLoad loads lib, Library() (FUNCTION LOAD REPLACE) on every primary
	// the client sends calls to.
	FunctionLoad(ctx context.Context, lib LibraryInfo) error
	// Eval runs s as a script (EVALSHA, then EVAL on NOSCRIPT): the way
	// for servers without Functions (Redis before 7.0).
	Eval(ctx context.Context, s *Script, keys, args []string) (any, error)
}

// Functions runs the scripts as functions of Library, loading it when the
// server answers that a function is not found (the first call, and again
// after a restart or FUNCTION FLUSH), as a script is sent again after
// NOSCRIPT. On a server without Functions (FCALL an unknown command, or
// FUNCTION LOAD refused to the user) it finds out once and runs every
// script with Eval from then on.
type Functions struct {
	c FunctionClient
	// evalOnly is set once the server is found to lack Functions.
	evalOnly atomic.Bool
}

// NewFunctions returns a Functions on c.
func NewFunctions(c FunctionClient) *Functions {
	Library() // names every Script's Function
	return &Functions{c: c}
}

// Run runs s with keys and args; see Functions.
func (f *Functions) Run(ctx context.Context, s *Script, keys, args []string) (any, error) {
	if f.evalOnly.Load() {
		return f.c.Eval(ctx, s, keys, args)
	}
	v, err := f.c.FCall(ctx, s.Function, s.ReadOnly, keys, args)
	if err == nil {
		return v, nil
	}
	// Only a failed call makes the closure: the usual path allocates none.
	return f.recover(ctx, v, err, func(eval bool) (any, error) {
		if eval {
			return f.c.Eval(ctx, s, keys, args)
		}
		return f.c.FCall(ctx, s.Function, s.ReadOnly, keys, args)
	})
}

// recover follows up a call that failed with err (v its reply): on a
// server without Functions it runs the script with Eval from then on
// (call(true)); a library the server lacks is loaded and the call made
// again (call(false)), a few times, as a FUNCTION FLUSH by someone else
// between the two (or a failover to a primary without the library) is met
// by loading again, each reload costing one round trip.
func (f *Functions) recover(ctx context.Context, v any, err error, call func(eval bool) (any, error)) (any, error) {
	switch {
	case noFunctions(err):
		f.evalOnly.Store(true)
		return call(true)
	case !functionNotFound(err):
		return v, err
	}
	for range loadAttempts {
		if err := f.c.FunctionLoad(ctx, Library()); err != nil {
			if noFunctions(err) {
				f.evalOnly.Store(true)
				return call(true)
			}
			return nil, err
		}
		if v, err = call(false); err == nil || !functionNotFound(err) {
			return v, err
		}
	}
	return v, err
}

// loadAttempts bounds the loads of one Run that keep finding the library
// gone.
const loadAttempts = 3

// functionNotFound reports the server's answer to an FCALL of a function
// it does not have ("ERR Function not found").
func functionNotFound(err error) bool {
	return strings.Contains(err.Error(), "Function not found")
}

// noFunctions reports a server without FCALL or FUNCTION (Redis before
// 7.0: "ERR unknown command 'FCALL'...") or a user the server's ACL
// refuses them ("NOPERM ... the 'fcall' command").
func noFunctions(err error) bool {
	msg := strings.ToLower(err.Error())
	return (strings.Contains(msg, "unknown command") || strings.Contains(msg, "noperm")) &&
		(strings.Contains(msg, "fcall") || strings.Contains(msg, "function"))
}

package store

import "errors"

// Sentinel errors of the contract. Plugins wrap them with %w and a message
// that names the instance and, where there is one, the fix.
var (
	// ErrNotFound: no instance has the given ID.
	ErrNotFound = errors.New("store: instance not found")
	// ErrDuplicate: the unique key is held by another instance.
	ErrDuplicate = errors.New("store: unique key held by another instance")
	// ErrLeaseLost: the attempt is no longer the caller's (its lease expired
	// and was rescued, or it was finished or canceled already).
	ErrLeaseLost = errors.New("store: lease lost")
	// ErrFinished: the instance is already in a final state.
	ErrFinished = errors.New("store: instance already finished")
	// ErrInvalid: the parameters break the contract (a missing ID, a
	// non-positive limit, an unknown state).
	ErrInvalid = errors.New("store: invalid parameters")
	// ErrCorrupt: a stored record cannot be decoded. The error names the
	// record; the rest of the store keeps working.
	ErrCorrupt = errors.New("store: undecodable record")
	// ErrTooLarge: a record exceeds what the store can hold in one value.
	ErrTooLarge = errors.New("store: record too large")
	// ErrFull: the store refuses writes because it is out of space (Redis
	// at maxmemory with the noeviction policy, etcd over its space quota).
	// The call that returns it changed nothing. It passes once the store
	// has room again (retention, a larger limit, another eviction policy);
	// meanwhile the engine stops claiming, since it could not record what
	// it runs.
	ErrFull = errors.New("store: out of space, writes refused")
	// ErrConflict: a compare-and-set did not hold (the record is not at
	// the version the caller read, or exists when it should not); nothing
	// changed. Read the record again and retry.
	ErrConflict = errors.New("store: version conflict")
	// ErrOutcomeUnknown: a write ended after it was sent and before its
	// answer came (the ctx's deadline passed or it was canceled, the
	// connection broke, the server stalled), so the store may or may not
	// have applied it. The error wraps the cause as well
	// (context.DeadlineExceeded, a network error). An Enqueue that
	// returns it is settled by repeating it with the same instance IDs: a
	// repeat stores nothing twice (Existed) and stores what the first did
	// not. A write that certainly changed nothing never wraps it: its ctx
	// ended before anything was sent, the connection was refused before
	// the request was written, the parameters were invalid, or the server
	// answered with an error. Each plugin's doc says which of its errors
	// are which; see OutcomeUnknown.
	ErrOutcomeUnknown = errors.New("store: outcome unknown, the write may or may not have been applied")
)

// OutcomeUnknown returns err marked as an ambiguous write: an error whose
// message is err's followed by what it means, and which wraps both err
// (so errors.Is(e, context.DeadlineExceeded) still holds when err wraps
// it) and ErrOutcomeUnknown. It returns nil for nil, and err itself when
// err is marked already.
func OutcomeUnknown(err error) error {
	if err == nil || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return &outcomeUnknown{err}
}

type outcomeUnknown struct{ err error }

func (e *outcomeUnknown) Error() string {
	return e.err.Error() + " (outcome unknown: the write was sent and may have been applied)"
}

func (e *outcomeUnknown) Unwrap() []error { return []error{e.err, ErrOutcomeUnknown} }

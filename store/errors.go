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
)

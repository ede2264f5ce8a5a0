package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotFinished: the operation needs an instance in a final state
// (Completed, Terminated, Canceled, TimedOut) and the instance is still
// Scheduled or Processing. Cancel it first, or wait for it to finish.
var ErrNotFinished = errors.New("store: instance not finished")

// Admin is what an operator does to stored instances beyond Cancel: run a
// final instance again, and remove instances. Both take many IDs per call
// and answer per ID, in the order given; an ID given twice is answered
// twice (the second answer says what the first did: Retry reports
// ErrNotFinished, Delete ErrNotFound). Each ID's change is atomic; the
// call as a whole is not (a store may apply the IDs in several steps), so
// an error returned for the whole call may come after some IDs were
// applied.
type Admin interface {
	// Retry moves final instances (Completed, Terminated, Canceled,
	// TimedOut) back to Scheduled at p.RunAt, to run again like a new
	// attempt. FinishedAt, Result and Error are cleared, and a history
	// record (State Scheduled, Node p.Node, Error "retried by <node>") is
	// appended. With p.ResetAttempts the attempt count goes back to 0, so
	// the instance gets its full MaxRetries again; without it the count is
	// kept, and the next attempt is Attempt+1: an instance that had used up
	// its retries still runs that one attempt (a retry always runs at
	// least once), and when that attempt fails it ends Terminated with no
	// further retry.
	//
	// The instance keeps its ID, Seq, CreatedAt, queue, priority and
	// arguments. A unique key is neither checked nor taken again: Retry
	// runs the same instance again, it schedules no new one, so it succeeds
	// even when another instance holds the key now; the instance keeps its
	// UniqueKey and UniqueUntil as stored. A notifying store wakes the
	// subscribers of the queues it made ready.
	//
	// Per ID: ErrNotFound when there is no such instance, ErrNotFinished
	// when it is Scheduled or Processing (nothing changes), ErrCorrupt when
	// its record cannot be decoded.
	Retry(ctx context.Context, p *RetryParams) ([]AdminResult, error)

	// Delete removes instances in any state, with their history, their
	// logs and every index entry, and releases the unique key each still
	// holds. A Scheduled instance leaves its queue and is never claimed. A
	// Processing one is removed too: its owner's next Renew reports its
	// lease Lost (so the engine cancels the running attempt), and the
	// owner's Finish of it fails with ErrLeaseLost. An ID may be enqueued
	// again after its instance was deleted. Per ID: ErrNotFound when there
	// is no such instance.
	Delete(ctx context.Context, p *DeleteParams) ([]AdminResult, error)
}

// RetryParams is the argument of Admin.Retry.
type RetryParams struct {
	// IDs are the instances to run again.
	IDs []string
	// RunAt is when they become ready; the zero time means Now.
	RunAt time.Time
	// ResetAttempts sets Attempt back to 0; otherwise it is kept (see
	// Admin.Retry).
	ResetAttempts bool
	// Now is the time of the history records and of UpdatedAt.
	Now time.Time
	// Node names the caller in the history records.
	Node string
}

// DeleteParams is the argument of Admin.Delete.
type DeleteParams struct {
	// IDs are the instances to remove.
	IDs []string
	// Now is the time of the call.
	Now time.Time
	// Node names the caller.
	Node string
}

// AdminResult is what Retry or Delete did with one ID.
type AdminResult struct {
	ID string
	// State is the instance's state after Retry (Scheduled), or the state
	// Delete found it in. Zero when Err is set.
	State State
	// Err is nil when the change was applied; otherwise it wraps
	// ErrNotFound, ErrNotFinished (Retry) or ErrCorrupt, and nothing
	// changed for this ID.
	Err error
}

// RetryMessage is the Error of the history record Retry appends.
func RetryMessage(node string) string { return "retried by " + node }

// Validate checks the parameters every plugin requires.
func (p *RetryParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: nil retry parameters", ErrInvalid)
	}
	return validIDs("retry", p.IDs)
}

// Validate checks the parameters every plugin requires.
func (p *DeleteParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: nil delete parameters", ErrInvalid)
	}
	return validIDs("delete", p.IDs)
}

func validIDs(op string, ids []string) error {
	for i, id := range ids {
		if id == "" {
			return fmt.Errorf("%w: %s: instance ID %d of %d is empty", ErrInvalid, op, i+1, len(ids))
		}
	}
	return nil
}

// ReadyAt returns when a retried instance becomes ready: p.RunAt, or Now
// when it is zero.
func (p *RetryParams) ReadyAt() time.Time {
	if p.RunAt.IsZero() {
		return p.Now
	}
	return p.RunAt
}

package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrCursorExpired: an event cursor points before what the store still
// retains (history retention removed records after it, etcd compacted its
// revisions, or an in-memory buffer overflowed), so following from it
// could skip events. Catch up from scratch: take a cursor with
// Events.EventCursor, list the instances (History.LookupInstances), then
// follow from that cursor.
var ErrCursorExpired = errors.New("store: event cursor expired")

// Events is the feed of state changes of a store's namespace: one Event per
// history record, in the order the store wrote them, delivered as they
// happen. It reads the history each store already keeps (a Redis stream,
// etcd revisions, an in-memory ring), so following it adds nothing to a
// transition.
//
// Delivery: from a cursor, every event after it is delivered once, in
// order, while the store still retains it; events of one instance always
// come in the order of its transitions. A consumer that records the cursor
// of each event it has handled and follows from it after a disconnect
// misses nothing and sees nothing twice (at-least-once when it records
// cursors after handling). What a cursor can reach back to is bounded by
// retention: history pruned after it (Pruner), an etcd compaction past it,
// or the in-memory store's event buffer overflowing past it makes it
// expire (ErrCursorExpired); a consumer then catches up by taking a fresh
// cursor with EventCursor, listing instances, and following from that
// cursor. A cancel requested on a running instance is not a transition and
// has no event (its end as Canceled has one).
type Events interface {
	// EventCursor returns the cursor of the newest event now: following
	// from it delivers only what happens afterwards. Take it before
	// listing instances to catch up without a gap.
	EventCursor(ctx context.Context) (string, error)

	// Follow delivers the events after p.Cursor (from now when it is
	// empty) that match p's filters on the returned channel, as they
	// happen, until ctx ends; then the channel is closed. A cursor that is
	// not one of this store's (malformed, forged, from another store
	// kind, or from the future) is an error wrapping ErrInvalid; one the
	// store no longer reaches back to wraps ErrCursorExpired. Both are
	// returned by Follow itself when known at once.
	//
	// When the feed fails later (the consumer fell so far behind that
	// its position expired, or the store failed for good), the last value
	// on the channel is an Event whose Err says why, and the channel is
	// then closed; Err wraps ErrCursorExpired when the consumer must catch
	// up as described on Events. A consumer slower than the writes never
	// slows the store or the engine: the feed holds a position in the
	// store's history, not a queue of undelivered events (apart from the
	// channel's buffer of p.Buffer), and reads on as the consumer takes.
	Follow(ctx context.Context, p *FollowParams) (<-chan Event, error)
}

// FollowParams is the argument of Events.Follow.
type FollowParams struct {
	// Cursor is where to start: the Cursor of the last event the caller
	// handled, or one from EventCursor. Empty means from now.
	Cursor string
	// Kinds, when not empty, keeps only the events of instances of these
	// kinds. An event whose instance was removed before the store read
	// its kind has an empty Kind and is left out by this filter.
	Kinds []string
	// InstanceID, when set, keeps only the events of that instance.
	InstanceID string
	// Buffer is the capacity of the returned channel. Defaults to 256
	// when 0; must not be negative.
	Buffer int
}

// DefaultFollowBuffer is the channel capacity of a Follow given no Buffer.
const DefaultFollowBuffer = 256

// Validate reports parameters that break the contract, wrapping
// ErrInvalid.
func (p *FollowParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: follow: nil parameters", ErrInvalid)
	case p.Buffer < 0:
		return fmt.Errorf("%w: follow: Buffer %d; want 0 (the default, %d) or more", ErrInvalid, p.Buffer, DefaultFollowBuffer)
	}
	for _, k := range p.Kinds {
		if k == "" {
			return fmt.Errorf("%w: follow: an empty kind in Kinds; name kinds or leave Kinds empty for all", ErrInvalid)
		}
	}
	return nil
}

// BufferOrDefault returns p.Buffer, or DefaultFollowBuffer when it is 0.
func (p *FollowParams) BufferOrDefault() int {
	if p.Buffer == 0 {
		return DefaultFollowBuffer
	}
	return p.Buffer
}

// Match reports whether e passes p's filters.
func (p *FollowParams) Match(e *Event) bool {
	return (p.InstanceID == "" || p.InstanceID == e.InstanceID) &&
		(len(p.Kinds) == 0 || slices.Contains(p.Kinds, e.Kind))
}

// Event is one state change of one instance, as its history record has
// it, with the cursor that follows it. An Event with a non-nil Err is not
// a state change: it ends the feed (see Events.Follow).
type Event struct {
	// Cursor is the position just after this event: follow from it to
	// get the events after this one. Opaque; valid for the store (and
	// namespace) that delivered it.
	Cursor     string
	InstanceID string
	// Kind of the instance; empty when the instance was removed before
	// the store read it (Redis and Valkey look it up as they deliver).
	Kind string
	// Queue of the instance, where the store has it at hand (empty for
	// records written before a store kept it, and as for Kind).
	Queue   string
	State   State
	Attempt int
	Time    time.Time
	Node    string // the manager that made the transition
	Error   string // the attempt's error, if any
	// Seq is the history record's Seq: it orders the records of one
	// instance.
	Seq uint64
	// ReadyAt is set on Processing events only: when the claimed attempt
	// became ready, the instance's RunAt as the claim found it (its
	// enqueue's RunAt, a retry's backoff end; a rescued instance keeps its
	// RunAt), so Time - ReadyAt is how long the attempt waited, ready,
	// before a node started it. memdb and etcd deliver the RunAt the claim
	// recorded. Redis, Valkey and PostgreSQL read it from the instance as
	// they deliver the event, and leave it zero when they cannot tell it
	// any more: the instance was removed, or became ready for a later
	// attempt, before the feed read the event (a feed reading live is
	// seconds behind at most; a feed catching up from an old cursor may
	// miss some).
	ReadyAt time.Time
	// Err, when set, is why the feed ended; the other fields are zero.
	Err error
}

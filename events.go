package job

import (
	"context"
	"fmt"

	"github.com/jobkit/job/store"
)

// Event is one state change of one instance, delivered by Manager.WatchEvents
// as it happens: the instance's ID, kind and queue, the new state, the
// attempt, when and by which node, the attempt's error, and the Cursor to
// resume after it. An Event with a non-nil Err ends its feed instead.
type Event = store.Event

// ErrCursorExpired: an event cursor points before what the store still
// retains (history retention, an etcd compaction, the in-memory store's
// event buffer), so following from it could skip events. Catch up: take
// a cursor with Manager.GetEventCursor, list instances, then follow from that
// cursor.
var ErrCursorExpired = store.ErrCursorExpired

// EventOption narrows or positions a feed of Manager.WatchEvents.
type EventOption func(*store.FollowParams)

// WithEventCursor starts the feed after the event whose Cursor this is
// (or after the point GetEventCursor returned it), so a consumer that
// reconnects misses nothing and sees nothing twice. Without it the feed
// starts now.
func WithEventCursor(cursor string) EventOption {
	return func(p *store.FollowParams) { p.Cursor = cursor }
}

// WithEventKinds keeps only the events of instances of these kinds.
func WithEventKinds(kinds ...string) EventOption {
	return func(p *store.FollowParams) { p.Kinds = append(p.Kinds, kinds...) }
}

// WithEventInstanceID keeps only the events of one instance.
func WithEventInstanceID(id string) EventOption {
	return func(p *store.FollowParams) { p.InstanceID = id }
}

// WithEventBuffer sets the capacity of the feed's channel. Defaults to
// 256; must not be negative. A consumer slower than that never slows the
// store or the engine: the feed waits at its position in the store's
// history, and ends with ErrCursorExpired only when it falls behind what
// the store retains.
func WithEventBuffer(n int) EventOption {
	return func(p *store.FollowParams) { p.Buffer = n }
}

// WatchEvents follows the state changes of every instance in the manager's
// store (its namespace, across every manager that shares it) as they
// happen, for a server to stream or a console to update live without
// polling. It works whether or not the manager is started.
//
// The channel is closed when ctx ends. When the feed fails for good (it
// fell behind what the store retains), its last value is an Event whose
// Err wraps ErrCursorExpired, and then it is closed. A cursor that is not
// the store's is an error wrapping store.ErrInvalid; one already too old
// wraps ErrCursorExpired. See store.Events for the delivery guarantee
// and what each store retains; in short: every event after the cursor,
// once and in order, while retained. To catch up after ErrCursorExpired,
// take GetEventCursor, list instances (LookupInstances), then follow from
// that cursor.
func (m *Manager) WatchEvents(ctx context.Context, opts ...EventOption) (<-chan Event, error) {
	p := &store.FollowParams{}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: events: nil option", ErrInvalidOption)
		}
		o(p)
	}
	ch, err := m.store.Follow(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("job: events: %w", err)
	}
	return ch, nil
}

// GetEventCursor returns the cursor of the newest event now: Events with
// WithEventCursor of it delivers only what happens afterwards. Take it
// before listing instances, so a console that lists then follows misses
// no change in between.
func (m *Manager) GetEventCursor(ctx context.Context) (string, error) {
	c, err := m.store.EventCursor(ctx)
	if err != nil {
		return "", fmt.Errorf("job: event cursor: %w", err)
	}
	return c, nil
}

package job

import (
	"fmt"
	"time"

	"github.com/jobkit/job/store"
)

// Query selects instances, state records or log records for the Lookup
// methods. Build one with NewQuery; zero fields match everything.
type Query struct {
	q store.Query
}

// QueryOption narrows a Query.
type QueryOption func(*Query)

// NewQuery returns a query narrowed by opts.
func NewQuery(opts ...QueryOption) *Query {
	q := &Query{}
	for _, o := range opts {
		o(q)
	}
	return q
}

// WithQueryInstance selects one instance.
func WithQueryInstance(ji *InstanceInfo) QueryOption {
	return func(q *Query) { q.q.InstanceID = ji.ID }
}

// WithQueryInstanceID selects one instance by ID.
func WithQueryInstanceID(id string) QueryOption {
	return func(q *Query) { q.q.InstanceID = id }
}

// WithQueryKind selects one job kind.
func WithQueryKind(kind string) QueryOption {
	return func(q *Query) { q.q.Kind = kind }
}

// WithQueryQueue selects one queue (instances only).
func WithQueryQueue(name string) QueryOption {
	return func(q *Query) { q.q.Queue = name }
}

// WithQueryState selects any of the given states (instances and state
// records).
func WithQueryState(states ...State) QueryOption {
	return func(q *Query) { q.q.States = append(q.q.States, states...) }
}

// WithQueryLevel selects any of the given log levels (logs only).
func WithQueryLevel(levels ...LogLevel) QueryOption {
	return func(q *Query) { q.q.Levels = append(q.q.Levels, levels...) }
}

// WithQuerySince selects what happened at or after t (instances by
// creation time, records by their time).
func WithQuerySince(t time.Time) QueryOption {
	return func(q *Query) { q.q.Since = t }
}

// WithQueryUntil selects what happened before t.
func WithQueryUntil(t time.Time) QueryOption {
	return func(q *Query) { q.q.Until = t }
}

// DefaultLookupLimit is how many results a Lookup method returns when the
// query sets no limit (WithQueryLimit), so a lookup never returns an
// unbounded result however much the store holds. To read everything, page
// with ListInstances, ListHistory or ListLogs.
const DefaultLookupLimit = store.MaxPageSize

// WithQueryParent selects the shards of the sharded task whose parent
// instance has that ID (see WithShards); lookups of history and logs
// ignore it.
func WithQueryParent(id string) QueryOption {
	return func(q *Query) { q.q.Parent = id }
}

// WithQueryLimit returns at most n results (0: DefaultLookupLimit).
func WithQueryLimit(n int) QueryOption {
	return func(q *Query) { q.q.Limit = n }
}

func (q *Query) store() (*store.Query, error) {
	if q == nil {
		return &store.Query{Limit: DefaultLookupLimit}, nil
	}
	sq := q.q
	if sq.Limit == 0 {
		sq.Limit = DefaultLookupLimit
	}
	sq.States = append([]store.State(nil), q.q.States...)
	sq.Levels = append([]store.LogLevel(nil), q.q.Levels...)
	if err := sq.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return &sq, nil
}

package job

import (
	"context"
	"errors"
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
func WithQueryInstance(ji Instance) QueryOption {
	return func(q *Query) { q.q.InstanceID = ji.ID() }
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

// WithQueryLimit returns at most n results.
func WithQueryLimit(n int) QueryOption {
	return func(q *Query) { q.q.Limit = n }
}

func (q *Query) store() (*store.Query, error) {
	if q == nil {
		return &store.Query{}, nil
	}
	sq := q.q
	sq.States = append([]store.State(nil), q.q.States...)
	sq.Levels = append([]store.LogLevel(nil), q.q.Levels...)
	if err := sq.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return &sq, nil
}

// LookupInstances returns the instances q selects, newest first. Records
// the store cannot decode are left out and reported in an error wrapping
// store.ErrCorrupt, alongside the rest.
func (m *Manager) LookupInstances(ctx context.Context, q *Query) ([]Instance, error) {
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	recs, err := m.store.LookupInstances(ctx, sq)
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return nil, fmt.Errorf("job: lookup instances: %w", err)
	}
	out := make([]Instance, len(recs))
	for i, r := range recs {
		out[i] = newInstance(r, m)
	}
	if err != nil {
		err = fmt.Errorf("job: lookup instances: %w", err)
	}
	return out, err
}

// LookupInstance returns the instance with that ID, or an error wrapping
// ErrNotFound.
func (m *Manager) LookupInstance(ctx context.Context, id string) (Instance, error) {
	recs, err := m.store.LookupInstances(ctx, &store.Query{InstanceID: id, Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("job: lookup instance %s: %w", id, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("job: lookup instance %s: %w", id, ErrNotFound)
	}
	return newInstance(recs[0], m), nil
}

// LookupInstanceHistory returns the state transitions q selects, oldest
// first.
func (m *Manager) LookupInstanceHistory(ctx context.Context, q *Query) ([]*StateRecord, error) {
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	recs, err := m.store.LookupHistory(ctx, sq)
	if err != nil {
		return recs, fmt.Errorf("job: lookup history: %w", err)
	}
	return recs, nil
}

// LookupInstanceLogs returns the log records q selects, oldest first.
func (m *Manager) LookupInstanceLogs(ctx context.Context, q *Query) ([]*LogRecord, error) {
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	recs, err := m.store.LookupLogs(ctx, sq)
	if err != nil {
		return recs, fmt.Errorf("job: lookup logs: %w", err)
	}
	return recs, nil
}

package client

import (
	"time"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// Query selects instances, state changes or log records for the Page
// methods and the bulk operations. Build one with NewQuery; zero fields
// match everything.
type Query struct {
	instanceID string
	kind       string
	queue      string
	states     []job.State
	levels     []job.LogLevel
	labels     []string
	parent     string
	text       string
	since      time.Time
	until      time.Time
	limit      int
	cursor     string
}

// QueryOption narrows a Query; the names are those of package job.
type QueryOption func(*Query)

// NewQuery returns a query narrowed by opts.
func NewQuery(opts ...QueryOption) *Query {
	q := &Query{}
	for _, o := range opts {
		if o != nil {
			o(q)
		}
	}
	return q
}

// WithQueryInstanceID selects one instance (history and logs).
func WithQueryInstanceID(id string) QueryOption { return func(q *Query) { q.instanceID = id } }

// WithQueryKind selects one job kind.
func WithQueryKind(kind string) QueryOption { return func(q *Query) { q.kind = kind } }

// WithQueryQueue selects one queue (instances only).
func WithQueryQueue(name string) QueryOption { return func(q *Query) { q.queue = name } }

// WithQueryState selects any of the given states (instances and state
// changes).
func WithQueryState(states ...job.State) QueryOption {
	return func(q *Query) { q.states = append(q.states, states...) }
}

// WithQueryLevel selects any of the given log levels (logs only).
func WithQueryLevel(levels ...job.LogLevel) QueryOption {
	return func(q *Query) { q.levels = append(q.levels, levels...) }
}

// WithQueryLabels selects instances that require every one of these
// labels (instances only).
func WithQueryLabels(labels ...string) QueryOption {
	return func(q *Query) { q.labels = append(q.labels, labels...) }
}

// WithQueryParent selects the shards of the sharded task whose parent
// has that ID (instances only).
func WithQueryParent(id string) QueryOption { return func(q *Query) { q.parent = id } }

// WithQueryText selects instances whose arguments, result or error
// contain text, ignoring case (instances only). The server searches what
// the rest of the query selects, reading at most 10,000 instances a page:
// a page may hold fewer instances than its limit, even none, while it has
// a next cursor. Bulk operations refuse it.
func WithQueryText(text string) QueryOption { return func(q *Query) { q.text = text } }

// WithQuerySince selects what happened at or after t (instances by
// creation time, records by their time).
func WithQuerySince(t time.Time) QueryOption { return func(q *Query) { q.since = t } }

// WithQueryUntil selects what happened before t.
func WithQueryUntil(t time.Time) QueryOption { return func(q *Query) { q.until = t } }

// WithQueryLimit sets the page size (0: the server's default, 100; at
// most 1000).
func WithQueryLimit(n int) QueryOption { return func(q *Query) { q.limit = n } }

// WithQueryCursor continues a paged lookup after the page whose Next is
// cursor; the query must select what it selected for that page.
func WithQueryCursor(cursor string) QueryOption { return func(q *Query) { q.cursor = cursor } }

func (q *Query) orEmpty() *Query {
	if q == nil {
		return &Query{}
	}
	return q
}

// filter returns the instance filter of q.
func (q *Query) filter() *jobkitv1.InstanceFilter {
	return &jobkitv1.InstanceFilter{
		Kind:          q.kind,
		Queue:         q.queue,
		States:        statesProto(q.states),
		CreatedAfter:  tsOrNil(q.since),
		CreatedBefore: tsOrNil(q.until),
		Labels:        q.labels,
		ParentId:      q.parent,
		Text:          q.text,
	}
}

// statesProto converts states; the API numbers them as package job does.
func statesProto(states []job.State) []jobkitv1.State {
	if len(states) == 0 {
		return nil
	}
	out := make([]jobkitv1.State, len(states))
	for i, s := range states {
		out[i] = jobkitv1.State(s)
	}
	return out
}

func levelsProto(levels []job.LogLevel) []jobkitv1.LogLevel {
	if len(levels) == 0 {
		return nil
	}
	out := make([]jobkitv1.LogLevel, len(levels))
	for i, l := range levels {
		out[i] = jobkitv1.LogLevel(l)
	}
	return out
}

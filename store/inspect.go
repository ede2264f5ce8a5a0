package store

import (
	"context"
	"slices"
	"strings"
	"time"
)

// Inspector answers the questions an operator asks of a store: how many
// instances are in each queue, kind and state, how far behind each queue
// and kind is, what queues and kinds exist, and a page of instances,
// history or logs at a time.
//
// Counts come from counters the store keeps up to date in the same atomic
// step as every transition (enqueue, claim, finish, retry, rescue, cancel,
// prune), never from a walk of the stored instances, so they cost the
// same with a million completed instances as with none.
type Inspector interface {
	// Counts returns one row per (queue, kind) the store has seen (an
	// instance was enqueued with them), narrowed by p.Queue and p.Kind,
	// ordered by queue then kind. A row whose instances were all pruned
	// stays, with zero counts, so the row also says the pair was seen.
	Counts(ctx context.Context, p *CountsParams) ([]GroupCount, error)

	// Lag returns, for each queue and each kind the store has seen
	// (narrowed by p.Queue and p.Kind), the oldest ready instance: one in
	// state Scheduled whose RunAt is at or before p.Now. It became ready at
	// its RunAt (an instance scheduled to run at once has RunAt = the time
	// it was enqueued; a retry has the RunAt of its backoff; a rescued one
	// keeps its RunAt, so its wait counts from when it first became ready).
	Lag(ctx context.Context, p *LagParams) (*LagResult, error)

	// PageInstances returns one page of LookupInstances' answer to q (newest
	// first) and the cursor of the next page; see PageQuery for how pages
	// stay stable while the store changes.
	PageInstances(ctx context.Context, q *Query) (*InstancePage, error)
	// PageHistory returns one page of LookupHistory's answer, oldest first
	// by (Time, InstanceID, Seq), and the cursor of the next page.
	PageHistory(ctx context.Context, q *Query) (*HistoryPage, error)
	// PageLogs returns one page of LookupLogs' answer, oldest first by
	// (Time, InstanceID, Seq), and the cursor of the next page.
	PageLogs(ctx context.Context, q *Query) (*LogPage, error)
}

// CountsParams narrows Inspector.Counts. Zero fields match everything.
type CountsParams struct {
	Queue string
	Kind  string
}

// GroupCount is the number of instances of one kind in one queue, by
// state. States is indexed by State (States[Scheduled] is how many wait
// or are ready); index 0 is unused. Created is always 0: an instance is
// Scheduled once Enqueue returns.
type GroupCount struct {
	Queue  string
	Kind   string
	States [TimedOut + 1]int64
}

// Total is the number of stored instances in the group, in any state.
func (g *GroupCount) Total() int64 {
	var n int64
	for _, c := range g.States {
		n += c
	}
	return n
}

// LagParams narrows Inspector.Lag. Zero Queue and Kind match everything;
// Now is required: an instance is ready when its RunAt is at or before it.
type LagParams struct {
	Now   time.Time
	Queue string
	Kind  string
}

// Lag is how far behind one queue or one kind is.
type Lag struct {
	// Name is the queue's or the kind's name.
	Name string
	// OldestReady is the RunAt of the oldest ready instance; zero when none
	// is ready.
	OldestReady time.Time
	// Age is Now - OldestReady, or 0 when none is ready.
	Age time.Duration
}

// LagResult is what Inspector.Lag returns: one entry per queue and per
// kind seen (and matching the filter), ordered by name, including those
// with nothing ready (zero Age).
type LagResult struct {
	Queues []Lag
	Kinds  []Lag
}

// LagBuilder gathers the oldest ready RunAt of each (queue, kind) group
// into a LagResult, for a plugin's Lag. The zero value is ready to use.
type LagBuilder struct {
	queues, kinds map[string]time.Time
}

// Add records group (queue, kind), whose oldest ready instance became
// ready at oldest (zero: none is ready).
func (b *LagBuilder) Add(queue, kind string, oldest time.Time) {
	if b.queues == nil {
		b.queues, b.kinds = map[string]time.Time{}, map[string]time.Time{}
	}
	add := func(m map[string]time.Time, k string) {
		cur, seen := m[k]
		switch {
		case !seen:
			m[k] = oldest
		case oldest.IsZero():
		case cur.IsZero() || oldest.Before(cur):
			m[k] = oldest
		}
	}
	add(b.queues, queue)
	add(b.kinds, kind)
}

// Result returns what was added, as lags at now, ordered by name.
func (b *LagBuilder) Result(now time.Time) *LagResult {
	list := func(m map[string]time.Time) []Lag {
		out := make([]Lag, 0, len(m))
		for name, t := range m {
			out = append(out, lagOf(name, t, now))
		}
		slices.SortFunc(out, func(a, b Lag) int { return strings.Compare(a.Name, b.Name) })
		return out
	}
	return &LagResult{Queues: list(b.queues), Kinds: list(b.kinds)}
}

// lagOf returns a Lag for name with the oldest ready RunAt oldest (zero:
// none) at now.
func lagOf(name string, oldest, now time.Time) Lag {
	l := Lag{Name: name}
	if !oldest.IsZero() {
		l.OldestReady = oldest
		l.Age = max(now.Sub(oldest), 0)
	}
	return l
}

// InstancePage is one page of instances, newest first.
type InstancePage struct {
	Instances []*Instance
	// Next is the cursor of the next page (Query.Cursor), or "" when this
	// page is the last.
	Next string
}

// HistoryPage is one page of history records, oldest first.
type HistoryPage struct {
	Records []*HistoryRecord
	Next    string // the next page's cursor, or "" after the last page
}

// LogPage is one page of log records, oldest first.
type LogPage struct {
	Records []*LogRecord
	Next    string // the next page's cursor, or "" after the last page
}

package job

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jobkit/job/store"
)

// GroupCount is how many instances of one kind in one queue are in each
// state: States[Scheduled], States[Completed], ... (see store.GroupCount).
type GroupCount = store.GroupCount

// Lag is how far behind one queue or kind is: the RunAt of its oldest
// ready instance and how long ago that was.
type Lag = store.Lag

// DefaultPageSize is the page size of a Page method whose query sets no
// limit; MaxPageSize is the largest limit a Page method takes.
const (
	DefaultPageSize = store.DefaultPageSize
	MaxPageSize     = store.MaxPageSize
)

// WithQueryCursor continues a paged lookup (ListInstances, ListHistory,
// ListLogs) after the page whose Next is cursor. The query must select
// what it selected for that page; the limit may change.
func WithQueryCursor(cursor string) QueryOption {
	return func(q *Query) { q.q.Cursor = cursor }
}

// CountInstances returns how many instances are in each state, per queue and kind,
// from counters the store keeps on every transition: it costs the same
// with a million completed instances as with none. queue and kind narrow
// the rows ("" matches all). Every queue and kind the store has seen has a
// row, even when all its instances were pruned.
func (a *Admin) CountInstances(ctx context.Context, queue, kind string) ([]GroupCount, error) {
	m := a.m
	rows, err := m.store.Counts(ctx, &store.CountsParams{Queue: queue, Kind: kind})
	if err != nil {
		return nil, fmt.Errorf("job: counts: %w", err)
	}
	return rows, nil
}

// GetLag returns, for every queue and kind seen (narrowed by queue and kind,
// "" matching all), how long its oldest ready instance (Scheduled, RunAt
// at or before the manager's clock) has waited since its RunAt.
func (a *Admin) GetLag(ctx context.Context, queue, kind string) (*LagResult, error) {
	m := a.m
	r, err := m.store.Lag(ctx, &store.LagParams{Now: m.clock.Now(), Queue: queue, Kind: kind})
	if err != nil {
		return nil, fmt.Errorf("job: lag: %w", err)
	}
	return r, nil
}

// ListQueueNames returns the names of the queues the store has seen, sorted.
//
// Deprecated: use ListQueues, which lists every queue the store knows
// with its paused flag (the names are its QueueInfo.Name), or
// CountInstances, which has a row per queue and kind seen. It stays for
// one release.
func (a *Admin) ListQueueNames(ctx context.Context) ([]string, error) {
	m := a.m
	return m.seen(ctx, func(g *GroupCount) string { return g.Queue })
}

// ListKinds returns the job kinds the store has seen instances of, sorted.
func (a *Admin) ListKinds(ctx context.Context) ([]string, error) {
	m := a.m
	return m.seen(ctx, func(g *GroupCount) string { return g.Kind })
}

func (m *Manager) seen(ctx context.Context, name func(*GroupCount) string) ([]string, error) {
	rows, err := m.Admin().CountInstances(ctx, "", "")
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	var out []string
	for i := range rows {
		if n := name(&rows[i]); !set[n] {
			set[n] = true
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ListInstances returns one page of the instances q selects, newest
// first: at most q's limit, DefaultPageSize when it sets none (a limit
// above MaxPageSize is an error). Pass the page's Next to WithQueryCursor
// for the next page; an instance stored for the whole paging is returned
// once, never skipped nor repeated, whatever changes between pages. A
// cursor that was changed, or made by another query, is an error wrapping
// ErrInvalidOption.
func (m *Manager) ListInstances(ctx context.Context, q *Query) (*Page[*InstanceInfo], error) {
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	p, err := m.store.PageInstances(ctx, sq)
	if p == nil {
		return nil, pageErr("instances", err)
	}
	out := &Page[*InstanceInfo]{Items: make([]*InstanceInfo, len(p.Instances)), Next: p.Next}
	for i, r := range p.Instances {
		out.Items[i] = newInfo(r)
	}
	return out, pageErr("instances", err)
}

// ListHistory returns one page of the state records q selects, oldest
// first by (Time, InstanceID, Seq); see ListInstances for pages and
// cursors.
func (m *Manager) ListHistory(ctx context.Context, q *Query) (*Page[*HistoryRecord], error) {
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	p, err := m.store.PageHistory(ctx, sq)
	if p == nil {
		return nil, pageErr("history", err)
	}
	return &Page[*HistoryRecord]{Items: p.Records, Next: p.Next}, pageErr("history", err)
}

// ListLogs returns one page of the log records q selects, oldest first by
// (Time, InstanceID, Seq); see ListInstances for pages and cursors.
func (m *Manager) ListLogs(ctx context.Context, q *Query) (*Page[*LogRecord], error) {
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	p, err := m.store.PageLogs(ctx, sq)
	if p == nil {
		return nil, pageErr("logs", err)
	}
	return &Page[*LogRecord]{Items: p.Records, Next: p.Next}, pageErr("logs", err)
}

// pageErr wraps a page lookup's error; a bad cursor or page size (the
// store's ErrInvalid) also wraps ErrInvalidOption.
func pageErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrInvalid):
		return fmt.Errorf("job: page %s: %w: %w", what, ErrInvalidOption, err)
	}
	return fmt.Errorf("job: page %s: %w", what, err)
}

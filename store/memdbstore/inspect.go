package memdbstore

import (
	"cmp"
	"context"
	"math"
	"slices"

	"github.com/jobkit/job/store"
)

// group is a (queue, kind) pair, by name number.
type group struct{ queue, kind name }

// countMove is the one place the counts change: old (nil for a new
// instance) leaves its group's state count and r (nil for a removed
// instance) enters its own, and the waiting index follows Scheduled
// instances. put and drop call it, so every transition, and any added
// later through them, keeps the counts exact.
func (t *tables) countMove(old, r *rec) {
	if old != nil && r != nil && old.state == r.state && old.runAt == r.runAt {
		return // a renew, a cancel request: no count or index changes
	}
	t.keyMove(old, r)
	if old != nil {
		g := group{old.qid, old.kind}
		c := t.counts[g]
		c[old.state]--
		t.counts[g] = c
		if old.state == store.Scheduled {
			t.waiting.Delete(old)
		}
	}
	if r != nil {
		g := group{r.qid, r.kind}
		c := t.counts[g]
		c[r.state]++
		t.counts[g] = c
		if r.state == store.Scheduled {
			t.waiting.ReplaceOrInsert(r)
		}
	}
}

// lessWaiting orders Scheduled instances by queue, kind, RunAt, Seq.
func lessWaiting(a, b *rec) bool {
	switch {
	case a.qid != b.qid:
		return a.qid < b.qid
	case a.kind != b.kind:
		return a.kind < b.kind
	case a.runAt != b.runAt:
		return a.runAt < b.runAt
	}
	return a.seq < b.seq
}

// groups returns the snapshot's (queue, kind) pairs matching queue and kind
// ("" matches all), ordered by queue name then kind name.
func (t *tables) groups(names []string, queue, kind string) []group {
	var out []group
	for g := range t.counts {
		if (queue == "" || names[g.queue] == queue) && (kind == "" || names[g.kind] == kind) {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b group) int {
		return cmp.Or(cmp.Compare(names[a.queue], names[b.queue]), cmp.Compare(names[a.kind], names[b.kind]))
	})
	return out
}

// Counts implements store.Inspector from the counters: O(groups), however
// many instances are stored.
func (s *Store) Counts(ctx context.Context, p *store.CountsParams) ([]store.GroupCount, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, "counts"); err != nil {
		return nil, err
	}
	t := s.snapshot()
	names := s.nameList() // after the snapshot: it names every group in it
	gs := t.groups(names, p.Queue, p.Kind)
	out := make([]store.GroupCount, len(gs))
	for i, g := range gs {
		out[i] = store.GroupCount{Queue: names[g.queue], Kind: names[g.kind], States: t.counts[g]}
	}
	return out, nil
}

// Lag implements store.Inspector: one seek in the waiting index per
// (queue, kind) group.
func (s *Store) Lag(ctx context.Context, p *store.LagParams) (*store.LagResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, "lag"); err != nil {
		return nil, err
	}
	t := s.snapshot()
	names := s.nameList()
	now := nanos(p.Now)
	var b store.LagBuilder
	for _, g := range t.groups(names, p.Queue, p.Kind) {
		var oldest int64
		t.waiting.AscendGreaterOrEqual(&rec{qid: g.queue, kind: g.kind, runAt: math.MinInt64}, func(r *rec) bool {
			if r.qid == g.queue && r.kind == g.kind && r.runAt <= now {
				oldest = r.runAt
			}
			return false
		})
		b.Add(names[g.queue], names[g.kind], fromNanos(oldest))
	}
	return b.Result(p.Now), nil
}

// PageInstances implements store.Inspector.
func (s *Store) PageInstances(ctx context.Context, q *store.Query) (*store.InstancePage, error) {
	return store.PageInstances(ctx, "", s.LookupInstances, q)
}

// PageHistory implements store.Inspector.
func (s *Store) PageHistory(ctx context.Context, q *store.Query) (*store.HistoryPage, error) {
	return store.PageHistory(ctx, "", s.LookupHistory, q)
}

// PageLogs implements store.Inspector.
func (s *Store) PageLogs(ctx context.Context, q *store.Query) (*store.LogPage, error) {
	return store.PageLogs(ctx, "", s.LookupLogs, q)
}

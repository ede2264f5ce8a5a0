package memdbstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/google/btree"

	"github.com/jobkit/job/store"
)

// read validates q and returns a snapshot to answer it from.
func (s *Store) read(ctx context.Context, op string, q *store.Query) (*tables, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: %s: %w", op, err)
	}
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	return s.snapshot(), nil
}

// forEach calls fn for every instance q can match: the one named by
// q.InstanceID, or all of them.
func (t *tables) forEach(q *store.Query, fn func(r *rec)) {
	if q.InstanceID != "" {
		if r := t.get(&rec{}, q.InstanceID); r != nil {
			fn(r)
		}
		return
	}
	each(t.byID, fn)
}

// states returns the indexes that hold the instances in states, and how
// many instances they hold. The states are exclusive, so no instance is in
// two of them.
func (t *tables) states(states []store.State) (indexes []*btree.BTreeG[*rec], n int) {
	if slices.Contains(states, store.Scheduled) {
		indexes = append(indexes, t.ready)
	}
	if slices.Contains(states, store.Processing) {
		indexes = append(indexes, t.due)
	}
	if slices.ContainsFunc(states, store.State.Final) {
		indexes = append(indexes, t.final)
	}
	for _, idx := range indexes {
		n += idx.Len()
	}
	return indexes, n
}

// newestFirst calls fn for the instances created in [since, until), newest
// first (by CreatedAt, then Seq), until fn returns false.
func (t *tables) newestFirst(since, until int64, fn func(r *rec) bool) {
	if until == minNanos {
		return
	}
	t.created.DescendLessOrEqual(&rec{createdAt: until - 1, seq: math.MaxUint64}, func(r *rec) bool {
		return r.createdAt >= since && fn(r)
	})
}

// each calls fn for every instance in index.
func each(index *btree.BTreeG[*rec], fn func(r *rec)) {
	index.Ascend(func(r *rec) bool {
		fn(r)
		return true
	})
}

// rangeNanos returns q's time range as [since, until) nanos.
func rangeNanos(q *store.Query) (since, until int64) {
	since, until = minNanos, 1<<63-1
	if !q.Since.IsZero() {
		since = nanos(q.Since)
	}
	if !q.Until.IsZero() {
		until = nanos(q.Until)
	}
	return since, until
}

func (r *rec) matches(names []string, q *store.Query, since, until int64) bool {
	return (q.Kind == "" || q.Kind == names[r.kind]) &&
		(q.Queue == "" || q.Queue == names[r.qid]) &&
		(len(q.States) == 0 || slices.Contains(q.States, r.state)) &&
		r.createdAt >= since && r.createdAt < until &&
		(q.Parent == "" || r.x != nil && r.x.parent == q.Parent) &&
		(len(q.IDs) == 0 || slices.Contains(q.IDs, r.id()))
}

// LookupInstances implements store.History. A lookup by InstanceID is one
// index read. Any other walks the index by creation time newest first over
// q's time range, and stops at q.Limit matches, unless q names states
// whose indexes are the cheaper walk: that is when there is no limit, or
// when the states' indexes are small beside the limit walk's estimated
// length (limit × instances ÷ instances in the states, as if matches were
// spread evenly).
func (s *Store) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	t, err := s.read(ctx, "lookup instances", q)
	if err != nil {
		return nil, err
	}
	names := s.nameList() // after the snapshot: it names every record in it
	var found []*rec
	since, until := rangeNanos(q)
	add := func(r *rec) bool {
		if r.matches(names, q, since, until) {
			found = append(found, r)
		}
		return q.Limit <= 0 || len(found) < q.Limit
	}
	byIDs := func(_ context.Context, ids []string) ([]*store.Instance, error) {
		out := make([]*store.Instance, 0, len(ids))
		for _, id := range ids {
			if r := t.get(&rec{}, id); r != nil {
				out = append(out, r.toInstance(names))
			}
		}
		return out, nil
	}
	if len(q.IDs) > 0 && q.InstanceID == "" {
		return store.LookupIDs(ctx, q, byIDs)
	}
	if q.Parent != "" && q.InstanceID == "" {
		return store.LookupShards(ctx, q, byIDs)
	}
	indexes, inStates := t.states(q.States)
	switch {
	case q.InstanceID != "":
		if r := t.get(&rec{}, q.InstanceID); r != nil {
			add(r)
		}
	case len(q.States) > 0 && (q.Limit <= 0 || float64(inStates)*float64(inStates) <= float64(q.Limit)*float64(t.created.Len())):
		for _, idx := range indexes {
			each(idx, func(r *rec) {
				if r.matches(names, q, since, until) {
					found = append(found, r)
				}
			})
		}
		slices.SortFunc(found, func(a, b *rec) int {
			return cmp.Or(cmp.Compare(b.createdAt, a.createdAt), cmp.Compare(b.seq, a.seq))
		})
		if q.Limit > 0 && len(found) > q.Limit {
			found = found[:q.Limit]
		}
	default:
		t.newestFirst(since, until, add)
	}
	out := make([]*store.Instance, len(found))
	for i, r := range found {
		out[i] = r.toInstance(names)
	}
	return out, nil
}

// LookupHistory implements store.History. A lookup by InstanceID reads one
// record; any other walks every instance's history.
func (s *Store) LookupHistory(ctx context.Context, q *store.Query) ([]*store.HistoryRecord, error) {
	type ref struct {
		r *rec
		h hist
	}
	t, err := s.read(ctx, "lookup history", q)
	if err != nil {
		return nil, err
	}
	names := s.nameList() // after the snapshot: it names every record in it
	var found []ref
	since, until := rangeNanos(q)
	t.forEach(q, func(r *rec) {
		if q.Kind != "" && q.Kind != names[r.kind] {
			return
		}
		r.eachHist(names, func(h *hist) {
			if h.t >= since && h.t < until && (len(q.States) == 0 || slices.Contains(q.States, h.state)) {
				found = append(found, ref{r, *h})
			}
		})
	})
	slices.SortFunc(found, func(a, b ref) int {
		return cmp.Or(cmp.Compare(a.h.t, b.h.t), cmp.Compare(a.h.seq, b.h.seq))
	})
	if q.Limit > 0 && len(found) > q.Limit {
		found = found[:q.Limit]
	}
	out := make([]*store.HistoryRecord, len(found))
	for i, f := range found {
		out[i] = f.r.historyRecord(names, &f.h)
	}
	return out, nil
}

// AppendLogs implements store.Logs.
func (s *Store) AppendLogs(ctx context.Context, recs []*store.LogRecord) error {
	for _, l := range recs {
		if err := l.Validate(); err != nil {
			return err
		}
	}
	return s.write(ctx, "append logs", func() error {
		for _, l := range recs {
			row := &logRow{
				seq:        s.seq.Add(1),
				instanceID: l.InstanceID,
				kind:       s.intern(l.Kind),
				attempt:    l.Attempt,
				level:      l.Level,
				t:          nanos(l.Time),
				node:       s.intern(l.Node),
				msg:        l.Message,
			}
			s.t.logsByTime.ReplaceOrInsert(row)
			s.t.logsByInst.ReplaceOrInsert(row)
		}
		return nil
	})
}

// LookupLogs implements store.Logs: by instance through the instance
// index, otherwise in time order through the time index.
func (s *Store) LookupLogs(ctx context.Context, q *store.Query) ([]*store.LogRecord, error) {
	t, err := s.read(ctx, "lookup logs", q)
	if err != nil {
		return nil, err
	}
	since, until := rangeNanos(q)
	match := func(l *logRow) bool {
		return (q.InstanceID == "" || q.InstanceID == l.instanceID) &&
			(q.Kind == "" || q.Kind == l.kind) &&
			(len(q.Levels) == 0 || slices.Contains(q.Levels, l.level)) &&
			l.t >= since && l.t < until
	}
	var out []*store.LogRecord
	if q.InstanceID != "" {
		rows := t.instanceLogs(q.InstanceID)
		slices.SortFunc(rows, func(a, b *logRow) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.seq, b.seq)) })
		for _, l := range rows {
			if match(l) {
				out = append(out, l.toRecord())
				if q.Limit > 0 && len(out) == q.Limit {
					break
				}
			}
		}
		return out, nil
	}
	t.logsByTime.AscendGreaterOrEqual(&logRow{t: since}, func(l *logRow) bool {
		if l.t >= until {
			return false
		}
		if match(l) {
			out = append(out, l.toRecord())
		}
		return q.Limit <= 0 || len(out) < q.Limit
	})
	return out, nil
}

// instanceLogs returns the log rows of instance id in append order.
func (t *tables) instanceLogs(id string) []*logRow {
	var rows []*logRow
	t.logsByInst.AscendGreaterOrEqual(&logRow{instanceID: id}, func(l *logRow) bool {
		if l.instanceID != id {
			return false
		}
		rows = append(rows, l)
		return true
	})
	return rows
}

// Prune implements store.Pruner. FinishedBefore and KeepFinished walk the
// index of finished instances, LogsBefore the logs' time index;
// HistoryBefore walks every instance (history is kept inline).
func (s *Store) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = s.pruneLimit
	}
	res := &store.PruneResult{}
	err := s.write(ctx, "prune", func() error {
		var doomed []*rec
		if !p.FinishedBefore.IsZero() {
			before := nanos(p.FinishedBefore)
			s.t.final.Ascend(func(r *rec) bool {
				if r.finishedAt() >= before {
					return false
				}
				doomed = append(doomed, r)
				return len(doomed) < limit
			})
		}
		s.remove(doomed, res)
		if p.KeepFinished > 0 {
			doomed = doomed[:0]
			kept := 0
			s.t.final.Descend(func(r *rec) bool {
				if kept < p.KeepFinished {
					kept++
					return true
				}
				doomed = append(doomed, r)
				return len(doomed) < limit
			})
			s.remove(doomed, res)
		}
		if !p.HistoryBefore.IsZero() {
			s.pruneHistory(nanos(p.HistoryBefore), limit, res)
		}
		if !p.LogsBefore.IsZero() {
			before := nanos(p.LogsBefore)
			var rows []*logRow
			s.t.logsByTime.Ascend(func(l *logRow) bool {
				if l.t >= before {
					return false
				}
				rows = append(rows, l)
				return len(rows) < limit
			})
			for _, l := range rows {
				s.t.logsByTime.Delete(l)
				s.t.logsByInst.Delete(l)
			}
			res.Logs += len(rows)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// remove deletes instances with their logs and unique keys.
func (s *Store) remove(doomed []*rec, res *store.PruneResult) {
	for _, r := range doomed {
		s.t.drop(r)
		delete(s.progress, r.id())
		res.Instances++
		res.History += r.histLen()
		rows := s.t.instanceLogs(r.id())
		for _, l := range rows {
			s.t.logsByTime.Delete(l)
			s.t.logsByInst.Delete(l)
		}
		res.Logs += len(rows)
		if key := r.uniqueKey(); key != "" {
			if u, ok := s.unique[key]; ok && u.id == r.id() {
				delete(s.unique, key)
			}
		}
	}
}

// pruneHistory drops history records older than before, at most limit.
func (s *Store) pruneHistory(before int64, limit int, res *store.PruneResult) {
	names := s.nameList() // under the write lock: it names every stored record
	var old []*rec
	budget := limit
	s.t.byID.Ascend(func(r *rec) bool {
		n := 0
		r.eachHist(names, func(h *hist) {
			if h.t < before {
				n++
			}
		})
		if n > 0 {
			old = append(old, r)
			budget -= n
		}
		return budget > 0
	})
	budget = limit
	for _, o := range old {
		r := o.clone()
		for bit := range uint8(2) {
			if r.enqPruned&(1<<bit) == 0 && r.enqAt < before && budget > 0 {
				r.enqPruned |= 1 << bit
				budget--
				res.History++
			}
		}
		var kept []hist
		for _, h := range o.hist() {
			if h.t < before && budget > 0 {
				budget--
				res.History++
				continue
			}
			kept = append(kept, h)
		}
		if kept != nil || r.x != nil {
			r.mutX().hist = kept
		}
		s.t.put(o, r)
	}
}

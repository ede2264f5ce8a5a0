package memdbstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/jobkit/job/store"
)

// read runs fn on a snapshot.
func (s *Store) read(ctx context.Context, op string, q *store.Query, fn func(tx *memdb.Txn) error) error {
	if err := q.Validate(); err != nil {
		return fmt.Errorf("memdbstore: %s: %w", op, err)
	}
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	return fn(s.db.Txn(false))
}

// forEach calls fn for every instance q can match: the one named by
// q.InstanceID, or all of them.
func forEach(tx *memdb.Txn, q *store.Query, fn func(r *rec)) error {
	if q.InstanceID != "" {
		r, err := get(tx, q.InstanceID)
		if r != nil {
			fn(r)
		}
		return err
	}
	return eachIn(tx, iID, fn)
}

// forEachInState is forEach for a lookup of instances: with q.States it
// walks only the indexes of those states (ready for Scheduled, due for
// Processing, final for the final states), so looking up what waits or
// runs does not walk the finished history. The states are exclusive, so
// no instance is in two of the indexes.
func forEachInState(tx *memdb.Txn, q *store.Query, fn func(r *rec)) error {
	if q.InstanceID != "" || len(q.States) == 0 {
		return forEach(tx, q, fn)
	}
	var indexes []string
	if slices.Contains(q.States, store.Scheduled) {
		indexes = append(indexes, iReady)
	}
	if slices.Contains(q.States, store.Processing) {
		indexes = append(indexes, iDue)
	}
	if slices.ContainsFunc(q.States, store.State.Final) {
		indexes = append(indexes, iFinal)
	}
	for _, index := range indexes {
		if err := eachIn(tx, index, fn); err != nil {
			return err
		}
	}
	return nil
}

// eachIn calls fn for every instance in index.
func eachIn(tx *memdb.Txn, index string, fn func(r *rec)) error {
	it, err := tx.Get(tInstances, index)
	if err != nil {
		return err
	}
	for obj := it.Next(); obj != nil; obj = it.Next() {
		fn(obj.(*rec))
	}
	return nil
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

func (r *rec) matches(q *store.Query, since, until int64) bool {
	return (q.Kind == "" || q.Kind == r.kind) &&
		(q.Queue == "" || q.Queue == r.queue) &&
		(len(q.States) == 0 || slices.Contains(q.States, r.state)) &&
		r.createdAt >= since && r.createdAt < until
}

// LookupInstances implements store.History. A lookup by InstanceID is one
// index read; one by states walks those states' indexes; any other walks
// every instance (there is no index by kind or creation time: each would
// cost every pending instance ~400 bytes).
func (s *Store) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	var found []*rec
	err := s.read(ctx, "lookup instances", q, func(tx *memdb.Txn) error {
		since, until := rangeNanos(q)
		return forEachInState(tx, q, func(r *rec) {
			if r.matches(q, since, until) {
				found = append(found, r)
			}
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(found, func(a, b *rec) int {
		return cmp.Or(cmp.Compare(b.createdAt, a.createdAt), cmp.Compare(b.seq, a.seq))
	})
	if q.Limit > 0 && len(found) > q.Limit {
		found = found[:q.Limit]
	}
	out := make([]*store.Instance, len(found))
	for i, r := range found {
		out[i] = r.toInstance()
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
	var found []ref
	err := s.read(ctx, "lookup history", q, func(tx *memdb.Txn) error {
		since, until := rangeNanos(q)
		return forEach(tx, q, func(r *rec) {
			if q.Kind != "" && q.Kind != r.kind {
				return
			}
			r.eachHist(func(h *hist) {
				if h.t >= since && h.t < until && (len(q.States) == 0 || slices.Contains(q.States, h.state)) {
					found = append(found, ref{r, *h})
				}
			})
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(found, func(a, b ref) int {
		return cmp.Or(cmp.Compare(a.h.t, b.h.t), cmp.Compare(a.h.seq, b.h.seq))
	})
	if q.Limit > 0 && len(found) > q.Limit {
		found = found[:q.Limit]
	}
	out := make([]*store.HistoryRecord, len(found))
	for i, f := range found {
		out[i] = f.r.historyRecord(&f.h)
	}
	return out, nil
}

// AppendLogs implements store.Logs.
func (s *Store) AppendLogs(ctx context.Context, recs []*store.LogRecord) error {
	for _, l := range recs {
		if l == nil || l.InstanceID == "" {
			return fmt.Errorf("%w: log record without an instance ID", store.ErrInvalid)
		}
	}
	return s.write(ctx, "append logs", func(tx *memdb.Txn) error {
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
			if err := tx.Insert(tLogs, row); err != nil {
				return err
			}
		}
		return nil
	})
}

// LookupLogs implements store.Logs: by instance through the instance
// index, otherwise in time order through the time index.
func (s *Store) LookupLogs(ctx context.Context, q *store.Query) ([]*store.LogRecord, error) {
	var out []*store.LogRecord
	err := s.read(ctx, "lookup logs", q, func(tx *memdb.Txn) error {
		since, until := rangeNanos(q)
		match := func(l *logRow) bool {
			return (q.InstanceID == "" || q.InstanceID == l.instanceID) &&
				(q.Kind == "" || q.Kind == l.kind) &&
				(len(q.Levels) == 0 || slices.Contains(q.Levels, l.level)) &&
				l.t >= since && l.t < until
		}
		if q.InstanceID != "" {
			rows, err := instanceLogs(tx, q.InstanceID)
			if err != nil {
				return err
			}
			slices.SortFunc(rows, func(a, b *logRow) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.seq, b.seq)) })
			for _, l := range rows {
				if match(l) {
					out = append(out, l.toRecord())
					if q.Limit > 0 && len(out) == q.Limit {
						break
					}
				}
			}
			return nil
		}
		it, err := tx.LowerBound(tLogs, iTime, timeSeqKey(since, 0))
		if err != nil {
			return err
		}
		for obj := it.Next(); obj != nil; obj = it.Next() {
			l := obj.(*logRow)
			if l.t >= until {
				break
			}
			if match(l) {
				out = append(out, l.toRecord())
				if q.Limit > 0 && len(out) == q.Limit {
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// instanceLogs returns the log rows of instance id in append order.
func instanceLogs(tx *memdb.Txn, id string) ([]*logRow, error) {
	prefix := append([]byte(id), 0)
	it, err := tx.LowerBound(tLogs, iInst, prefix)
	if err != nil {
		return nil, err
	}
	var rows []*logRow
	for obj := it.Next(); obj != nil; obj = it.Next() {
		l := obj.(*logRow)
		if l.instanceID != id {
			break
		}
		rows = append(rows, l)
	}
	return rows, nil
}

// Prune implements store.Pruner. FinishedBefore and KeepFinished walk the
// index of finished instances, LogsBefore the logs' time index;
// HistoryBefore walks every instance (history is kept inline).
func (s *Store) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil prune parameters", store.ErrInvalid)
	}
	if p.KeepFinished < 0 || p.Limit < 0 {
		return nil, fmt.Errorf("%w: prune with KeepFinished %d, Limit %d; want >= 0", store.ErrInvalid, p.KeepFinished, p.Limit)
	}
	limit := p.Limit
	if limit == 0 {
		limit = s.pruneLimit
	}
	res := &store.PruneResult{}
	err := s.write(ctx, "prune", func(tx *memdb.Txn) error {
		var doomed []*rec
		if !p.FinishedBefore.IsZero() {
			before := nanos(p.FinishedBefore)
			it, err := tx.LowerBound(tInstances, iFinal, timeSeqKey(minNanos, 0))
			if err != nil {
				return err
			}
			for obj := it.Next(); obj != nil && len(doomed) < limit; obj = it.Next() {
				r := obj.(*rec)
				if r.finishedAt() >= before {
					break
				}
				doomed = append(doomed, r)
			}
		}
		if err := s.remove(tx, doomed, res); err != nil {
			return err
		}
		if p.KeepFinished > 0 {
			doomed = doomed[:0]
			it, err := tx.GetReverse(tInstances, iFinal)
			if err != nil {
				return err
			}
			kept := 0
			for obj := it.Next(); obj != nil && len(doomed) < limit; obj = it.Next() {
				if kept < p.KeepFinished {
					kept++
					continue
				}
				doomed = append(doomed, obj.(*rec))
			}
			if err := s.remove(tx, doomed, res); err != nil {
				return err
			}
		}
		if !p.HistoryBefore.IsZero() {
			if err := pruneHistory(tx, nanos(p.HistoryBefore), limit, res); err != nil {
				return err
			}
		}
		if !p.LogsBefore.IsZero() {
			before := nanos(p.LogsBefore)
			it, err := tx.LowerBound(tLogs, iTime, timeSeqKey(minNanos, 0))
			if err != nil {
				return err
			}
			var rows []*logRow
			for obj := it.Next(); obj != nil && len(rows) < limit; obj = it.Next() {
				l := obj.(*logRow)
				if l.t >= before {
					break
				}
				rows = append(rows, l)
			}
			for _, l := range rows {
				if err := tx.Delete(tLogs, l); err != nil {
					return err
				}
			}
			res.Logs += len(rows)
		}
		return ctxErr(ctx, "prune")
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// remove deletes instances with their logs and unique keys.
func (s *Store) remove(tx *memdb.Txn, doomed []*rec, res *store.PruneResult) error {
	for _, r := range doomed {
		if err := tx.Delete(tInstances, r); err != nil {
			return err
		}
		res.Instances++
		res.History += r.histLen()
		rows, err := instanceLogs(tx, r.id)
		if err != nil {
			return err
		}
		for _, l := range rows {
			if err := tx.Delete(tLogs, l); err != nil {
				return err
			}
		}
		res.Logs += len(rows)
		if key := r.uniqueKey(); key != "" {
			obj, err := tx.First(tUnique, iID, key)
			if err != nil {
				return err
			}
			if u, _ := obj.(*uniqueRow); u != nil && u.id == r.id {
				if err := tx.Delete(tUnique, u); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// pruneHistory drops history records older than before, at most limit.
func pruneHistory(tx *memdb.Txn, before int64, limit int, res *store.PruneResult) error {
	it, err := tx.Get(tInstances, iID)
	if err != nil {
		return err
	}
	var old []*rec
	budget := limit
	for obj := it.Next(); obj != nil && budget > 0; obj = it.Next() {
		r := obj.(*rec)
		n := 0
		r.eachHist(func(h *hist) {
			if h.t < before {
				n++
			}
		})
		if n > 0 {
			old = append(old, r)
			budget -= n
		}
	}
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
		for _, h := range o.hist {
			if h.t < before && budget > 0 {
				budget--
				res.History++
				continue
			}
			kept = append(kept, h)
		}
		r.hist = kept
		if err := put(tx, r); err != nil {
			return err
		}
	}
	return nil
}

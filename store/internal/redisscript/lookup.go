package redisscript

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// LookupInstances implements store.History. By ID it reads one instance;
// otherwise it reads the kind's buckets (or every kind's) newest second
// first over the CreatedAt range, so a bounded query reads only its range
// and a limited one stops once it has enough.
func (c *Core) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.InstanceID != "" {
		got, err := c.records(ctx, []string{EncodeID(q.InstanceID)})
		in := got[EncodeID(q.InstanceID)]
		if in == nil || !q.MatchInstance(in) {
			return []*store.Instance{}, err
		}
		return []*store.Instance{in}, err
	}
	kinds, err := c.kinds(ctx, q.Kind)
	if err != nil {
		return nil, err
	}
	var out []*store.Instance
	var errs []error
	for _, k := range kinds {
		matched := 0
		err := c.eachBucket(ctx, k, q.Since, q.Until, func(sids []string, last bool) (bool, error) {
			got, err := c.records(ctx, sids)
			if err != nil {
				errs = append(errs, err)
			}
			for _, sid := range sids {
				if in := got[sid]; in != nil && q.MatchInstance(in) {
					out = append(out, in)
					matched++
				}
			}
			return !last || q.Limit == 0 || matched < q.Limit, nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b *store.Instance) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.Seq, a.Seq)
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []*store.Instance{}
	}
	return out, errors.Join(errs...)
}

// kinds returns []string{kind}, or every kind when kind is empty.
func (c *Core) kinds(ctx context.Context, kind string) ([]string, error) {
	if kind != "" {
		return []string{kind}, nil
	}
	v, err := c.r.Do(ctx, "SMEMBERS", c.keys.Kinds())
	if err != nil {
		return nil, c.wrap(ctx, "lookup", err)
	}
	var out []string
	for _, k := range asArray(v) {
		out = append(out, asString(k))
	}
	return out, nil
}

// eachBucket calls fn with the stored IDs of each bucket of kind whose
// second overlaps [since, until), newest second first, in parts of at most
// 1000 (last is true for a second's last part), until fn returns false. An
// ID is passed once even when it is in two buckets (enqueued again after
// it was pruned). A second's IDs are in enqueue order, not CreatedAt
// order, so a caller that wants the newest stops only after a last part.
func (c *Core) eachBucket(ctx context.Context, kind string, since, until time.Time, fn func(sids []string, last bool) (bool, error)) error {
	maxS, minS := "+inf", "-inf"
	if !until.IsZero() {
		maxS = strconv.FormatInt(floorDiv(Micros(until)-1, 1e6), 10)
	}
	if !since.IsZero() {
		minS = strconv.FormatInt(floorDiv(Micros(since), 1e6), 10)
	}
	seen := map[string]bool{}
	const page = 100
	for offset := 0; ; offset += page {
		v, err := c.r.Do(ctx, "ZRANGE", c.keys.KindDir(kind), maxS, minS, "BYSCORE", "REV", "LIMIT", itoa(offset), itoa(page))
		if err != nil {
			return c.wrap(ctx, "lookup", err)
		}
		secs := asArray(v)
		for _, sv := range secs {
			sec, _ := strconv.ParseInt(asString(sv), 10, 64)
			b, err := c.r.Do(ctx, "GET", c.keys.KindBucket(kind, sec))
			if err != nil {
				return c.wrap(ctx, "lookup", err)
			}
			sids, err := splitBucket(asString(b))
			if err != nil {
				return fmt.Errorf("%s: lookup: kind %q second %d: %w", c.name, kind, sec, err)
			}
			fresh := sids[:0]
			for _, sid := range sids {
				if !seen[sid] {
					seen[sid] = true
					fresh = append(fresh, sid)
				}
			}
			for len(fresh) > 0 {
				n := min(len(fresh), 1000)
				more, err := fn(fresh[:n], n == len(fresh))
				if err != nil || !more {
					return err
				}
				fresh = fresh[n:]
			}
		}
		if len(secs) < page {
			return nil
		}
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// splitBucket splits a kind bucket into its stored IDs, each preceded by
// its length in 2 bytes.
func splitBucket(b string) ([]string, error) {
	var out []string
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, corrupt("a kind bucket", b)
		}
		n := int(b[0])<<8 | int(b[1])
		if len(b) < 2+n {
			return nil, corrupt("a kind bucket", b)
		}
		out = append(out, b[2:2+n])
		b = b[2+n:]
	}
	return out, nil
}

// records reads the instances stored under sids (stored IDs), keyed by
// stored ID; missing ones are left out, undecodable ones too, with an
// error wrapping store.ErrCorrupt naming each.
func (c *Core) records(ctx context.Context, sids []string) (map[string]*store.Instance, error) {
	out := make(map[string]*store.Instance, len(sids))
	var errs []error
	for len(sids) > 0 {
		n := min(len(sids), 1000)
		v, err := c.run(ctx, Records, sids[:n]...)
		if err != nil {
			return out, err
		}
		a := asArray(v)
		if len(a) != 2*n {
			return out, fmt.Errorf("%s: records: malformed reply", c.name)
		}
		for i, sid := range sids[:n] {
			spec := asString(a[2*i])
			if spec == "" {
				continue
			}
			in, err := c.decodeStored(sid, spec, asString(a[2*i+1]))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out[sid] = in
		}
		sids = sids[n:]
	}
	return out, errors.Join(errs...)
}

func (c *Core) wrap(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %s: %w", c.name, op, ctx.Err())
	}
	if strings.Contains(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("%w: %s: %s: a key of namespace %q holds a value of another type: %v", store.ErrCorrupt, c.name, op, c.keys.Prefix, err)
	}
	return fmt.Errorf("%s: %s: %w", c.name, op, err)
}

// ofInstance returns one instance's spec, state and raw stream entries
// ('h' history, 'l' logs).
func (c *Core) ofInstance(ctx context.Context, sid, what string) (spec, state string, entries []any, err error) {
	v, err := c.run(ctx, OfInstance, sid, what)
	if err != nil {
		return "", "", nil, err
	}
	a := asArray(v)
	if len(a) != 3 {
		return "", "", nil, fmt.Errorf("%s: of_instance: malformed reply", c.name)
	}
	return asString(a[0]), asString(a[1]), asArray(a[2]), nil
}

// scan pages through a stream's time range, calling fn for each raw entry
// until fn returns false.
func (c *Core) scan(ctx context.Context, which string, q *store.Query, fn func(raw string) bool) error {
	cursor := ""
	for {
		v, err := c.run(ctx, Range, which, us(q.Since), us(q.Until), "1000", cursor)
		if err != nil {
			return err
		}
		a := asArray(v)
		if len(a) != 2 {
			return fmt.Errorf("%s: stream_range: malformed reply", c.name)
		}
		for _, e := range asArray(a[0]) {
			if !fn(asString(e)) {
				return nil
			}
		}
		cursor = asString(a[1])
		if cursor == "" {
			return nil
		}
	}
}

// LookupHistory implements store.History. By instance it reads the
// instance's own entries; by kind it reads the histories of the kind's
// instances created before the range ends; otherwise it reads the history
// stream over the time range (entry IDs are record times). Records of
// instances that are gone (pruned) are left out; the others get their
// instance's kind.
func (c *Core) LookupHistory(ctx context.Context, q *store.Query) ([]*store.HistoryRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []*store.HistoryRecord
	var errs []error
	// one adds the records of instance in (decoded) from entries.
	one := func(in *store.Instance, entries []any) {
		for _, e := range entries {
			hs, err := decodeHistory(asString(e))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, h := range hs {
				if h.InstanceID == in.ID {
					h.Kind = in.Kind
					if q.MatchHistory(h) {
						out = append(out, h)
					}
				}
			}
		}
	}
	switch {
	case q.InstanceID != "":
		if err := c.historyOf(ctx, q.InstanceID, one); err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				return nil, err
			}
			errs = append(errs, err)
		}
	case q.Kind != "" && q.Since.IsZero():
		ins, err := c.LookupInstances(ctx, &store.Query{Kind: q.Kind, Until: q.Until})
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
		}
		for _, in := range ins {
			if err := c.historyOf(ctx, in.ID, one); err != nil {
				if !errors.Is(err, store.ErrCorrupt) {
					return nil, err
				}
				errs = append(errs, err)
			}
		}
	default:
		var recs []*store.HistoryRecord
		err := c.scan(ctx, "h", q, func(raw string) bool {
			hs, err := decodeHistory(raw)
			if err != nil {
				errs = append(errs, err)
				return true
			}
			for _, h := range hs {
				if q.InRange(h.Time) && (len(q.States) == 0 || slices.Contains(q.States, h.State)) {
					recs = append(recs, h)
				}
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		var sids []string
		seen := map[string]bool{}
		for _, h := range recs {
			if sid := EncodeID(h.InstanceID); !seen[sid] {
				seen[sid] = true
				sids = append(sids, sid)
			}
		}
		ins, err := c.records(ctx, sids)
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
		}
		for _, h := range recs {
			if in := ins[EncodeID(h.InstanceID)]; in != nil {
				h.Kind = in.Kind
				if q.MatchHistory(h) {
					out = append(out, h)
				}
			}
		}
	}
	orderBySeq(out, func(h *store.HistoryRecord) (string, uint64, time.Time) { return h.InstanceID, h.Seq, h.Time })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []*store.HistoryRecord{}
	}
	return out, errors.Join(errs...)
}

// historyOf reads the history entries of instance id and passes them to
// fn with the decoded instance. A missing instance has no history; one
// whose record is damaged gets its records without a kind, and an error.
func (c *Core) historyOf(ctx context.Context, id string, fn func(in *store.Instance, entries []any)) error {
	spec, state, entries, err := c.ofInstance(ctx, EncodeID(id), "h")
	if err != nil || spec == "" {
		return err
	}
	in, err := DecodeInstance(id, spec, state)
	if err != nil {
		fn(&store.Instance{ID: id}, entries)
		return err
	}
	fn(in, entries)
	return nil
}

// LookupLogs implements store.Logs: by instance from the instance's list
// of entries, otherwise over the logs stream's time range.
func (c *Core) LookupLogs(ctx context.Context, q *store.Query) ([]*store.LogRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []*store.LogRecord
	var errs []error
	add := func(raw string) {
		l, err := decodeLog(raw)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if q.MatchLog(l) {
			out = append(out, l)
		}
	}
	if q.InstanceID != "" {
		_, _, es, err := c.ofInstance(ctx, EncodeID(q.InstanceID), "l")
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			add(asString(e))
		}
	} else if err := c.scan(ctx, "l", q, func(raw string) bool { add(raw); return true }); err != nil {
		return nil, err
	}
	orderBySeq(out, func(l *store.LogRecord) (string, uint64, time.Time) { return l.InstanceID, l.Seq, l.Time })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []*store.LogRecord{}
	}
	return out, errors.Join(errs...)
}

// orderBySeq sorts recs oldest first by time, except that the records of
// one instance keep their Seq order (callers' clocks may disagree by a few
// ms; the store's Seq is the true order): each instance's records are put,
// in Seq order, into the places its records hold in the time order.
func orderBySeq[T any](recs []T, key func(T) (string, uint64, time.Time)) {
	slices.SortStableFunc(recs, func(a, b T) int {
		_, _, ta := key(a)
		_, _, tb := key(b)
		return ta.Compare(tb)
	})
	places := map[string][]int{}
	for i, r := range recs {
		id, _, _ := key(r)
		places[id] = append(places[id], i)
	}
	for _, idx := range places {
		if len(idx) < 2 {
			continue
		}
		group := make([]T, len(idx))
		for j, i := range idx {
			group[j] = recs[i]
		}
		slices.SortStableFunc(group, func(a, b T) int {
			_, sa, _ := key(a)
			_, sb, _ := key(b)
			return cmp.Compare(sa, sb)
		})
		for j, i := range idx {
			recs[i] = group[j]
		}
	}
}

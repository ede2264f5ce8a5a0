package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// page is how many index keys a lookup reads per round trip.
const page = 256

// corruption collects the names of records a lookup left out.
type corruption []string

func (c *corruption) add(err error) { *c = append(*c, err.Error()) }

func (c corruption) err() error {
	if len(c) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d record(s) left out: %s", store.ErrCorrupt, len(c), strings.Join(c, "; "))
}

// scan pages through the index keys in [start, end), ascending or
// descending, calling fn for each until it returns false.
func (s *Store) scan(ctx context.Context, start, end string, desc bool, keysOnly bool, fn func(key string, val []byte) bool) error {
	return s.scanAt(ctx, nil, start, end, desc, keysOnly, fn)
}

// scanAt is scan at one revision: every page is read at *rev, or, when
// *rev is 0, at the revision of the first page, which it stores in *rev.
// A nil rev reads each page at the newest revision.
func (s *Store) scanAt(ctx context.Context, rev *int64, start, end string, desc bool, keysOnly bool, fn func(key string, val []byte) bool) error {
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page)}
		if rev != nil && *rev != 0 {
			opts = append(opts, clientv3.WithRev(*rev))
		}
		if desc {
			opts = append(opts, clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
		}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		resp, err := s.cli.Get(ctx, start, opts...)
		if err != nil {
			return err
		}
		if rev != nil && *rev == 0 {
			*rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if !fn(string(kv.Key), kv.Value) {
				return nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		last := string(resp.Kvs[len(resp.Kvs)-1].Key)
		if desc {
			end = last
		} else {
			start = last + "\x00"
		}
	}
}

// atOneRevision runs read, a read of several requests all made at the
// revision of its first, and runs it again from the start (so at the
// newest revision) when etcd compacted that revision away meanwhile (an
// operator's `etcdctl compact`, auto-compaction; rpctypes.ErrCompacted):
// a read that takes longer than what etcd keeps of its history would
// otherwise fail. It starts again while ctx lasts and, when the store has
// an op timeout, for at most that long.
func atOneRevision[T any](s *Store, ctx context.Context, read func() (T, error)) (T, error) {
	start := time.Now()
	for {
		v, err := read()
		if err != nil && errors.Is(err, rpctypes.ErrCompacted) && ctx.Err() == nil &&
			(s.opTimeout <= 0 || time.Since(start) < s.opTimeout) {
			continue
		}
		return v, err
	}
}

// bounds returns the key range of an index under base whose keys start with
// a time key, limited to q's time range.
func bounds(base string, q *store.Query) (string, string) {
	start, end := base, prefixEnd(base)
	if !q.Since.IsZero() {
		start = base + tkey(q.Since)
	}
	if !q.Until.IsZero() {
		end = base + tkey(q.Until)
	}
	return start, end
}

// LookupInstances implements store.History. A query by instance is one
// read. A query for Scheduled and Processing instances only walks the
// ready index and the claim records (what is pending, never the finished
// history); any other walks the creation index newest first inside the
// query's time range, skipping other kinds by the index value, and stops
// at the limit. Every read of the lookup (each walk's pages and the
// records they name) is at the revision of its first read, so the walks
// see one state of the store: an instance that moves between two wanted
// states while the lookup runs is found once, in the state it had at that
// revision, never twice nor not at all.
func (s *Store) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	return atOneRevision(s, ctx, func() ([]*store.Instance, error) { return s.lookupInstances(ctx, q) })
}

func (s *Store) lookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	if err := q.Validate(); err != nil {
		return nil, s.wrap("lookup instances", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("lookup instances", context.Background(), err)
	}
	defer cancel()
	var bad corruption
	var out []*store.Instance
	// rev is the revision every read of the lookup is made at (set by the
	// first page of the first walk).
	var rev int64
	seen := map[string]bool{}
	full := func() bool { return q.Limit > 0 && len(out) >= q.Limit }
	// fetch reads ids and adds those q matches; seqs, when set, are the
	// sequence numbers the creation index names them with (an instance
	// with another is not the one its entry meant: a stale entry).
	fetch := func(ids []string, seqs map[string]uint64, capped bool) error {
		ins, err := s.readInstances(ctx, ids, rev, &bad)
		if err != nil {
			return err
		}
		for _, in := range ins {
			if seqs != nil && seqs[in.ID] != in.Seq {
				continue
			}
			if q.MatchInstance(in) && !(capped && full()) && !seen[in.ID] {
				seen[in.ID] = true
				out = append(out, in)
			}
		}
		return nil
	}
	if len(q.IDs) > 0 && q.InstanceID == "" {
		out, err := store.LookupIDs(ctx, q, s.byIDs)
		return out, s.wrap("lookup instances", ctx, err)
	}
	if q.Parent != "" && q.InstanceID == "" {
		out, err := store.LookupShards(ctx, q, s.byIDs)
		return out, s.wrap("lookup instances", ctx, err)
	}
	if q.InstanceID != "" {
		if err := fetch([]string{q.InstanceID}, nil, true); err != nil {
			return nil, s.wrap("lookup instances", ctx, err)
		}
		return out, bad.err()
	}
	if pendingOnly(q.States) {
		err = s.lookupPending(ctx, q, &rev, func(ids []string) error { return fetch(ids, nil, false) })
		if err != nil {
			return nil, s.wrap("lookup instances", ctx, err)
		}
		slices.SortFunc(out, func(a, b *store.Instance) int {
			if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
				return c
			}
			return cmpUint(b.Seq, a.Seq)
		})
		if q.Limit > 0 && len(out) > q.Limit {
			out = out[:q.Limit]
		}
		return out, bad.err()
	}
	if err := s.scanCreated(ctx, q, &rev, &bad, fetch, full); err != nil {
		return nil, s.wrap("lookup instances", ctx, err)
	}
	return out, bad.err()
}

// scanCreated walks the creation index newest first, every page at *rev,
// and hands fetch (capped) the ids of q's kind in batches, with their
// sequence numbers, until full.
func (s *Store) scanCreated(ctx context.Context, q *store.Query, rev *int64, bad *corruption, fetch func([]string, map[string]uint64, bool) error, full func() bool) error {
	var ids []string
	seqs := map[string]uint64{}
	var ferr error
	err := s.walkCreated(ctx, rev, q.Since, q.Until, true, bad, func(e createdEnt) bool {
		if q.Kind != "" && e.K != q.Kind {
			return true
		}
		if _, dup := seqs[e.I]; dup {
			// Two entries of one ID in a batch of reads: read the
			// first now, the other (a stale one, or the newer) next.
			ferr = fetch(ids, seqs, true)
			ids, seqs = ids[:0], map[string]uint64{}
		}
		ids = append(ids, e.I)
		seqs[e.I] = e.S
		if ferr == nil && len(ids) == page/2 {
			ferr = fetch(ids, seqs, true)
			ids, seqs = ids[:0], map[string]uint64{}
		}
		return ferr == nil && !full()
	})
	if err == nil {
		err = ferr
	}
	if err == nil && len(ids) > 0 && !full() {
		err = fetch(ids, seqs, true)
	}
	return err
}

// pendingOnly reports whether states names only Scheduled and Processing
// (and at least one).
func pendingOnly(states []store.State) bool {
	if len(states) == 0 {
		return false
	}
	for _, st := range states {
		if st != store.Scheduled && st != store.Processing {
			return false
		}
	}
	return true
}

// lookupPending hands fn the ids of the Scheduled instances (from the
// ready index, whose values carry kind and creation time, so other kinds
// and times are skipped unread) and of the Processing ones (from the
// claim records, which may also name attempts that ended: fn filters)
// that q may want, in batches, every page read at *rev.
func (s *Store) lookupPending(ctx context.Context, q *store.Query, rev *int64, fn func([]string) error) error {
	var ids []string
	var ferr error
	flush := func() {
		if len(ids) > 0 && ferr == nil {
			ferr = fn(ids)
			ids = ids[:0]
		}
	}
	if slices.Contains(q.States, store.Scheduled) {
		rp := s.k.p + "r/"
		err := s.scanAt(ctx, rev, rp, prefixEnd(rp), false, false, func(key string, val []byte) bool {
			d, err := decodeDyn(key, val)
			if err != nil {
				return true // not a ready entry (a wake key), or quarantined at the next claim
			}
			c := nt(d.Created)
			if q.Kind != "" && d.Kind != q.Kind || !q.Since.IsZero() && c.Before(q.Since) || !q.Until.IsZero() && !c.Before(q.Until) {
				return true
			}
			ids = append(ids, d.ID)
			if len(ids) == page/2 {
				flush()
			}
			return ferr == nil
		})
		if err != nil {
			return err
		}
		flush()
	}
	if slices.Contains(q.States, store.Processing) {
		cp := s.k.claimRecPrefix()
		err := s.scanAt(ctx, rev, cp, prefixEnd(cp), false, false, func(key string, val []byte) bool {
			var r claimRec
			if decode(key, val, &r) != nil {
				return true // Rescue drops it
			}
			for _, id := range r.IDs {
				ids = append(ids, id)
				if len(ids) >= page/2 {
					flush()
				}
			}
			return ferr == nil
		})
		if err != nil {
			return err
		}
		flush()
	}
	return ferr
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// indexRef is one entry of a history or log index.
type indexRef struct {
	id   string
	n    string // hex sequence (history) or unique suffix (logs)
	t    string // time key
	kind string
}

// walkIndex pages through a time index (ht/, hk/<kind>/, lt/, lk/<kind>/)
// in q's range, keeping the entries whose digit (state or level) passes
// keep, and hands them to fn in batches.
func (s *Store) walkIndex(ctx context.Context, base string, q *store.Query, keep func(d byte) bool, fn func([]indexRef) error, done func() bool) error {
	start, end := bounds(base, q)
	var refs []indexRef
	var ferr error
	err := s.scan(ctx, start, end, false, false, func(key string, val []byte) bool {
		if len(val) == 0 || !keep(val[0]) {
			return true
		}
		parts := strings.Split(key[len(base):], "/")
		if len(parts) != 3 {
			return true
		}
		refs = append(refs, indexRef{t: parts[0], id: unesc(parts[1]), n: parts[2], kind: unesc(string(val[1:]))})
		if len(refs) == page/2 {
			ferr = fn(refs)
			refs = refs[:0]
		}
		return ferr == nil && !done()
	})
	if err == nil {
		err = ferr
	}
	if err == nil && len(refs) > 0 && !done() {
		err = fn(refs)
	}
	return err
}

// LookupHistory implements store.History. A query by instance reads
// its dynamic record, which holds its history. Any other walks the
// creation index oldest first (other kinds skipped by the index value) and
// reads the records it names in batches: a history record is never older
// than its instance's creation, so a query with a limit stops once it
// holds that many records older than the next instance's creation.
func (s *Store) LookupHistory(ctx context.Context, q *store.Query) ([]*store.HistoryRecord, error) {
	return atOneRevision(s, ctx, func() ([]*store.HistoryRecord, error) { return s.lookupHistory(ctx, q) })
}

func (s *Store) lookupHistory(ctx context.Context, q *store.Query) ([]*store.HistoryRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, s.wrap("lookup history", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("lookup history", context.Background(), err)
	}
	defer cancel()
	var bad corruption
	var out []*store.HistoryRecord
	var rev int64
	fetch := func(ids []string, seqs map[string]uint64) error {
		hs, err := s.readHistory(ctx, q, ids, seqs, rev, &bad)
		out = append(out, hs...)
		return err
	}
	if q.InstanceID != "" {
		if rev, err = s.revision(ctx); err == nil {
			err = fetch([]string{q.InstanceID}, nil)
		}
	} else {
		var ids []string
		var seqs map[string]uint64
		var ferr error
		last := int64(math.MinInt64) // creation time of the last entry walked
		// enough reports whether the limit's worth of records are older
		// than tk, the creation time key of every instance not yet read.
		enough := func(tk string) bool {
			if q.Limit <= 0 || len(out) < q.Limit {
				return false
			}
			sortHistory(out)
			out = out[:q.Limit]
			return tkey(out[len(out)-1].Time) < tk
		}
		flush := func() {
			ferr = fetch(ids, seqs)
			ids, seqs = ids[:0], nil
		}
		err = s.walkCreated(ctx, &rev, time.Time{}, q.Until, false, &bad, func(e createdEnt) bool {
			if e.C != last {
				// Every instance read so far was created before e.C.
				if len(ids) >= page/2 {
					if flush(); ferr != nil || enough(tkeyN(e.C)) {
						return false
					}
				}
				last = e.C
			}
			if q.Kind != "" && e.K != q.Kind {
				return true
			}
			if _, dup := seqs[e.I]; dup {
				if flush(); ferr != nil {
					return false
				}
			}
			if seqs == nil {
				seqs = map[string]uint64{}
			}
			ids = append(ids, e.I)
			seqs[e.I] = e.S
			return true
		})
		if err == nil {
			err = ferr
		}
		if err == nil && len(ids) > 0 {
			err = fetch(ids, seqs)
		}
	}
	if err != nil {
		return nil, s.wrap("lookup history", ctx, err)
	}
	sortHistory(out)
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, bad.err()
}

// readHistory returns the history records of the instances ids that q
// matches, read at revision rev, leaving out an instance whose Seq is not
// the one seqs (when set) names; an undecodable record is added to bad.
func (s *Store) readHistory(ctx context.Context, q *store.Query, ids []string, seqs map[string]uint64, rev int64, bad *corruption) ([]*store.HistoryRecord, error) {
	ops := make([]clientv3.Op, len(ids))
	for j, id := range ids {
		ops[j] = clientv3.OpGet(s.k.dyn(id), clientv3.WithRev(rev))
	}
	rs, err := s.read(ctx, ops)
	if err != nil {
		return nil, err
	}
	var out []*store.HistoryRecord
	for _, r := range rs {
		kvs := r.GetKvs()
		if len(kvs) == 0 {
			continue
		}
		d, err := decodeDyn(string(kvs[0].Key), kvs[0].Value)
		if err != nil {
			bad.add(err)
			continue
		}
		if seqs != nil && seqs[d.ID] != d.Seq {
			continue
		}
		for i := range d.Hist {
			if r := d.record(&d.Hist[i]); q.MatchHistory(r) {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// sortHistory orders history records oldest first by (Time, InstanceID,
// Seq), the order of store.PageHistory.
func sortHistory(hs []*store.HistoryRecord) {
	slices.SortFunc(hs, func(a, b *store.HistoryRecord) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		if c := strings.Compare(a.InstanceID, b.InstanceID); c != 0 {
			return c
		}
		return cmpUint(a.Seq, b.Seq)
	})
}

// AppendLogs implements store.Logs. Records are written in batches of one
// transaction each, with no compares: a log append never conflicts.
func (s *Store) AppendLogs(ctx context.Context, recs []*store.LogRecord) error {
	for _, r := range recs {
		if err := r.Validate(); err != nil {
			return s.wrap("append logs", ctx, err)
		}
		if len(r.Message) > s.maxValue {
			return s.wrap("append logs", ctx, fmt.Errorf("%w: log message of %d bytes for instance %s is over the etcd store's limit of %d", store.ErrTooLarge, len(r.Message), r.InstanceID, s.maxValue))
		}
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return s.wrap("append logs", context.Background(), err)
	}
	defer cancel()
	gs := make([]*group, len(recs))
	for i, r := range recs {
		s.mu.Lock()
		s.logCount++
		uniq := s.nonce + hex16(s.logCount)
		s.mu.Unlock()
		lr := logRec{ID: r.InstanceID, Kind: r.Kind, Attempt: r.Attempt, Level: r.Level, Time: tn(r.Time),
			Node: r.Node, Message: r.Message, Pos: min(i, 0xffff)}
		lv := string(rune('0' + r.Level))
		g := &group{}
		g.put(s.k.logKey(r.InstanceID, r.Time, uniq), mustJSON(&lr))
		g.put(s.k.logTime(r.Time, r.InstanceID, uniq), lv+esc(r.Kind))
		g.put(s.k.logKind(r.Kind, r.Time, r.InstanceID, uniq), lv)
		gs[i] = g
	}
	return s.wrap("append logs", ctx, s.commit(ctx, gs))
}

// LookupLogs implements store.Logs.
func (s *Store) LookupLogs(ctx context.Context, q *store.Query) ([]*store.LogRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, s.wrap("lookup logs", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("lookup logs", context.Background(), err)
	}
	defer cancel()
	var bad corruption
	var out []*store.LogRecord
	full := func() bool { return q.Limit > 0 && len(out) >= q.Limit }
	add := func(key string, val []byte, rev int64) {
		var l logRec
		if err := decode(key, val, &l); err != nil {
			bad.add(err)
			return
		}
		r := &store.LogRecord{InstanceID: l.ID, Kind: l.Kind, Attempt: l.Attempt, Level: l.Level, Time: nt(l.Time),
			Node: l.Node, Message: l.Message, Seq: uint64(rev)<<16 | uint64(l.Pos)}
		if q.MatchLog(r) && !full() {
			out = append(out, r)
		}
	}
	if q.InstanceID != "" {
		p := s.k.logPrefix(q.InstanceID)
		start, end := bounds(p, q)
		for {
			resp, err := s.cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(page))
			if err != nil {
				return nil, s.wrap("lookup logs", ctx, err)
			}
			for _, kv := range resp.Kvs {
				add(string(kv.Key), kv.Value, kv.ModRevision)
			}
			if !resp.More || len(resp.Kvs) == 0 || full() {
				break
			}
			start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
		return out, bad.err()
	}
	base := s.k.p + "lt/"
	if q.Kind != "" {
		base = s.k.p + "lk/" + esc(q.Kind) + "/"
	}
	keep := func(d byte) bool {
		return len(q.Levels) == 0 || slices.Contains(q.Levels, store.LogLevel(d-'0'))
	}
	err = s.walkIndex(ctx, base, q, keep, func(refs []indexRef) error {
		ops := make([]clientv3.Op, len(refs))
		for j, r := range refs {
			ops[j] = clientv3.OpGet(s.k.logPrefix(r.id) + r.t + r.n)
		}
		rs, err := s.read(ctx, ops)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if kvs := r.GetKvs(); len(kvs) > 0 {
				add(string(kvs[0].Key), kvs[0].Value, kvs[0].ModRevision)
			}
		}
		return nil
	}, full)
	if err != nil {
		return nil, s.wrap("lookup logs", ctx, err)
	}
	return out, bad.err()
}

// Prune implements store.Pruner. Each rule walks its time index from the
// oldest entry and stops at the limit, so a call costs what it removes.
func (s *Store) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("prune", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("prune", context.Background(), err)
	}
	defer cancel()
	res := &store.PruneResult{}
	err = s.prune(ctx, p, res)
	if err == nil {
		// Fold the counters' deltas (inspect.go), so they do not pile up
		// when nobody reads the counts.
		_, err = s.readCounts(ctx, -1)
	}
	return res, s.wrap("prune", ctx, err)
}

func (s *Store) prune(ctx context.Context, p *store.PruneParams, res *store.PruneResult) error {
	limit := p.Limit
	if limit == 0 {
		limit = 1000
	}
	if !p.FinishedBefore.IsZero() {
		if err := s.pruneFinished(ctx, p.FinishedBefore, 0, limit, res); err != nil {
			return err
		}
	}
	if p.KeepFinished > 0 {
		if err := s.pruneFinished(ctx, time.Time{}, p.KeepFinished, limit, res); err != nil {
			return err
		}
	}
	if !p.HistoryBefore.IsZero() {
		n, err := s.pruneHistory(ctx, p.HistoryBefore, limit)
		if err != nil {
			return err
		}
		res.History += n
	}
	if !p.LogsBefore.IsZero() {
		base := s.k.p + "lt/"
		var gs []*group
		err := s.walkIndex(ctx, base, &store.Query{Until: p.LogsBefore}, func(byte) bool { return true }, func(refs []indexRef) error {
			for _, r := range refs {
				t, _ := parseHex16(r.t)
				tm := nt(int64(t ^ 1<<63))
				g := &group{}
				g.del(s.k.logTime(tm, r.id, r.n))
				g.del(s.k.logKind(r.kind, tm, r.id, r.n))
				g.del(s.k.logPrefix(r.id) + r.t + r.n)
				gs = append(gs, g)
			}
			return nil
		}, func() bool { return len(gs) >= limit })
		if err != nil {
			return err
		}
		gs = gs[:min(len(gs), limit)]
		if err := s.commit(ctx, gs); err != nil {
			return err
		}
		res.Logs += len(gs)
	}
	return nil
}

// pruneHistory removes up to limit history records older than before from
// the instances that hold them: it walks the creation index up to before
// (a record is never older than its instance) and rewrites each record
// that keeps old history without it, guarded by its revision (a Scheduled
// instance's ready copy too, so a claim does not bring the old records
// back). It returns how many records it removed.
func (s *Store) pruneHistory(ctx context.Context, before time.Time, limit int) (int, error) {
	cut := tn(before)
	removed := 0
	var ids []string
	prune := func() error {
		for round := 0; len(ids) > 0 && removed < limit; round++ {
			if round > maxRounds {
				return errors.New("prune history: gave up after repeated conflicts")
			}
			ds, revs, _, err := s.readDyn(ctx, ids)
			if err != nil {
				return err
			}
			var gs []*group
			var again []string
			counts := map[*group]int{}
			budget := limit - removed
			for j, d := range ds {
				if d == nil || budget == 0 {
					continue
				}
				old := 0
				for old < len(d.Hist) && d.Hist[old].Time < cut && old < budget {
					old++
				}
				if old == 0 {
					continue
				}
				budget -= old
				e := d.next()
				e.Hist = append([]histEnt(nil), d.Hist[old:]...)
				g := &group{guards: []guard{{s.k.dyn(d.ID), revs[j]}}, ref: j}
				dv := mustJSON(&e)
				g.put(s.k.dyn(d.ID), dv)
				if e.State == store.Scheduled {
					g.put(s.k.ready(&e), dv)
				}
				counts[g] = old
				gs = append(gs, g)
			}
			if err := s.commit(ctx, gs); err != nil {
				return err
			}
			for _, g := range gs {
				if g.stale {
					again = append(again, ids[g.ref])
					continue
				}
				removed += counts[g]
			}
			ids = again
		}
		ids = ids[:0]
		return nil
	}
	var perr error
	err := s.walkCreated(ctx, nil, time.Time{}, before, false, &corruption{}, func(e createdEnt) bool {
		if !slices.Contains(ids, e.I) {
			ids = append(ids, e.I)
		}
		if len(ids) == page/2 {
			perr = prune()
		}
		return perr == nil && removed < limit
	})
	if err == nil {
		err = perr
	}
	if err == nil && removed < limit {
		err = prune()
	}
	return removed, err
}

// removeInstances deletes the finished instances w's entries name, with
// their history, logs, index entries and the unique key they still hold,
// and marks in w each entry it removed or found stale (its instance gone,
// no longer final, or finished at another time). Log index entries go
// first and the records last, so a call cut short is finished by the
// next one. It returns how many instances it removed.
func (s *Store) removeInstances(ctx context.Context, w *finWalk, res *store.PruneResult) (int, error) {
	removed := 0
	for _, f := range w.refs {
		id := f.ID
		legacy := w.keys[f.key].legacy
		rs, err := s.read(ctx, []clientv3.Op{
			clientv3.OpGet(s.k.dyn(id)),
			clientv3.OpGet(s.k.logPrefix(id), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		})
		if err != nil {
			return removed, err
		}
		dkv := rs[0].GetKvs()
		var d *dynRec
		if len(dkv) > 0 {
			if d, err = decodeDyn(string(dkv[0].Key), dkv[0].Value); err != nil {
				return removed, err
			}
		}
		if d == nil || !d.State.Final() || d.Finished != f.T {
			// A stale entry: only the index entry is left of it.
			w.markDone(f)
			if legacy {
				g := &group{}
				g.del(f.key)
				if err := s.commit(ctx, []*group{g}); err != nil {
					return removed, err
				}
			}
			continue
		}
		gs, lp := s.logDeletes(id, d.Kind, rs[1].GetKvs(), guard{})
		nl := len(rs[1].GetKvs())
		last := &group{guards: []guard{{s.k.dyn(id), dkv[0].ModRevision}}}
		last.del(lp, clientv3.WithPrefix())
		last.del(s.k.byCreated(d))
		last.del(s.k.static(id))
		last.del(s.k.progress(id))
		if legacy {
			last.del(f.key)
		}
		last.del(s.k.dyn(id))
		s.countMove(last, d, d.State, 0, time.Time{})
		if d.UniqueKey != "" {
			ug, err := s.uniqueDelete(ctx, d.UniqueKey, id)
			if err != nil {
				return removed, err
			}
			if ug != nil {
				last.guards = append(last.guards, *ug)
				last.del(ug.key)
			}
		}
		gs = append(gs, last)
		if err := s.commit(ctx, gs); err != nil {
			return removed, err
		}
		if last.applied {
			w.markDone(f)
			w.removed = append(w.removed, d)
			removed++
			res.Instances++
			res.History += len(d.Hist)
			res.Logs += nl
		}
	}
	return removed, nil
}

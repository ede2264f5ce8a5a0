package etcdstore

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// The finished index (retention's: Prune walks it oldest first) is
// batched (batches.go): a transaction that finishes instances puts one key
// per time bucket listing them, as it puts one count delta (inspect.go),
// instead of one key per instance.
//
//	P f/<bucket>+<nonce><n>   a batch: value = JSON [{"i": id, "t": finished}]
//	P f/<finished>/<id>       layout 2's one key per instance, value = id
//	                          (still read and deleted, never written)
//
// Retry and Delete drop their instances' entries from the batches after
// their own write; an entry left behind (a crash between) is stale: its
// instance is gone, no longer final, or finished at another time, and
// Prune drops it when it reaches it. Prune rewrites a batch without the
// entries it removed (guarded on the batch's revision) and deletes it
// once empty. KeepFinished counts the finished instances from the
// counters (inspect.go), not from the index.

// finEnt is one entry of a finished batch: an instance and its finish time.
type finEnt struct {
	ID string `json:"i"`
	T  int64  `json:"t"`
}

func (k keys) finishedPrefix() string { return k.p + "f/" }

// legacyFinished is the layout 2 finished-index key of d's instance id.
func (k keys) legacyFinished(d *dynRec, id string) string {
	return k.finishedPrefix() + tkey(nt(d.Finished)) + "/" + esc(id)
}

// addFinished lists e, which g makes final, in the finished batch of the
// transaction that applies g.
func (s *Store) addFinished(g *group, e *dynRec) {
	g.fin = append(g.fin, finEnt{ID: e.ID, T: e.Finished})
	g.size += len(e.ID) + 32
}

// finishedOps returns the finished-batch puts of a transaction that
// applies gs: one per time bucket of the instances they finish.
func (s *Store) finishedOps(gs []*group) []clientv3.Op {
	var order []int64
	by := map[int64][]finEnt{}
	for _, g := range gs {
		for _, e := range g.fin {
			b := bucketStart(e.T)
			if by[b] == nil {
				order = append(order, b)
			}
			by[b] = append(by[b], e)
		}
	}
	ops := make([]clientv3.Op, 0, len(order))
	for _, b := range order {
		ops = append(ops, clientv3.OpPut(s.batchKey(s.k.finishedPrefix(), b), mustJSON(by[b])))
	}
	return ops
}

// dropFinished removes the finished-index entries of ds (records as
// they were before a Retry or Delete made them not final or gone).
func (s *Store) dropFinished(ctx context.Context, ds []*dynRec) error {
	pfx := map[string]bool{}
	drop := map[finEnt]bool{}
	for _, d := range ds {
		if d != nil && d.State.Final() {
			pfx[batchPrefix(s.k.finishedPrefix(), d.Finished)] = true
			drop[finEnt{ID: d.ID, T: d.Finished}] = true
		}
	}
	return dropBatched(ctx, s, pfx, func(e finEnt) bool { return drop[e] })
}

// finRef is one entry of the finished index as Prune reads it.
type finRef struct {
	finEnt
	key string // the index key that holds it
}

// finKey is one key of the finished index as Prune read it: for a batch,
// its revision and every entry, so Prune can rewrite it without the ones
// it removed.
type finKey struct {
	rev    int64
	legacy bool
	ents   []finEnt
	done   map[int]bool // entries removed or found stale
}

// finWalk is one walk of the finished index.
type finWalk struct {
	keys map[string]*finKey
	refs []finRef
	bad  int // keys that did not decode (left alone)

	removed []*dynRec // the records of the instances removed
}

// parseFin decodes the finished-index key key (value val) under base.
func parseFin(base, key string, val []byte) ([]finEnt, bool, bool) {
	tail := key[len(base):]
	if len(tail) < 17 {
		return nil, false, false
	}
	t, ok := parseHex16(tail[:16])
	if !ok {
		return nil, false, false
	}
	if tail[16] == '/' {
		return []finEnt{{ID: string(val), T: int64(t ^ 1<<63)}}, true, true
	}
	if tail[16] != '+' {
		return nil, false, false
	}
	var ents []finEnt
	if decode(key, val, &ents) != nil {
		return nil, false, false
	}
	return ents, false, true
}

// walkFinished reads the finished index oldest first up to end and returns
// the (at most) n entries of the earliest finish times before before,
// exactly: a batch's key time is its earliest entry's, so once n
// entries are held the walk goes on only over keys below the n-th's time.
func (s *Store) walkFinished(ctx context.Context, end string, before int64, n int) (*finWalk, error) {
	base := s.k.finishedPrefix()
	w := &finWalk{keys: map[string]*finKey{}}
	limitT := int64(0)
	limited := false
	trim := func() {
		slices.SortFunc(w.refs, func(a, b finRef) int { return cmp.Or(cmp.Compare(a.T, b.T), strings.Compare(a.ID, b.ID)) })
		if len(w.refs) >= n {
			w.refs = w.refs[:n]
			limitT, limited = w.refs[n-1].T, true
		}
	}
	err := s.scanRevs(ctx, base, end, func(key string, val []byte, rev int64) bool {
		if t, ok := parseHex16(key[len(base):min(len(key), len(base)+16)]); ok && limited && int64(t^1<<63) > limitT {
			return false
		}
		ents, legacy, ok := parseFin(base, key, val)
		if !ok {
			w.bad++
			return true
		}
		w.keys[key] = &finKey{rev: rev, legacy: legacy, ents: ents, done: map[int]bool{}}
		for _, e := range ents {
			if e.T < before {
				w.refs = append(w.refs, finRef{e, key})
			}
		}
		if len(w.refs) >= n {
			trim()
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	trim()
	return w, nil
}

// pruneFinished removes up to limit finished instances, oldest first:
// those finished before before (when set) or, when keep > 0, those beyond
// the newest keep.
func (s *Store) pruneFinished(ctx context.Context, before time.Time, keep, limit int, res *store.PruneResult) error {
	base := s.k.finishedPrefix()
	end, cut := prefixEnd(base), int64(math.MaxInt64)
	if !before.IsZero() {
		// A batch's key time is its earliest entry's: one at before or
		// later holds nothing finished before it.
		end, cut = base+tkey(before), tn(before)
	}
	want := limit
	if keep > 0 {
		all, err := s.readCounts(ctx, -1)
		if err != nil {
			return err
		}
		var final int64
		for _, g := range all {
			for st, n := range g.States {
				if store.State(st).Final() {
					final += n
				}
			}
		}
		want = min(limit, int(final)-keep)
	}
	// A walk's stale entries do not count: walk again for the rest while
	// walks still find something to drop.
	for pass := 0; want > 0 && pass < 4; pass++ {
		w, err := s.walkFinished(ctx, end, cut, want)
		if err != nil {
			return err
		}
		if len(w.refs) == 0 {
			return nil
		}
		removed, err := s.removeInstances(ctx, w, res)
		if err != nil {
			return err
		}
		if err := s.rewriteBatches(ctx, w); err != nil {
			return err
		}
		if err := s.dropCreated(ctx, w.removed); err != nil {
			return err
		}
		want -= removed
	}
	return nil
}

// rewriteBatches writes each batch of w that lost entries without them
// (deleting it when none is left), guarded on the revision its read
// found: a batch another pruner changed meanwhile is left to it (its
// removed entries are stale from now on, dropped by a later walk).
func (s *Store) rewriteBatches(ctx context.Context, w *finWalk) error {
	var gs []*group
	for key, fk := range w.keys {
		if fk.legacy || len(fk.done) == 0 || fk.rev == 0 {
			continue
		}
		var rest []finEnt
		for i, e := range fk.ents {
			if !fk.done[i] {
				rest = append(rest, e)
			}
		}
		g := &group{guards: []guard{{key, fk.rev}}}
		if len(rest) == 0 {
			g.del(key)
		} else {
			g.put(key, mustJSON(rest))
		}
		gs = append(gs, g)
	}
	return s.commit(ctx, gs)
}

// markDone marks the entry r of w as removed or stale.
func (w *finWalk) markDone(r finRef) {
	fk := w.keys[r.key]
	for i, e := range fk.ents {
		if e == r.finEnt {
			fk.done[i] = true
		}
	}
}

// scanRevs pages through the keys in [start, end) ascending, calling fn
// with each key's value and ModRevision until it returns false.
func (s *Store) scanRevs(ctx context.Context, start, end string, fn func(key string, val []byte, rev int64) bool) error {
	for {
		resp, err := s.cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(page))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if !fn(string(kv.Key), kv.Value, kv.ModRevision) {
				return nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

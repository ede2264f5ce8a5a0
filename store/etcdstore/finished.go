package etcdstore

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// The finished index (retention's: Prune walks it oldest first) is
// batched (batches.go): a transaction that finishes instances puts one key
// per time bucket listing them, as it puts one count delta (inspect.go),
// instead of one key per instance.
//
//	P fb/<bucket>+<nonce><n>  a batch: value = JSON [{"i": id, "t": finished}]
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
		ops = append(ops, clientv3.OpPut(s.batchKey(s.k.finishedBatchPrefix(), b), mustJSON(by[b])))
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
			pfx[batchPrefix(s.k.finishedBatchPrefix(), d.Finished)] = true
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

// parseFin decodes the finished-index key key (value val) under base: a
// batch, or layout 2's key when old.
func parseFin(base, key string, val []byte, old bool) ([]finEnt, bool) {
	tail := key[len(base):]
	t, ok := keyTime(tail)
	switch {
	case ok && old && len(tail) > 17 && tail[16] == '/':
		return []finEnt{{ID: string(val), T: t}}, true
	case ok && !old && len(tail) > 17 && tail[16] == '+':
		var ents []finEnt
		if decode(key, val, &ents) == nil {
			return ents, true
		}
	}
	return nil, false
}

// walkFinished reads the finished index (both layouts) oldest first and
// returns the (at most) n entries of the earliest finish times before
// before, exactly: a bucket's keys hold entries of its time or later, so
// once n entries are held the walk goes on only over buckets below the
// n-th's time.
func (s *Store) walkFinished(ctx context.Context, before int64, n int) (*finWalk, error) {
	iw := indexWalk{newBase: s.k.finishedBatchPrefix(), oldBase: s.k.finishedPrefix(), lo: math.MinInt64, hi: before}
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
	err := iw.run(ctx, s, nil, func(b int64, kvs []*mvccpb.KeyValue, old []bool) bool {
		if limited && b > limitT {
			return false
		}
		for i, kv := range kvs {
			base := iw.newBase
			if old[i] {
				base = iw.oldBase
			}
			key := string(kv.Key)
			ents, ok := parseFin(base, key, kv.Value, old[i])
			if !ok {
				w.bad++
				continue
			}
			w.keys[key] = &finKey{rev: kv.ModRevision, legacy: old[i], ents: ents, done: map[int]bool{}}
			for _, e := range ents {
				if e.T < before {
					w.refs = append(w.refs, finRef{e, key})
				}
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
	cut := int64(math.MaxInt64)
	if !before.IsZero() {
		cut = tn(before)
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
		w, err := s.walkFinished(ctx, cut, want)
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

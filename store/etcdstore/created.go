package etcdstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The creation index (lookups walk it newest first, history lookups and
// history retention oldest first) is batched (batches.go): an Enqueue
// transaction puts one key per time bucket listing the instances it
// creates, instead of one key per instance.
//
//	P icb/<bucket>+<nonce><n>  a batch: value = JSON [{"c": created, "s": seq, "k": kind, "i": id}]
//	P ic/<created><seq>        layout 2's one key per instance, value = <kind>/<id>
//	                           (still read and deleted, never written)
//
// Delete and Prune drop their instances' entries after their own write.
// An entry left behind (a crash between) names an instance that is gone,
// or whose ID was enqueued again with another sequence number: lookups
// skip an entry whose instance's Seq is not the entry's.

// createdEnt is one entry of the creation index.
type createdEnt struct {
	C int64  `json:"c"` // created, Unix ns
	S uint64 `json:"s"` // sequence number
	K string `json:"k"` // kind
	I string `json:"i"` // id
}

// addCreated lists d's instance in the creation batch of the transaction
// that applies g.
func (s *Store) addCreated(g *group, d *dynRec) {
	g.created = append(g.created, createdEnt{C: d.Created, S: d.Seq, K: d.Kind, I: d.ID})
	g.size += len(d.ID) + len(d.Kind) + 64
}

// createdOps returns the creation-batch puts of a transaction that
// applies gs: one per time bucket of the instances they create.
func (s *Store) createdOps(gs []*group) []clientv3.Op {
	var order []int64
	by := map[int64][]createdEnt{}
	for _, g := range gs {
		for _, e := range g.created {
			b := bucketStart(e.C)
			if by[b] == nil {
				order = append(order, b)
			}
			by[b] = append(by[b], e)
		}
	}
	ops := make([]clientv3.Op, 0, len(order))
	for _, b := range order {
		ops = append(ops, clientv3.OpPut(s.batchKey(s.k.createdBatchPrefix(), b), mustJSON(by[b])))
	}
	return ops
}

// dropCreated removes the creation-index entries of ds (records of
// instances just removed).
func (s *Store) dropCreated(ctx context.Context, ds []*dynRec) error {
	pfx := map[string]bool{}
	drop := map[createdEnt]bool{}
	for _, d := range ds {
		if d != nil {
			pfx[batchPrefix(s.k.createdBatchPrefix(), d.Created)] = true
			drop[createdEnt{C: d.Created, S: d.Seq, K: d.Kind, I: d.ID}] = true
		}
	}
	return dropBatched(ctx, s, pfx, func(e createdEnt) bool { return drop[e] })
}

// dropIndexed removes the creation and finished-index entries of ds
// (records of instances just deleted).
func (s *Store) dropIndexed(ctx context.Context, ds []*dynRec) error {
	if err := s.dropFinished(ctx, ds); err != nil {
		return err
	}
	return s.dropCreated(ctx, ds)
}

// parseCreated decodes the creation-index key key (value val) under base:
// a batch, or layout 2's key when old.
func parseCreated(base, key string, val []byte, old bool) ([]createdEnt, error) {
	tail := key[len(base):]
	t, ok := keyTime(tail)
	switch {
	case ok && !old && len(tail) > 16 && tail[16] == '+':
		var ents []createdEnt
		if err := decode(key, val, &ents); err != nil {
			return nil, err
		}
		return ents, nil
	case ok && old && len(tail) == 32:
		seq, sok := parseHex16(tail[16:])
		kind, id, vok := parseCreatedVal(val)
		if sok && vok {
			return []createdEnt{{C: t, S: seq, K: kind, I: id}}, nil
		}
	}
	return nil, fmt.Errorf("etcd key %q: creation-index entry is neither a batch nor <time><seq> = <kind>/<id>", key)
}

// walkCreated hands fn the entries of the creation index (both layouts)
// created in [since, until) (zero: unbounded), in creation order
// (Created, then Seq; newest first when desc), until fn returns false;
// every page read at *rev (set by the first when 0; nil: a revision of
// the walk's own). Keys that do not decode are added to bad.
func (s *Store) walkCreated(ctx context.Context, rev *int64, since, until time.Time, desc bool, bad *corruption, fn func(createdEnt) bool) error {
	w := indexWalk{newBase: s.k.createdBatchPrefix(), oldBase: s.k.createdPrefix(), lo: math.MinInt64, hi: math.MaxInt64, desc: desc}
	if !since.IsZero() {
		w.lo = tn(since)
	}
	if !until.IsZero() {
		w.hi = tn(until)
	}
	// The entries of one bucket are merged before any is handed on: a
	// bucket's keys hold entries of any time inside it.
	return w.run(ctx, s, rev, func(_ int64, kvs []*mvccpb.KeyValue, old []bool) bool {
		var buf []createdEnt
		for i, kv := range kvs {
			base := w.newBase
			if old[i] {
				base = w.oldBase
			}
			ents, err := parseCreated(base, string(kv.Key), kv.Value, old[i])
			if err != nil {
				bad.add(err)
				continue
			}
			buf = append(buf, ents...)
		}
		slices.SortFunc(buf, func(a, b createdEnt) int {
			c := cmp.Or(cmp.Compare(a.C, b.C), cmp.Compare(a.S, b.S))
			if desc {
				return -c
			}
			return c
		})
		for _, e := range buf {
			if e.C >= w.lo && e.C < w.hi && !fn(e) {
				return false
			}
		}
		return true
	})
}

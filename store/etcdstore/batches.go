package etcdstore

import (
	"context"
	"errors"
	"math"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Batched index keys (layout 3). The creation index (icb/) and the
// finished index (fb/) hold one key per transaction and time bucket,
// listing the instances the transaction created or finished in that
// bucket, instead of one key per instance:
//
//	<index>/<bucket start>+<nonce><n>   value = JSON list of entries
//
// A bucket is bucketWidth of time: an entry's time t lies in
// [start, start+bucketWidth), so the keys of a bucket sit together in key
// order, after every key of an earlier bucket, and a walk that merges the
// entries of one bucket at a time reads them in exact time order. Layout
// 2's keys, one per instance (ic/<time><seq>, f/<time>/<id>), are walked
// beside them (indexWalk), each in the bucket of its time, so a walk
// reads both layouts as one. They live under prefixes of their own so
// that processes of layout 2 still running during a rolling upgrade never
// meet them: such a process's lookups leave out the instances enqueued
// by upgraded ones (finished ones: its lookups by state read the ready
// index and claim records), and its Prune does not reach their finished
// batches.
//
// An entry goes stale when its instance changes without its batch being
// rewritten (a crash between the two writes): readers check an entry
// against the instance's record and skip it, and removals drop it.

// bucketWidth is the time one bucket of a batched index spans.
const bucketWidth = int64(100e6) // 100 ms in ns

// bucketStart returns the start of the bucket of time t (Unix ns).
func bucketStart(t int64) int64 {
	b := t / bucketWidth
	if t < 0 && t%bucketWidth != 0 {
		b--
	}
	return b * bucketWidth
}

// tkeyN is tkey of a time given in Unix ns.
func tkeyN(t int64) string { return hex16(uint64(t) ^ 1<<63) }

// keyTime returns the time of an index key whose tail (after the index's
// prefix) starts with a time key.
func keyTime(tail string) (int64, bool) {
	if len(tail) < 16 {
		return 0, false
	}
	v, ok := parseHex16(tail[:16])
	return int64(v ^ 1<<63), ok
}

// batchSeq numbers this process's batch keys (with the handle's nonce,
// they are unique).
var batchSeq atomic.Uint64

// batchPrefix is the prefix of the batch keys of index base (ending in
// "/") for the bucket of time t.
func batchPrefix(base string, t int64) string { return base + tkeyN(bucketStart(t)) + "+" }

// batchKey is a new batch key of index base for the bucket of time t.
func (s *Store) batchKey(base string, t int64) string {
	return batchPrefix(base, t) + s.nonce + hex16(batchSeq.Add(1))
}

// dropBatched removes the entries drop selects from the batch keys under
// the bucket prefixes prefixes: each key that held one is rewritten
// without it, guarded on its revision (read again when another writer
// changed it meanwhile), or deleted once empty.
func dropBatched[T any](ctx context.Context, s *Store, prefixes map[string]bool, drop func(T) bool) error {
	for p := range prefixes {
		for round := 0; ; round++ {
			if round > maxRounds {
				return errors.New("drop index entries: gave up after repeated conflicts")
			}
			resp, err := s.cli.Get(ctx, p, clientv3.WithPrefix())
			if err != nil {
				return err
			}
			var gs []*group
			for _, kv := range resp.Kvs {
				var ents []T
				if decode(string(kv.Key), kv.Value, &ents) != nil {
					continue
				}
				var rest []T
				for _, e := range ents {
					if !drop(e) {
						rest = append(rest, e)
					}
				}
				if len(rest) == len(ents) {
					continue
				}
				g := &group{guards: []guard{{string(kv.Key), kv.ModRevision}}}
				if len(rest) == 0 {
					g.del(string(kv.Key))
				} else {
					g.put(string(kv.Key), mustJSON(rest))
				}
				gs = append(gs, g)
			}
			if err := s.commit(ctx, gs); err != nil {
				return err
			}
			stale := false
			for _, g := range gs {
				stale = stale || g.stale
			}
			if !stale {
				break
			}
		}
	}
	return nil
}

func (k keys) createdBatchPrefix() string  { return k.p + "icb/" }
func (k keys) finishedBatchPrefix() string { return k.p + "fb/" }

// pager reads the keys of [start, end) a page at a time, ascending or
// descending, every page at *rev (set by the first page read when 0).
type pager struct {
	s          *Store
	rev        *int64
	start, end string
	desc, done bool
	kvs        []*mvccpb.KeyValue
}

// peek returns the next key, or nil at the end.
func (p *pager) peek(ctx context.Context) (*mvccpb.KeyValue, error) {
	if len(p.kvs) == 0 && !p.done {
		opts := []clientv3.OpOption{clientv3.WithRange(p.end), clientv3.WithLimit(page)}
		if *p.rev != 0 {
			opts = append(opts, clientv3.WithRev(*p.rev))
		}
		if p.desc {
			opts = append(opts, clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
		}
		resp, err := p.s.cli.Get(ctx, p.start, opts...)
		if err != nil {
			return nil, err
		}
		if *p.rev == 0 {
			*p.rev = resp.Header.Revision
		}
		p.kvs = resp.Kvs
		p.done = !resp.More || len(resp.Kvs) == 0
		if n := len(resp.Kvs); n > 0 {
			if last := string(resp.Kvs[n-1].Key); p.desc {
				p.end = last
			} else {
				p.start = last + "\x00"
			}
		}
	}
	if len(p.kvs) == 0 {
		return nil, nil
	}
	return p.kvs[0], nil
}

func (p *pager) pop() { p.kvs = p.kvs[1:] }

// indexWalk walks a batched index and layout 2's index of the same kind
// together, bucket by bucket (ascending or descending), calling fn with
// the keys of each bucket, until fn returns false. Both indexes' keys
// start with a time key after their prefix (newBase, oldBase), from which
// the bucket is read; lo and hi (Unix ns, inclusive and exclusive) bound
// the buckets walked.
type indexWalk struct {
	newBase, oldBase string
	lo, hi           int64 // time bounds; math.MinInt64, math.MaxInt64: none
	desc             bool
}

func (w indexWalk) run(ctx context.Context, s *Store, rev *int64, fn func(bucket int64, kvs []*mvccpb.KeyValue, old []bool) bool) error {
	if rev == nil {
		rev = new(int64)
	}
	rng := func(base string) (string, string) {
		start, end := base, prefixEnd(base)
		if w.lo != math.MinInt64 {
			start = base + tkeyN(bucketStart(w.lo))
		}
		if w.hi != math.MaxInt64 {
			end = base + tkeyN(bucketStart(w.hi-1)+bucketWidth)
		}
		return start, end
	}
	ps := [2]*pager{}
	bases := [2]string{w.newBase, w.oldBase}
	for i, b := range bases {
		start, end := rng(b)
		ps[i] = &pager{s: s, rev: rev, start: start, end: end, desc: w.desc}
	}
	bucketOf := func(i int, kv *mvccpb.KeyValue) int64 {
		t, _ := keyTime(string(kv.Key)[len(bases[i]):])
		return bucketStart(t)
	}
	for {
		var heads [2]*mvccpb.KeyValue
		for i, p := range ps {
			kv, err := p.peek(ctx)
			if err != nil {
				return err
			}
			heads[i] = kv
		}
		if heads[0] == nil && heads[1] == nil {
			return nil
		}
		var b int64
		first := true
		for i, h := range heads {
			if h == nil {
				continue
			}
			hb := bucketOf(i, h)
			if first || !w.desc && hb < b || w.desc && hb > b {
				b, first = hb, false
			}
		}
		var kvs []*mvccpb.KeyValue
		var old []bool
		for i, p := range ps {
			for {
				kv, err := p.peek(ctx)
				if err != nil {
					return err
				}
				if kv == nil || bucketOf(i, kv) != b {
					break
				}
				kvs, old = append(kvs, kv), append(old, i == 1)
				p.pop()
			}
		}
		if !fn(b, kvs, old) {
			return nil
		}
	}
}

package etcdstore

import (
	"context"
	"errors"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Batched index keys (layout 3). The creation index (ic/) and the finished
// index (f/) hold one key per transaction and time bucket, listing the
// instances the transaction created or finished in that bucket, instead
// of one key per instance:
//
//	<index>/<bucket start>+<nonce><n>   value = JSON list of entries
//
// A bucket is bucketWidth of time: an entry's time t lies in
// [start, start+bucketWidth), so the keys of a bucket sit together in key
// order, after every key of an earlier bucket, and a walk that merges the
// entries of one bucket at a time reads them in exact time order. Layout
// 2's one key per instance (<index>/<time><rest>) falls in the bucket of
// its time too, so a walk reads both layouts as one.
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

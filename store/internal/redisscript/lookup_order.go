package redisscript

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"time"
)

// A kind's bucket of one second holds the IDs created in it in enqueue
// order, so a lookup that wants the newest few of a second must know
// where each of them stands in the lookup's order (CreatedAt, then Seq).
// Reading every instance of a dense second whole (28,000 in a second of
// a fast fill) cost a page read some 150 ms on Redis, and a search that
// reads ten pages crossed such seconds again and again. For a second of
// more than bigBucket IDs, the lookup reads the order keys of its IDs
// alone (the order_keys script: two numbers an instance), sorts them, and
// reads whole only the newest it needs. The sorted keys are kept for a
// while (orderCache), checked against the bucket's bytes, so the next page
// of the same second reads only its own instances.

// bigBucket is the size of a second's bucket from which a limited lookup
// reads the order keys first.
const bigBucket = 2000

// orderCacheSize bounds the seconds whose sorted order keys a Core keeps
// (about 40 bytes an ID: 1.2 MB for a second of 30,000).
const orderCacheSize = 8

// orderKey is where one instance stands in the lookup order.
type orderKey struct {
	created int64 // CreatedAt, us
	seq     uint64
	sid     string // stored ID
}

// orderCache keeps the sorted order keys of the big seconds read lately.
type orderCache struct {
	mu      sync.Mutex
	seed    maphash.Seed
	entries map[orderSecond]*orderEntry
	tick    uint64
}

// orderSecond names one bucket.
type orderSecond struct {
	kind string
	sec  int64
}

// orderEntry is one bucket's sorted keys, valid while its bytes hash to
// sum.
type orderEntry struct {
	sum  uint64
	keys []orderKey // newest first
	used uint64
}

// orderOf returns the order keys of the stored IDs sids of kind's bucket
// of second sec, whose bytes are raw, newest first; instances that are
// gone are left out.
func (c *Core) orderOf(ctx context.Context, kind string, sec int64, raw string, sids []string) ([]orderKey, error) {
	oc := &c.order
	oc.mu.Lock()
	if oc.entries == nil {
		oc.seed = maphash.MakeSeed()
		oc.entries = map[orderSecond]*orderEntry{}
	}
	seed := oc.seed
	oc.mu.Unlock()
	sum := maphash.String(seed, raw)
	at := orderSecond{kind, sec}
	oc.mu.Lock()
	if e := oc.entries[at]; e != nil && e.sum == sum {
		oc.tick++
		e.used = oc.tick
		keys := e.keys
		oc.mu.Unlock()
		return keys, nil
	}
	oc.mu.Unlock()

	keys := make([]orderKey, 0, len(sids))
	for i := 0; i < len(sids); i += 5000 {
		part := sids[i:min(i+5000, len(sids))]
		v, err := c.run(ctx, OrderKeys, part...)
		if err != nil {
			return nil, err
		}
		a := asArray(v)
		if len(a) != 2*len(part) {
			return nil, fmt.Errorf("%s: order keys: malformed reply", c.name)
		}
		for j, sid := range part {
			created, err1 := strconv.ParseInt(asString(a[2*j]), 10, 64)
			seq, err2 := strconv.ParseUint(asString(a[2*j+1]), 10, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s: order keys: malformed reply %v, %v", c.name, a[2*j], a[2*j+1])
			}
			if created == 0 && seq == 0 {
				continue // gone, or undecodable: the records read reports it
			}
			keys = append(keys, orderKey{created, seq, sid})
		}
	}
	slices.SortFunc(keys, func(a, b orderKey) int {
		return cmp.Or(cmp.Compare(b.created, a.created), cmp.Compare(b.seq, a.seq))
	})
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if len(oc.entries) >= orderCacheSize {
		var old orderSecond
		var oldest uint64 = ^uint64(0)
		for k, e := range oc.entries {
			if e.used < oldest {
				old, oldest = k, e.used
			}
		}
		delete(oc.entries, old)
	}
	oc.tick++
	oc.entries[at] = &orderEntry{sum: sum, keys: keys, used: oc.tick}
	return keys, nil
}

// newestOfSecond reads the instances of a big second's bucket newest
// first, in reads sized to what is still wanted, through match (which
// returns how many of a read matched), until want matched or the second
// is done; it returns how many matched. Keys outside [since, until) are
// not read.
func (c *Core) newestOfSecond(ctx context.Context, kind string, sec int64, raw string, sids []string, since, until time.Time, want int, match func([]string) int) (int, error) {
	keys, err := c.orderOf(ctx, kind, sec, raw, sids)
	if err != nil {
		return 0, err
	}
	lo, hi := int64(-1<<63), int64(1<<63-1)
	if !since.IsZero() {
		lo = Micros(since)
	}
	if !until.IsZero() {
		hi = Micros(until) // exclusive
	}
	matched, step := 0, 0
	batch := make([]string, 0, 1000)
	for i := 0; i < len(keys) && matched < want; {
		// Read what is still wanted (at least 16); when filters leave
		// some out, read twice as many the next time, up to 1000.
		step = min(max(want-matched, 16, 2*step), 1000)
		batch = batch[:0]
		for ; i < len(keys) && len(batch) < step; i++ {
			if k := keys[i]; k.created >= lo && k.created < hi {
				batch = append(batch, k.sid)
			}
		}
		if len(batch) > 0 {
			matched += match(batch)
		}
	}
	return matched, nil
}

package store

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// MaxShards is the largest shard count of a sharded task (Instance.ShardCount);
// more is ErrInvalid from Enqueue. Every shard's end reads the states of its
// siblings to learn whether the task is done, so a task's cost in the store
// grows with the square of its shard count: split work of more than a
// thousand pieces into tasks of their own, or give each shard a range.
const MaxShards = 1000

// ShardID returns the instance ID of shard index of the sharded task whose
// parent has ID parent: a name-based UUID (version 5 layout) of the two, so
// every process derives the same IDs. A store finds the shards of a parent
// by these IDs (see LookupShards), so it needs no index of its own, and a
// repeated Enqueue of a shard is recognised as a repeat.
func ShardID(parent string, index int) string {
	return nameUUID("jobkit-shard\x00" + parent + "\x00" + strconv.Itoa(index))
}

// nameUUID returns the name-based UUID of name: its SHA-1 in the version 5
// layout, written in the canonical 8-4-4-4-12 form. Shard and workflow
// task IDs are stored, so its output never changes.
func nameUUID(name string) string {
	h := sha1.Sum([]byte(name))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	var b [36]byte
	hex.Encode(b[0:8], h[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], h[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], h[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], h[8:10])
	b[23] = '-'
	hex.Encode(b[24:], h[10:16])
	return string(b[:])
}

// ShardIDs returns the IDs of the count shards of parent, in shard order.
func ShardIDs(parent string, count int) []string {
	ids := make([]string, count)
	for i := range ids {
		ids[i] = ShardID(parent, i)
	}
	return ids
}

// IsShard reports whether in is a shard of a sharded task.
func (in *Instance) IsShard() bool { return in.Parent != "" }

// IsShardParent reports whether in is the parent of a sharded task: the
// instance that completes when all its shards have completed.
func (in *Instance) IsShardParent() bool { return in.Parent == "" && in.ShardCount > 0 }

// validateShard checks the shard fields of in (see Instance.Parent).
func (in *Instance) validateShard() error {
	switch {
	case in.ShardCount < 0 || in.ShardCount > MaxShards:
		return fmt.Errorf("%w: instance %s has shard count %d; want 1 to MaxShards (%d), or 0 for a task that is not sharded", ErrInvalid, in.ID, in.ShardCount, MaxShards)
	case in.Parent == "" && in.ShardIndex != 0:
		return fmt.Errorf("%w: instance %s has shard index %d without a parent; only a shard (Parent set) has an index", ErrInvalid, in.ID, in.ShardIndex)
	case in.Parent == "":
		return nil
	case in.ShardCount == 0:
		return fmt.Errorf("%w: shard %s of %s has no shard count; a shard carries its task's count", ErrInvalid, in.ID, in.Parent)
	case in.ShardIndex < 0 || in.ShardIndex >= in.ShardCount:
		return fmt.Errorf("%w: shard %s of %s has index %d, want 0 to %d", ErrInvalid, in.ID, in.Parent, in.ShardIndex, in.ShardCount-1)
	case in.Parent == in.ID:
		return fmt.Errorf("%w: instance %s names itself as its parent", ErrInvalid, in.ID)
	case in.ID != ShardID(in.Parent, in.ShardIndex):
		return fmt.Errorf("%w: shard %d of %s has ID %s; a shard's ID is store.ShardID(parent, index) (%s)", ErrInvalid, in.ShardIndex, in.Parent, in.ID, ShardID(in.Parent, in.ShardIndex))
	}
	return nil
}

// Shards is the role of a store that runs sharded tasks: a parent waits,
// Scheduled with a RunAt in the future, until its shards are done, and the
// engine that ends the last shard wakes it.
type Shards interface {
	// Wake makes the Scheduled instances among p.IDs whose RunAt is after
	// p.Now ready at p.Now: their RunAt becomes p.Now (a claim then takes
	// them as instances due now, behind what was ready before), UpdatedAt
	// becomes p.Now, and a notifying store wakes their queues'
	// subscribers. An ID with no instance, or whose instance is not
	// Scheduled or is due already, is left as it is; no history record is
	// appended (the state does not change). Each ID's change is atomic.
	Wake(ctx context.Context, p *WakeParams) error
}

// WakeParams is the argument of Shards.Wake.
type WakeParams struct {
	// IDs are the instances to make ready.
	IDs []string
	// Now is the new RunAt.
	Now time.Time
}

// Validate checks the parameters every plugin requires.
func (p *WakeParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: nil wake parameters", ErrInvalid)
	}
	if p.Now.IsZero() {
		return fmt.Errorf("%w: wake without a time (set Now)", ErrInvalid)
	}
	return validIDs("wake", p.IDs)
}

// GetInstances reads the stored instances among ids; a missing ID is left
// out. It is what LookupShards needs of a store.
type GetInstances func(ctx context.Context, ids []string) ([]*Instance, error)

// LookupShards answers History.LookupInstances for a query with Parent set,
// for a store that reads instances by ID: it reads the parent (or, when the
// parent is gone, its shard 0) for the shard count, reads the shards by
// their IDs (ShardIDs), and returns those matching q newest first (by
// CreatedAt, then Seq), at most q.Limit. It costs two reads by ID, whatever
// else the store holds. An error wrapping ErrCorrupt from get is returned
// with what could be read.
func LookupShards(ctx context.Context, q *Query, get GetInstances) ([]*Instance, error) {
	heads, err := get(ctx, []string{q.Parent, ShardID(q.Parent, 0)})
	if err != nil && heads == nil {
		return nil, err
	}
	count := 0
	for _, h := range heads {
		switch {
		case h.ID == q.Parent && h.IsShardParent():
			count = h.ShardCount
		case h.Parent == q.Parent && count == 0:
			count = h.ShardCount
		}
	}
	if count == 0 {
		return nil, err
	}
	shards, err2 := get(ctx, ShardIDs(q.Parent, min(count, MaxShards)))
	if err2 != nil && shards == nil {
		return nil, err2
	}
	out := shards[:0:0]
	for _, in := range shards {
		if in.Parent == q.Parent && q.MatchInstance(in) {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b *Instance) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.Seq, a.Seq))
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, cmp.Or(err2, err)
}

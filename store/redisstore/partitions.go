package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// PartitionedStore is a store over a namespace split into partitions,
// each an ordinary namespace of its own hash tag (so its own slot of a
// Redis Cluster), behind a router: see NewPartitioned and
// doc/redis-cluster.md.
type PartitionedStore struct {
	*redisscript.Partitioned
}

var (
	_ store.Store          = (*PartitionedStore)(nil)
	_ store.Notifier       = (*PartitionedStore)(nil)
	_ store.CancelNotifier = (*PartitionedStore)(nil)
)

// NewPartitioned returns a store on client whose namespace is split into
// partitions (1 to redisscript.MaxPartitions), so that one namespace
// spreads over the primaries of a Redis Cluster. The count is fixed when
// the namespace is created (recorded in its key "jobkit:{ns}:partitions")
// and every later handle must pass the same one. Partition 0 is the
// namespace's own keys, so a namespace of 1 partition is exactly the
// layout of New (its data stays readable by either); partition i > 0 keeps
// its keys under "jobkit:{ns#pi}:". A namespace that already holds data of
// an unpartitioned store can only be opened with 1 partition.
//
// Each instance lives in one partition: its unique key's, its workflow's,
// its sharded task's, or else its Enqueue call's (the next call, the
// next partition: an even spread over calls). Claims visit
// the partitions in turn from a rotating start; see doc/redis-cluster.md
// for the ordering kept. Concurrency limits are not enforced with more
// than one partition (the store is then not a store.LimitEnforcer, and
// the engine refuses limits).
func NewPartitioned(ctx context.Context, client redis.UniversalClient, partitions int, opts ...Option) (*PartitionedStore, error) {
	s, err := New(client, opts...)
	if err != nil {
		return nil, err
	}
	p, err := redisscript.Partition(ctx, s.Core, partitions, opts...)
	if err != nil {
		return nil, fmt.Errorf("redisstore.NewPartitioned: %w", err)
	}
	return &PartitionedStore{Partitioned: p}, nil
}

// WithPartitionKey places the instances of a partitioned namespace by
// key(in) alone: instances of one key share a partition, so their claim
// order, Seq and events keep the order of one namespace (key by queue,
// or by tenant, for a strict order within each). The key must keep
// together the instances of one unique key, which is checked in its
// partition only. New ignores it.
func WithPartitionKey(key func(in *store.Instance) string) Option {
	return redisscript.WithPartitionKey(key)
}

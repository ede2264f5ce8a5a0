package redisscript

import (
	"time"

	"github.com/jobkit/job/store"
)

// Option configures a Redis-protocol store; redisstore and valkeystore
// export it under their own names, so both plugins take the same options.
type Option func(*Options)

// Options are what an Option sets.
type Options struct {
	// Namespace of the store's keys; DefaultNamespace when empty.
	Namespace string
	// PartitionKey places the instances of a partitioned namespace (see
	// WithPartitionKey); nil for the default placement.
	PartitionKey func(*store.Instance) string
	// ReplicaAcks and ReplicaAckTimeout: see WithReplicaAcks.
	ReplicaAcks       int
	ReplicaAckTimeout time.Duration
}

// WithNamespace keeps the store's data under keys "jobkit:{ns}:...", apart
// from other namespaces on the same server. ns must not hold braces.
// Defaults to "default".
func WithNamespace(ns string) Option { return func(o *Options) { o.Namespace = ns } }

// Apply returns the options opts set, defaults filled in.
func Apply(opts []Option) Options {
	o := Options{Namespace: DefaultNamespace}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithPartitionKey places the instances of a partitioned namespace by
// key(in) alone: instances of one key share a partition, so their claim
// order, Seq and events are in the order of one namespace (key by queue,
// or by tenant, for a strict order within each). The key must keep
// together the instances of one unique key: a unique key is checked in
// its instance's partition only. Without it, a workflow's tasks share
// their workflow's partition, an instance with a unique key goes to its
// key's, a shard to its parent's, and the others to their Enqueue
// call's partition (the next call, the next partition).
// Ignored by an unpartitioned store.
func WithPartitionKey(key func(in *store.Instance) string) Option {
	return func(o *Options) { o.PartitionKey = key }
}

package redisscript

import (
	"fmt"
	"strings"
)

// DefaultNamespace is the namespace of a store created without one.
const DefaultNamespace = "default"

// Keys are the key names of one namespace.
type Keys struct {
	// Prefix starts every key: "jobkit:{ns}:". The braces are the Redis
	// Cluster hash tag that keeps the namespace in one slot.
	Prefix string
	// Script is the KEYS array every script takes (see lua/lib.lua).
	Script []string
}

// NewKeys returns the keys of namespace ns. ns must not be empty nor hold
// braces (they would change the hash tag).
func NewKeys(ns string) (Keys, error) {
	if ns == "" || strings.ContainsAny(ns, "{}") {
		return Keys{}, fmt.Errorf("redisscript: namespace %q must be non-empty and hold no braces", ns)
	}
	p := "jobkit:{" + ns + "}:"
	names := []string{"inst", "ctr", "hist", "lease", "done", "uniq", "uniqx", "kinds", "queues", "logs"}
	k := Keys{Prefix: p, Script: make([]string, len(names))}
	for i, n := range names {
		k.Script[i] = p + n
	}
	return k, nil
}

// Inst is the instance hash.
func (k Keys) Inst() string { return k.Script[0] }

// Kinds is the set of kinds.
func (k Keys) Kinds() string { return k.Script[7] }

// Queues is the set of queues.
func (k Keys) Queues() string { return k.Script[8] }

// Lease is the lease set.
func (k Keys) Lease() string { return k.Script[3] }

// Done is the set of final instances.
func (k Keys) Done() string { return k.Script[4] }

// Ready is the ready set of queue.
func (k Keys) Ready(queue string) string { return k.Prefix + "q:" + queue + ":r" }

// Sched is the scheduled set of queue.
func (k Keys) Sched(queue string) string { return k.Prefix + "q:" + queue + ":s" }

// Kind is the CreatedAt index of kind.
func (k Keys) Kind(kind string) string { return k.Prefix + "k:" + kind }

// Wake is the pub/sub channel of queue.
func (k Keys) Wake(queue string) string { return k.Prefix + "w:" + queue }

// ReadyHead is how many bytes precede the ID in a ready-set member.
const ReadyHead = 13

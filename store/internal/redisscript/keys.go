package redisscript

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jobkit/job/store"
)

// DefaultNamespace is the namespace of a store created without one.
const DefaultNamespace = "default"

// Keys are the key names of one namespace.
type Keys struct {
	// Prefix starts every key: "jobkit:{ns}:". The braces are the Redis
	// Cluster hash tag that keeps the namespace in one slot.
	Prefix string
	// Script is the KEYS array every script takes (see lua/lib.lua) but
	// Enqueue.
	Script []string
	// Enqueue is the KEYS array of the Enqueue script: the seven of
	// Script it uses (inst, ctr, hist, uniq, uniqx, kinds, queues, in that
	// order; see lua/enqueue.lua). Redis's own cost of a call grows with
	// each key it is given, and the enqueue runs most often.
	Enqueue []string
	// EnqueueOne is the KEYS array of the EnqueueOne script: inst alone
	// (see lua/enqueue_one.lua).
	EnqueueOne []string
}

// For returns the KEYS array script s takes.
func (k Keys) For(s *Script) []string {
	switch s {
	case Enqueue:
		return k.Enqueue
	case EnqueueOne:
		return k.EnqueueOne
	}
	return k.Script
}

// NewKeys returns the keys of namespace ns. ns must not be empty nor hold
// braces (they would change the hash tag).
func NewKeys(ns string) (Keys, error) {
	if ns == "" || strings.ContainsAny(ns, "{}") {
		return Keys{}, fmt.Errorf("%w: namespace %q must be non-empty and hold no braces (they would change the key's hash tag)", store.ErrInvalid, ns)
	}
	p := "jobkit:{" + ns + "}:"
	names := []string{"inst", "st", "ctr", "hist", "lease", "run", "uniq", "uniqx", "kinds", "queues", "logs", "late"}
	k := Keys{Prefix: p, Script: make([]string, len(names))}
	for i, n := range names {
		k.Script[i] = p + n
	}
	k.Enqueue = []string{k.Script[0], k.Script[2], k.Script[3], k.Script[6], k.Script[7], k.Script[8], k.Script[9]}
	k.EnqueueOne = []string{k.Script[0]}
	return k, nil
}

// Inst is the spec hash.
func (k Keys) Inst() string { return k.Script[0] }

// State is the state hash.
func (k Keys) State() string { return k.Script[1] }

// Lease is the sorted set of lease batches.
func (k Keys) Lease() string { return k.Script[4] }

// Run is the set of the IDs of Processing instances.
func (k Keys) Run() string { return k.Script[5] }

// Kinds is the set of kinds.
func (k Keys) Kinds() string { return k.Script[8] }

// Queues is the set of queues.
func (k Keys) Queues() string { return k.Script[9] }

// Late is the sorted set of final instances finished behind their done
// list's tail.
func (k Keys) Late() string { return k.Script[11] }

// Done is the list of the instances in final state st, in finishing order.
func (k Keys) Done(st store.State) string {
	return k.Prefix + "done:" + strconv.Itoa(int(st))
}

// Levels is the lane index of queue: its non-empty lanes per priority
// (members "<prio>/<lane>", see lua/lib.lua).
func (k Keys) Levels(queue string) string { return k.Prefix + "q:" + queue + ":p" }

// Ready is the ready list of queue at priority prio written before lanes;
// claims move its entries into lanes.
func (k Keys) Ready(queue string, prio int) string {
	return k.Prefix + "q:" + queue + ":r:" + strconv.Itoa(prio)
}

// LaneReady is the ready list of queue at priority prio in the lane of
// kind with the required labels.
func (k Keys) LaneReady(queue string, prio int, kind string, labels []string) string {
	return k.Prefix + "q:" + queue + ":r:" + strconv.Itoa(prio) + "/" + strconv.Itoa(len(kind)) + ":" + kind + laneLabels(labels)
}

// Sched is the scheduled set of queue.
func (k Keys) Sched(queue string) string { return k.Prefix + "q:" + queue + ":s" }

// KindDir is the set of CreatedAt seconds that have a bucket of kind.
func (k Keys) KindDir(kind string) string { return k.Prefix + "kd:" + kind }

// KindBucket holds the IDs of kind created in second sec.
func (k Keys) KindBucket(kind string, sec int64) string {
	return k.Prefix + "kb:" + kind + ":" + strconv.FormatInt(sec, 10)
}

// Wake is the pub/sub channel of queue.
func (k Keys) Wake(queue string) string { return k.Prefix + "w:" + queue }

// Cancels is the pub/sub channel lua/cancel.lua publishes the cancels of
// running attempts to: "<attempt> <encoded ID>".
func (k Keys) Cancels() string { return k.Prefix + "cancels" }

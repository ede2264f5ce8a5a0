package etcdstore

import (
	"github.com/jobkit/job/store"
)

// Workflows: the engine stores a workflow in one Enqueue when it fits one
// etcd transaction, and in parts under a commit marker otherwise
// (store.PartialEnqueuer, store.WorkflowTask.Parted), since an Enqueue
// that does not fit is split over transactions and one that fails part
// way leaves part stored.

// enqueueOpsPer bounds the operations, and the compares, one instance
// takes in an Enqueue transaction (its records, indexes, history and
// guards: see enqueueBatch), with room to spare so the bound stays on the
// safe side of a key layout that adds a key.
const enqueueOpsPer = 8

// enqueueOpsFixed bounds the operations of a transaction beside its
// instances' (the ticket, the counts, the lane markers are counted apart).
const enqueueOpsFixed = 4

// EnqueueAtomic implements store.PartialEnqueuer: it reports whether
// Enqueue writes p in one transaction, by a bound on the operations, the
// compares and the bytes p's instances take (it errs on the side of
// false, which costs the engine's parted write, never atomicity).
func (s *Store) EnqueueAtomic(p *store.EnqueueParams) bool {
	if p == nil {
		return true
	}
	n := len(p.Instances)
	lanes := map[string]bool{}
	size := 0
	for _, in := range p.Instances {
		lanes[s.k.laneMarker(&dynRec{Queue: in.Queue, Priority: in.Priority, Kind: in.Kind, Labels: store.NormLabels(in.Labels)})] = true
		st, d := newRecords(in)
		size += len(mustJSON(st)) + 4*len(mustJSON(d)) + 1024
		if in.UniqueKey != "" {
			n++ // its unique key: a put and a compare
		}
	}
	ops := enqueueOpsPer*n + 2*len(lanes) + enqueueOpsFixed
	return ops <= s.maxOps-2 && size <= s.maxTxn/2
}

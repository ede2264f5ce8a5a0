package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// guard is one condition of a group: key's ModRevision is rev (0: the key
// is absent).
type guard struct {
	key string
	rev int64
}

// group is the operations of one record's change: applied all together or
// not at all, guarded by compares on the keys it read. Several groups share
// one etcd transaction, so a batch costs one consensus round.
type group struct {
	guards []guard
	ops    []clientv3.Op
	size   int
	ref    int // the caller's index of what the group changes

	// marks are the lane markers the group's ready keys need: put once
	// per transaction, in the transaction that adds the keys, so a claim
	// that deletes an empty lane's marker never strands a new key.
	marks []string

	// counts are the group's count moves (inspect.go), written as one
	// delta key per transaction by countsOp.
	counts []countMoveRec

	// fin lists the instances the group makes final, written as one
	// finished-index key per transaction and time bucket by finishedOps
	// (finished.go).
	fin []finEnt

	// created lists the instances the group enqueues, written as one
	// creation-index key per transaction and time bucket by createdOps
	// (created.go).
	created []createdEnt

	// ck is the claim record that lists the attempt a claim group takes
	// (set by the claim's extra operations).
	ck string

	applied bool
	stale   bool  // a guard no longer held: the record changed under us
	rev     int64 // the revision the group was applied at
	resp    []*pb.ResponseOp
}

func (g *group) put(key, val string, opts ...clientv3.OpOption) {
	g.ops = append(g.ops, clientv3.OpPut(key, val, opts...))
	g.size += len(key) + len(val) + 16
}

func (g *group) del(key string, opts ...clientv3.OpOption) {
	g.ops = append(g.ops, clientv3.OpDelete(key, opts...))
	g.size += len(key) + 16
}

func (g *group) get(key string, opts ...clientv3.OpOption) {
	g.ops = append(g.ops, clientv3.OpGet(key, opts...))
	g.size += len(key) + 16
}

// commit applies the groups in as few transactions as the limits allow
// (max ops per list, max request bytes). A transaction whose compares fail
// reads back the guarded keys in its failure branch, so the groups still
// valid are retried at once and the stale ones are marked, with no extra
// read. On return every group is applied or stale, or an error is returned.
func (s *Store) commit(ctx context.Context, gs []*group) error {
	return s.commitX(ctx, gs, nil)
}

// extraOps returns what a transaction of batch carries besides its
// groups': at most room operations.
type extraOps func(batch []*group, room int) extraTxn

// extraTxn is what extraOps adds to one transaction.
type extraTxn struct {
	ops []clientv3.Op
	// guard, when its key is set, is one more condition of the whole
	// transaction: when it does not hold, commitX returns errGuardMoved
	// with the groups of the transaction neither applied nor stale.
	guard guard
	// done, when set, is called with the revision of the transaction
	// once it succeeded.
	done func(rev int64)
}

// errGuardMoved is commitX's error when an extra guard did not hold.
var errGuardMoved = errors.New("etcdstore: a transaction's guard moved")

// commitX is commit with extra operations in every transaction: extra is
// called for each transaction it sends (again for a retry), so what it
// adds can describe exactly the groups applied together. A guard that
// several groups of a transaction share (the pause key of a claim) is
// compared once.
func (s *Store) commitX(ctx context.Context, gs []*group, extra extraOps) error {
	reserve := 1 // the transaction's count delta (fitTxn counts the finished batches)
	if extra != nil {
		reserve += 2
	}
	pending := gs
	for len(pending) > 0 {
		n := s.fitTxn(pending, reserve)
		batch := pending[:n]
		var cmps []clientv3.Cmp
		var thens, elses []clientv3.Op
		at := map[guard]int{} // guard -> its compare's index
		for _, g := range batch {
			for _, gd := range g.guards {
				if _, ok := at[gd]; ok {
					continue
				}
				at[gd] = len(cmps)
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(gd.key), "=", gd.rev))
				elses = append(elses, clientv3.OpGet(gd.key, clientv3.WithKeysOnly()))
			}
			thens = append(thens, g.ops...)
		}
		thens = appendMarks(thens, batch)
		fops := s.finishedOps(batch)
		var x extraTxn
		if extra != nil {
			x = extra(batch, s.maxOps-1-len(fops)-len(thens)) // the count delta and finished batches follow
			thens = append(thens, x.ops...)
			if x.guard.key != "" {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(x.guard.key), "=", x.guard.rev))
				elses = append(elses, clientv3.OpGet(x.guard.key, clientv3.WithKeysOnly()))
			}
		}
		if op, ok := s.countsOp(batch); ok {
			thens = append(thens, op) // after the groups': their responses keep their offsets
		}
		thens = append(thens, fops...)
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(thens...).Else(elses...).Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			if x.done != nil {
				x.done(resp.Header.Revision)
			}
			off := 0
			for _, g := range batch {
				g.applied = true
				g.rev = resp.Header.Revision
				g.resp = resp.Responses[off : off+len(g.ops)]
				off += len(g.ops)
			}
			pending = pending[n:]
			continue
		}
		if x.guard.key != "" && readRev(resp.Responses[len(resp.Responses)-1]) != x.guard.rev {
			return errGuardMoved
		}
		retry := markStale(batch, resp.Responses, at)
		if len(retry) == len(batch) {
			return fmt.Errorf("transaction failed although every guard holds (is --max-txn-ops below %d? see WithMaxTxnOps)", s.maxOps)
		}
		pending = append(retry, pending[n:]...)
	}
	return nil
}

// fitTxn returns how many of the groups pending, at least one, fit one
// transaction that also carries reserve operations of its own.
func (s *Store) fitTxn(pending []*group, reserve int) int {
	n, nops, ncmp, size := 0, 0, 0, 0
	var buckets map[int64]bool // of the finished batches (one key each)
	for n < len(pending) {
		g := pending[n]
		nb := 0
		for _, e := range g.fin {
			if b := bucketStart(e.T); !buckets[b] {
				if buckets == nil {
					buckets = map[int64]bool{}
				}
				buckets[b] = true
				nb++
			}
		}
		if n > 0 && (nops+len(g.ops)+len(g.marks)+nb > s.maxOps-reserve || ncmp+len(g.guards) > s.maxOps || size+g.size > s.maxTxn) {
			break
		}
		nops += len(g.ops) + len(g.marks) + nb
		ncmp += len(g.guards)
		size += g.size
		n++
	}
	return n
}

// readRev is the ModRevision of the key a failure branch's read found
// (0: absent).
func readRev(r *pb.ResponseOp) int64 {
	if kvs := r.GetResponseRange().GetKvs(); len(kvs) > 0 {
		return kvs[0].ModRevision
	}
	return 0
}

// markStale marks the groups of a failed transaction whose guards no
// longer hold (their revisions read back in resps, at the indexes at
// gives) as stale, and returns the others, to retry.
func markStale(batch []*group, resps []*pb.ResponseOp, at map[guard]int) []*group {
	var retry []*group
	for _, g := range batch {
		ok := true
		for _, gd := range g.guards {
			if readRev(resps[at[gd]]) != gd.rev {
				ok = false
			}
		}
		if ok {
			retry = append(retry, g)
		} else {
			g.stale = true
		}
	}
	return retry
}

// appendMarks appends one put of each lane marker the groups need (after
// their own operations, so their responses keep their offsets).
func appendMarks(ops []clientv3.Op, gs []*group) []clientv3.Op {
	var seen map[string]bool
	for _, g := range gs {
		for _, m := range g.marks {
			if seen[m] {
				continue
			}
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[m] = true
			ops = append(ops, clientv3.OpPut(m, ""))
		}
	}
	return ops
}

// readAll is read with the transactions sent at once (up to
// enqueueInFlight at a time); rev is the lowest revision they were read
// at.
func (s *Store) readAll(ctx context.Context, ops []clientv3.Op) (out []*pb.RangeResponse, rev int64, err error) {
	var chunks [][]clientv3.Op
	for len(ops) > 0 {
		n := min(len(ops), s.maxOps)
		chunks = append(chunks, ops[:n])
		ops = ops[n:]
	}
	resps := make([]*clientv3.TxnResponse, len(chunks))
	errs := make([]error, len(chunks))
	sem := make(chan struct{}, enqueueInFlight)
	var wg sync.WaitGroup
	for j, c := range chunks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resps[j], errs[j] = s.cli.Txn(ctx).Then(c...).Commit()
		})
	}
	wg.Wait()
	for j, resp := range resps {
		if errs[j] != nil {
			return nil, 0, errs[j]
		}
		if rev == 0 || resp.Header.Revision < rev {
			rev = resp.Header.Revision
		}
		s.fast.noteRev(resp.Header.Revision)
		for _, r := range resp.Responses {
			out = append(out, r.GetResponseRange())
		}
	}
	return out, rev, nil
}

// read runs get operations in as few read-only transactions as the op limit
// allows and returns their results in order.
func (s *Store) read(ctx context.Context, ops []clientv3.Op) ([]*pb.RangeResponse, error) {
	out := make([]*pb.RangeResponse, 0, len(ops))
	for len(ops) > 0 {
		n := min(len(ops), s.maxOps)
		resp, err := s.cli.Txn(ctx).Then(ops[:n]...).Commit()
		if err != nil {
			return nil, err
		}
		s.fast.noteRev(resp.Header.Revision) // a fresher ticket (enqueue_fast.go)
		for _, r := range resp.Responses {
			out = append(out, r.GetResponseRange())
		}
		ops = ops[n:]
	}
	return out, nil
}

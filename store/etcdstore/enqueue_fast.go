package etcdstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// A lone Enqueue in one request (issue 34).
//
// An Enqueue numbers its instances from a ticket, a revision R, and needs
// R to be above the ticket of every call that returned before it started
// (sequence numbers increase in enqueue order across every handle). The
// read that comes first in enqueue gets such an R: etcd's revision when it
// reads, above that of every write already applied. A lone call does
// without that read: every Enqueue write puts the ticket key (keys.ticket),
// and a lone call takes for R the newest revision its handle has seen (in
// any read, a claim's too, or Enqueue write: never above etcd's) and
// writes at once, on the condition that the ticket key's ModRevision is
// at most R: no Enqueue write has been applied after R. A call A that
// returned before it started wrote at a revision W above A's ticket and at
// most the ticket key's ModRevision, so at most R: A's ticket is below R.
// The lane markers are compared on the creation revisions the handle last
// saw, and the instances' keys on being absent, as in any Enqueue write.
//
// When a condition fails (another handle enqueued since, the instance is
// stored already, a lane marker was deleted), the transaction's failure
// branch reads what enqueueRead reads, at a revision above every write
// applied, and the call goes on from that reading as from its first read:
// two requests, as before, the first a consensus round instead of a read.
// A handle whose one-request write failed sends reads first for a second
// (fastPause), so handles that enqueue in turn do not pay that round on
// every call.
//
// Only a lone call does this: one with no unique keys (they need a lease
// and the holder's revision), whose instances fit one transaction, whose
// lanes' markers the handle knows, and while no other Enqueue of the
// handle is under way (concurrent calls would take the same R and all but
// one would fail).
//
// During a rolling upgrade from a version that does not put the ticket
// key, an older process's Enqueue does not move it: a one-request call of
// a newer process that starts just after one of the older process's
// returned may number its instances below them (claimed in that order
// where they share a priority and run time). Order within each process,
// and once every process runs this version, is kept.

// fastPause is how long a handle whose one-request Enqueue failed reads
// before it writes.
const fastPause = time.Second

// maxFastMarks bounds the lane markers a handle remembers for
// one-request Enqueues; beyond, it forgets them all and reads again.
const maxFastMarks = 4096

// fastEnqueue is what a handle knows for one-request Enqueues.
type fastEnqueue struct {
	rev      atomic.Int64 // the newest revision the handle's reads and Enqueue writes have seen
	inFlight atomic.Int32 // Enqueue calls under way on the handle

	mu    sync.Mutex
	marks map[string]int64 // lane marker -> its creation revision, as last seen
	lost  time.Time        // when a one-request write last failed
}

// fastTxn is what turns an Enqueue write into a one-request one: the
// ticket it compares the ticket key with, the reads of its failure branch,
// and the response when that branch ran.
type fastTxn struct {
	ticket int64
	orElse []clientv3.Op
	failed *clientv3.TxnResponse
}

// noteRev raises the newest revision seen to rev.
func (f *fastEnqueue) noteRev(rev int64) {
	for {
		old := f.rev.Load()
		if rev <= old || f.rev.CompareAndSwap(old, rev) {
			return
		}
	}
}

// noteReading records what an Enqueue read at rev: the lane markers in
// place (markRev) among lanes, and those absent.
func (f *fastEnqueue) noteReading(rev int64, lanes []string, markRev map[string]int64) {
	f.noteRev(rev)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.marks == nil || len(f.marks) > maxFastMarks {
		f.marks = map[string]int64{}
	}
	for _, m := range lanes {
		if r, ok := markRev[m]; ok {
			f.marks[m] = r
		} else {
			delete(f.marks, m)
		}
	}
}

// noteWrite records the lane markers of an Enqueue write applied at rev:
// those it put absent (markRev 0) were created at rev, the others keep
// their creation revision.
func (f *fastEnqueue) noteWrite(rev int64, mops []clientv3.Op, markRev map[string]int64) {
	if len(mops) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.marks == nil || len(f.marks) > maxFastMarks {
		f.marks = map[string]int64{}
	}
	for _, op := range mops {
		m := string(op.KeyBytes())
		if r := markRev[m]; r != 0 {
			f.marks[m] = r
		} else {
			f.marks[m] = rev
		}
	}
}

// knownMarks returns the creation revisions of lanes' markers, or false
// when the handle does not know one of them or its last one-request write
// failed less than fastPause ago.
func (f *fastEnqueue) knownMarks(lanes []string) (map[string]int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.lost.IsZero() && time.Since(f.lost) < fastPause {
		return nil, false
	}
	out := make(map[string]int64, len(lanes))
	for _, m := range lanes {
		r, ok := f.marks[m]
		if !ok {
			return nil, false
		}
		out[m] = r
	}
	return out, true
}

func (f *fastEnqueue) fail() {
	f.mu.Lock()
	f.lost = time.Now()
	f.mu.Unlock()
}

// enqueueFast writes the pending instances of a lone call in one request
// when it can (see above) and reports done. When it cannot, it returns
// nil, or, when its write's conditions failed, the reading its failure
// branch made, to go on from; sent is set as by sendChunks. lone tells
// whether no other Enqueue of the handle is under way.
func (s *Store) enqueueFast(ctx context.Context, p *store.EnqueueParams, pending []int, seqs []uint64, res []store.EnqueueResult, repeats *[][2]int, sent *atomic.Bool, lone bool) (*enqueueReading, bool, error) {
	ticket := s.fast.rev.Load()
	if !lone || ticket == 0 || len(pending) > s.maxOps {
		return nil, false, nil
	}
	for _, i := range pending {
		if p.Instances[i].UniqueKey != "" {
			return nil, false, nil
		}
	}
	q := s.enqueueReadOps(p, pending)
	if len(q.ops) > s.maxOps {
		return nil, false, nil
	}
	marks, ok := s.fast.knownMarks(q.lanes)
	if !ok {
		return nil, false, nil
	}
	assignSeqs(uint64(ticket), uint64(s.seqSalt.Add(1)&0xff), pending, seqs)
	none := &enqueueReading{rev: ticket, held: map[string]uniqRec{}, urev: map[string]int64{}, markRev: marks, existing: map[string]uint64{}}
	var reps [][2]int
	todo := none.sort(p, pending, res, &reps)
	if len(todo) == 0 {
		return nil, false, nil
	}
	ft := &fastTxn{ticket: ticket, orElse: q.ops}
	n, send, err := s.enqueueBatch(ctx, p, todo, seqs, none.urev, marks, res, ft)
	if err != nil {
		return nil, false, err
	}
	if n < len(todo) {
		return nil, false, nil // more than one transaction: read first
	}
	again, err := sendChunks(ctx, []enqueueChunk{{todo, send}}, sent)
	if err != nil {
		return nil, false, err
	}
	if len(again) == 0 {
		*repeats = append(*repeats, reps...)
		return nil, true, nil
	}
	s.fast.fail()
	if ft.failed == nil {
		return nil, false, nil // a vanished lease (none here): read again
	}
	ranges := make([]*pb.RangeResponse, 0, len(ft.failed.Responses))
	for _, r := range ft.failed.Responses {
		ranges = append(ranges, r.GetResponseRange())
	}
	rd, err := s.enqueueReadingOf(p, pending, q, ranges, ft.failed.Header.Revision)
	return rd, false, err
}

package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobkit/job/store"
)

// maxRounds bounds the optimistic retries of one call under contention.
const maxRounds = 64

var _ store.Store = (*Store)(nil)
var _ store.Notifier = (*Store)(nil)
var _ store.Closer = (*Store)(nil)

// addHist appends the history record of d's current state (d.HSeq) to
// d's inline history, to be stored with d in the same put, and moves d in
// the counts from state from (0: not counted yet) to d.State.
func (s *Store) addHist(g *group, d *dynRec, from store.State, t time.Time, node, msg string, result []byte) {
	if from != d.State {
		s.countMove(g, d, from, d.State, t)
	}
	d.Hist = append(d.Hist, histEnt{State: d.State, Attempt: d.Attempt, Time: tn(t), Node: node,
		Error: msg, Result: result, Seq: d.HSeq})
	if over := len(d.Hist) - maxHist; over > 0 {
		d.Hist = append([]histEnt(nil), d.Hist[over:]...)
	}
	d.HN++
}

// addReady puts d (Scheduled) into its queue's ready index, and its lane
// marker into the same transaction.
func (s *Store) addReady(g *group, d *dynRec, val string) {
	g.put(s.k.ready(d), val)
	g.marks = append(g.marks, s.k.laneMarker(d))
}

func (s *Store) checkSize(in *store.Instance, st *staticRec, d *dynRec) error {
	n := len(mustJSON(st)) + 2*len(mustJSON(d))
	if n > s.maxValue {
		return fmt.Errorf("%w: instance %s (kind %s) encodes to %d bytes with its arguments (%d bytes), over the etcd store's limit of %d: pass large data by reference (a URL, a blob key), or raise etcdstore.WithMaxValueBytes together with etcd's --max-request-bytes",
			store.ErrTooLarge, in.ID, in.Kind, n, len(in.Args), s.maxValue)
	}
	return nil
}

// Enqueue implements store.Queue. Sequence numbers come from a ticket (see
// enqueue), so they increase in enqueue order across every handle; unique
// keys are claimed create-if-absent (or over an expired holder, compared on
// its revision). An uncontended call is one read-only and one write
// transaction: one consensus round.
func (s *Store) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("enqueue", ctx, err)
	}
	for _, in := range p.Instances {
		st, d := newRecords(in)
		if err := s.checkSize(in, st, d); err != nil {
			return nil, s.wrap("enqueue", ctx, err)
		}
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("enqueue", context.Background(), err)
	}
	defer cancel()
	res := make([]store.EnqueueResult, len(p.Instances))
	var sent atomic.Bool
	err = s.enqueue(ctx, p, res, &sent)
	if err != nil && sent.Load() {
		// A write transaction went out and got no answer, or one
		// applied before the call failed: the caller cannot know what
		// is stored (issue 39).
		return res, store.OutcomeUnknown(s.wrap("enqueue", ctx, err))
	}
	return res, s.wrap("enqueue", ctx, err)
}

// maybeApplied reports whether a write transaction that failed with err
// may have been applied: anything but etcd's refusal of the request (a
// bad or too large request, no space, no permission, a missing lease) and
// a connection that was never made. A deadline or a broken connection
// after the request went out, and etcd's own "request timed out" or
// "leader changed" (the proposal may still commit), may have.
func maybeApplied(err error) bool {
	code := codes.Unknown
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
		if code == codes.Unavailable && strings.Contains(st.Message(), "while dialing") {
			return false
		}
	}
	switch code {
	case codes.InvalidArgument, codes.ResourceExhausted, codes.FailedPrecondition, codes.PermissionDenied,
		codes.Unauthenticated, codes.OutOfRange, codes.NotFound, codes.AlreadyExists:
		return false
	}
	return true
}

// A sequence number is ticket<<seqShift | salt<<16 | k: 2^16-1 instances
// per ticket, 256 salts (see enqueue).
const seqShift = 24

// enqueue stores p's instances, setting sent once a write transaction
// may have been applied (see maybeApplied): from then on a failure leaves
// the call's outcome unknown. The reads that come first never set it.
func (s *Store) enqueue(ctx context.Context, p *store.EnqueueParams, res []store.EnqueueResult, sent *atomic.Bool) error {
	// Sequence numbers: the revision R of each round's read (below) is the
	// ticket; the k-th instance still pending gets R<<24 | salt<<16 | k+1,
	// the salt a number of this handle's that each round advances. A call that
	// starts after another returned reads a higher revision than every one
	// that call wrote at, so sequence numbers increase in enqueue order
	// across every handle, at the cost of a read, not a consensus round.
	// Calls on several handles (or at once on one) may read the same R;
	// the salt tells them apart, and where two salts meet too (1 in 256)
	// the write transaction's check that the instance's ready key and
	// creation-index key (the keys its sequence number is part of) do not
	// exist yet makes one call read again and renumber. Revisions stay
	// below 2^40 for decades of writes at thousands a second.
	seqs := make([]uint64, len(p.Instances))
	pending := make([]int, len(p.Instances))
	for i := range pending {
		pending[i] = i
	}
	var repeats [][2]int // an ID given twice in one call: {later, first}
	defer func() {
		for _, r := range repeats {
			if f := res[r[1]]; f.Err == nil && f.ID != "" {
				res[r[0]] = store.EnqueueResult{ID: f.ID, Seq: f.Seq, Existed: true}
			}
		}
	}()
	// A lone call tries first to write in one request, numbered from a
	// ticket it did not read (enqueue_fast.go); when that cannot be, what
	// its transaction read instead is the first round's reading.
	lone := s.fast.inFlight.Add(1) == 1
	defer s.fast.inFlight.Add(-1)
	first, done, err := s.enqueueFast(ctx, p, pending, seqs, res, &repeats, sent, lone)
	if err != nil || done {
		return err
	}
	for round := 0; len(pending) > 0; round++ {
		if round > 0 {
			if err := backoff(ctx, round); err != nil {
				return err
			}
		}
		rd := first
		first = nil
		if rd == nil {
			if rd, err = s.enqueueRead(ctx, p, pending); err != nil {
				return err
			}
		}
		assignSeqs(uint64(rd.rev), uint64(s.seqSalt.Add(1)&0xff), pending, seqs)
		todo := rd.sort(p, pending, res, &repeats)
		// The call's transactions are independent (each guarded by its
		// own compares), so they are sent at once, up to enqueueInFlight
		// at a time: etcd commits concurrent proposals in one consensus
		// round and one fsync.
		var chunks []enqueueChunk
		for len(todo) > 0 {
			n, send, err := s.enqueueBatch(ctx, p, todo, seqs, rd.urev, rd.markRev, res, nil)
			if err != nil {
				return err
			}
			chunks = append(chunks, enqueueChunk{todo[:n], send})
			todo = todo[n:]
		}
		if pending, err = sendChunks(ctx, chunks, sent); err != nil {
			return err
		}
	}
	return nil
}

// enqueueReading is what an Enqueue round read before it writes.
type enqueueReading struct {
	rev      int64              // the revision read at: the round's ticket
	held     map[string]uniqRec // unique keys held by an instance, unexpired
	urev     map[string]int64   // the revisions of the unique keys that exist
	markRev  map[string]int64   // the creation revisions of the lane markers in place
	existing map[string]uint64  // the instances stored already, with their Seq
}

// enqueueRead reads, for the pending instances of p, their unique keys,
// whether they are stored already (a repeated Enqueue), and their lanes'
// markers (a write whose marker is in place compares its revision instead
// of putting it again).
func (s *Store) enqueueRead(ctx context.Context, p *store.EnqueueParams, pending []int) (*enqueueReading, error) {
	q := s.enqueueReadOps(p, pending)
	ranges, rev, err := s.readAll(ctx, q.ops)
	if err != nil {
		return nil, err
	}
	return s.enqueueReadingOf(p, pending, q, ranges, rev)
}

// enqueueQuery is what enqueueRead reads: the get operations, and the
// unique keys and lane markers they read in order after them.
type enqueueQuery struct {
	ops          []clientv3.Op
	ukeys, lanes []string
}

// enqueueReadOps returns the reads of enqueueRead: the unique keys, then
// the dynamic record of each pending instance, then the lane markers.
func (s *Store) enqueueReadOps(p *store.EnqueueParams, pending []int) enqueueQuery {
	var q enqueueQuery
	for _, i := range pending {
		in := p.Instances[i]
		if uk := in.UniqueKey; uk != "" && !slices.Contains(q.ukeys, uk) {
			q.ukeys = append(q.ukeys, uk)
		}
		m := s.k.laneMarker(&dynRec{Queue: in.Queue, Priority: in.Priority, Kind: in.Kind, Labels: store.NormLabels(in.Labels)})
		if !slices.Contains(q.lanes, m) {
			q.lanes = append(q.lanes, m)
		}
	}
	for _, uk := range q.ukeys {
		q.ops = append(q.ops, clientv3.OpGet(s.k.unique(uk)))
	}
	for _, i := range pending {
		q.ops = append(q.ops, clientv3.OpGet(s.k.dyn(p.Instances[i].ID)))
	}
	for _, m := range q.lanes {
		q.ops = append(q.ops, clientv3.OpGet(m, clientv3.WithKeysOnly()))
	}
	return q
}

// enqueueReadingOf decodes the results of q's reads, read at rev, and
// tells the one-request path what it saw (noteReading).
func (s *Store) enqueueReadingOf(p *store.EnqueueParams, pending []int, q enqueueQuery, ranges []*pb.RangeResponse, rev int64) (*enqueueReading, error) {
	ukeys, lanes := q.ukeys, q.lanes
	rd := &enqueueReading{rev: rev, held: map[string]uniqRec{}, urev: map[string]int64{}, markRev: map[string]int64{}, existing: map[string]uint64{}}
	now := tn(p.Now)
	for j, uk := range ukeys {
		if kvs := ranges[j].GetKvs(); len(kvs) > 0 {
			rd.urev[uk] = kvs[0].ModRevision
			var u uniqRec
			if decode(string(kvs[0].Key), kvs[0].Value, &u) == nil && u.Until > now {
				rd.held[uk] = u
			}
		}
	}
	for j, m := range lanes {
		if kvs := ranges[len(ukeys)+len(pending)+j].GetKvs(); len(kvs) > 0 {
			rd.markRev[m] = kvs[0].CreateRevision
		}
	}
	for j, i := range pending {
		if kvs := ranges[len(ukeys)+j].GetKvs(); len(kvs) > 0 {
			d, err := decodeDyn(string(kvs[0].Key), kvs[0].Value)
			if err != nil {
				return nil, err
			}
			rd.existing[p.Instances[i].ID] = d.Seq
		}
	}
	s.fast.noteReading(rev, lanes, rd.markRev)
	return rd, nil
}

// sort answers the pending instances stored already, repeated in the call
// (repeats gets {later, first}) or whose unique key is held, and returns
// the rest: those to write.
func (rd *enqueueReading) sort(p *store.EnqueueParams, pending []int, res []store.EnqueueResult, repeats *[][2]int) []int {
	var todo []int
	taken := map[string]string{}
	batchIDs := map[string]int{}
	for _, i := range pending {
		in := p.Instances[i]
		if seq, ok := rd.existing[in.ID]; ok {
			res[i] = store.EnqueueResult{ID: in.ID, Seq: seq, Existed: true}
			continue
		}
		if first, ok := batchIDs[in.ID]; ok {
			*repeats = append(*repeats, [2]int{i, first})
			continue
		}
		batchIDs[in.ID] = i
		if uk := in.UniqueKey; uk != "" {
			if h, ok := rd.held[uk]; ok {
				res[i] = store.EnqueueResult{ID: h.ID, Err: fmt.Errorf("%w: instance %s: unique key %q is held by %s until %v", store.ErrDuplicate, in.ID, uk, h.ID, nt(h.Until))}
				continue
			}
			if id, ok := taken[uk]; ok {
				res[i] = store.EnqueueResult{ID: id, Err: fmt.Errorf("%w: instance %s: unique key %q is held by %s of the same batch", store.ErrDuplicate, in.ID, uk, id)}
				continue
			}
			if in.UniqueUntil.After(p.Now) {
				taken[uk] = in.ID
			}
		}
		todo = append(todo, i)
	}
	return todo
}

// enqueueChunk is one write transaction of an Enqueue round: the
// instances it writes and the function that sends it.
type enqueueChunk struct {
	idx  []int
	send func(context.Context) (bool, error)
}

// sendChunks sends the chunks, up to enqueueInFlight at a time, setting
// sent once one may have been applied, and returns the instances to try
// again (a unique key or lane marker changed under them: read again).
func sendChunks(ctx context.Context, chunks []enqueueChunk, sent *atomic.Bool) ([]int, error) {
	ok := make([]bool, len(chunks))
	errs := make([]error, len(chunks))
	sem := make(chan struct{}, enqueueInFlight)
	var wg sync.WaitGroup
	for j, c := range chunks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := ctx.Err(); err != nil {
				errs[j] = err // not sent
				return
			}
			ok[j], errs[j] = c.send(ctx)
			if ok[j] || errs[j] != nil && maybeApplied(errs[j]) {
				sent.Store(true)
			}
		})
	}
	wg.Wait()
	var again []int
	for j, c := range chunks {
		if errs[j] != nil {
			return nil, errs[j]
		}
		if !ok[j] {
			again = append(again, c.idx...)
		}
	}
	return again, nil
}

// enqueueInFlight bounds the transactions one Enqueue call has in flight.
const enqueueInFlight = 8

// assignSeqs numbers the pending instances of one Enqueue round from
// ticket rev and salt: R<<24 | salt<<16 | k+1 for the k-th, with R = rev,
// rev+1, ... for each 2^16-1 of them (a call that big writes in thousands
// of transactions, each one a revision, so a later call still reads a
// higher ticket).
func assignSeqs(rev, salt uint64, pending []int, seqs []uint64) {
	const per = 1<<16 - 1
	for k, i := range pending {
		seqs[i] = (rev+uint64(k/per))<<seqShift | salt<<16 | uint64(k%per+1)
	}
}

// enqueueBatch builds the transaction that writes as many of todo as fit
// one, and returns how many that is and the function that sends it. send
// reports false when a unique key or lane marker changed since it was
// read, or a sequence number clashed (see enqueue), and sets the results
// of what it wrote otherwise.
//
// Every write puts the ticket key (keys.ticket), and fast, when set, makes
// it a one-request write (enqueue_fast.go): compared on the ticket key
// and reading in its failure branch what enqueueRead would.
func (s *Store) enqueueBatch(ctx context.Context, p *store.EnqueueParams, todo []int, seqs []uint64, urev, markRev map[string]int64, res []store.EnqueueResult, fast *fastTxn) (int, func(context.Context) (bool, error), error) {
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	var counted []*group
	size, nmarks := 0, 0
	n := 0
	cut := lowCut(p.Now, enqueueSlack)
	low := map[*group]bool{}    // groups of instances due before cut
	buckets := map[int64]bool{} // of the creation batches
	for _, i := range todo {
		in := p.Instances[i]
		c := in.Clone()
		c.Seq = seqs[i]
		st, d := newRecords(c)
		d.Updated = tn(p.Now)
		g := &group{}
		g.put(s.k.static(in.ID), mustJSON(st))
		// Created, then Scheduled.
		d.State, d.HSeq = store.Created, 1
		s.addHist(g, d, store.Created, p.Now, p.Node, "", nil) // not counted
		d.State, d.HSeq = store.Scheduled, 2
		s.addHist(g, d, 0, p.Now, p.Node, "", nil)
		dv := mustJSON(d)
		g.put(s.k.dyn(in.ID), dv)
		s.addReady(g, d, dv)
		s.addCreated(g, d)
		var ucmp []clientv3.Cmp
		if uk := in.UniqueKey; uk != "" && in.UniqueUntil.After(p.Now) {
			lease, err := s.uniqueLease(ctx, in.UniqueUntil.Sub(p.Now))
			if err != nil {
				return 0, nil, err
			}
			g.put(s.k.unique(uk), mustJSON(&uniqRec{ID: in.ID, Until: tn(in.UniqueUntil)}), clientv3.WithLease(lease))
			ucmp = append(ucmp, clientv3.Compare(clientv3.ModRevision(s.k.unique(uk)), "=", urev[uk]))
		}
		// Never over an instance stored meanwhile under the same ID, nor
		// over keys of another call's instance with the same sequence
		// number and times.
		ucmp = append(ucmp, clientv3.Compare(clientv3.CreateRevision(s.k.dyn(in.ID)), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(s.k.ready(d)), "=", 0))
		nb := 0 // a creation batch more (createdOps)
		if b := bucketStart(d.Created); !buckets[b] {
			nb = 1
		}
		if n > 0 && (len(ops)+len(g.ops)+nmarks+len(g.marks)+len(buckets)+nb > s.maxOps-2 || len(cmps)+len(ucmp)+nmarks+len(g.marks) > s.maxOps || size+g.size > s.maxTxn) {
			break
		}
		buckets[bucketStart(d.Created)] = true
		nmarks += len(g.marks)
		low[g] = d.RunAt < cut
		counted = append(counted, g)
		ops = append(ops, g.ops...)
		cmps = append(cmps, ucmp...)
		size += g.size
		n++
	}
	// A lane marker read in place is compared on its creation revision,
	// which puts of the marker by others leave alone (a claim that deleted
	// it meanwhile fails this transaction, and the call reads again); one
	// that was absent is put, and so is one whose lane gets an instance
	// due before cut, which may go below where claims start reading the
	// lane (laneLow): the put moves the marker's revision, and claims read
	// the lane from its start.
	mcmps, mops := markOps(counted, low, markRev)
	cmps, ops = append(cmps, mcmps...), append(ops, mops...)
	ops = append(ops, s.createdOps(counted)...)
	if op, ok := s.countsOp(counted); ok {
		ops = append(ops, op)
	}
	ops = append(ops, clientv3.OpPut(s.k.ticket(), ""))
	var orElse []clientv3.Op
	if fast != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.k.ticket()), "<", fast.ticket+1))
		orElse = fast.orElse
	}
	send := func(ctx context.Context) (bool, error) {
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
		if err != nil {
			if isLeaseNotFound(err) {
				// A unique-key lease vanished (etcd restored, revoked):
				// forget them all and go again.
				s.mu.Lock()
				clear(s.uniq)
				s.mu.Unlock()
				return false, nil
			}
			return false, err
		}
		s.fast.noteRev(resp.Header.Revision)
		if !resp.Succeeded {
			if fast != nil {
				fast.failed = resp
			}
			return false, nil
		}
		s.fast.noteWrite(resp.Header.Revision, mops, markRev)
		for _, i := range todo[:n] {
			res[i] = store.EnqueueResult{ID: p.Instances[i].ID, Seq: seqs[i]}
		}
		return true, nil
	}
	return n, send, nil
}

// markOps returns the compares and puts of the lane markers the groups
// need (see enqueueBatch): a put for a marker absent when read (markRev)
// or of a lane that gets an instance due early (low), a compare of its
// creation revision otherwise.
func markOps(counted []*group, low map[*group]bool, markRev map[string]int64) (cmps []clientv3.Cmp, ops []clientv3.Op) {
	putMark := map[string]bool{}
	for _, g := range counted {
		for _, m := range g.marks {
			putMark[m] = putMark[m] || low[g] || markRev[m] == 0
		}
	}
	seen := map[string]bool{}
	for _, g := range counted {
		for _, m := range g.marks {
			if seen[m] {
				continue
			}
			seen[m] = true
			if putMark[m] {
				ops = append(ops, clientv3.OpPut(m, ""))
			} else {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(m), "=", markRev[m]))
			}
		}
	}
	return cmps, ops
}

// backoff sleeps a random time that grows with round, up to ~25 ms.
func backoff(ctx context.Context, round int) error {
	d := time.Duration(rand.Int64N(int64(200*time.Microsecond) << min(round, 7)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Claim implements store.Queue. It reads the head of each priority's
// ready range (one read transaction, with the owner's claim number), then
// takes its picks in transactions guarded by each ready key's ModRevision
// (the first also takes the claim number: one consensus round for a
// claim). Uncontended, it takes the head in
// order; after a lost race (in this call or a recent one) it picks at random
// among the first ready candidates, so concurrent claimers spread over the
// queue and a lost race costs one retry. Claimed instances are tied to this
// handle's etcd lease: if the process dies they become rescuable when the
// lease ends.
func (s *Store) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("claim", ctx, err)
	}
	what := "claim from queue " + strconv.Quote(p.Queue)
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap(what, context.Background(), err)
	}
	defer cancel()
	res, err := s.claim(ctx, p)
	return res, s.wrap(what, ctx, err)
}

func (s *Store) claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	lease, err := s.ownLease(ctx)
	if err != nil {
		return nil, err
	}
	res := &store.ClaimResult{}
	cs := newClaimSeq(s, p)
	s.mu.Lock()
	lost := time.Since(s.contended) < time.Second
	s.mu.Unlock()
	// Uncontended, a claim takes the head in order: it reads one entry
	// more than it takes, to know whether it took all that is ready (the
	// entries of a wider window would go unread over the wire: a
	// drained queue claims one or two at a time).
	window := p.Limit + 1
	if lost {
		// Contended: spread wider, so concurrent picks rarely collide.
		window = 2*p.Limit + 4*s.window
	}
	for round := 0; ; round++ {
		if round == maxRounds {
			res.NextRunAt = p.Now // work is ready but others keep winning
			return res, nil
		}
		cands, next, paused, seqKV, err := s.readReady(ctx, p, window, p.Limit-len(res.Instances), cs.readKey())
		if err != nil {
			return nil, err
		}
		if cs.late(seqKV) {
			// A repeat (the same number: what that call took) or a late
			// call (a lower one: nothing).
			_, err := s.reserveClaim(ctx, p, lease, res)
			return res, err
		}
		if paused || len(cands) == 0 {
			if !cs.reserved {
				if _, err := s.reserveClaim(ctx, p, lease, res); err != nil {
					return nil, err
				}
			}
			if !paused {
				res.NextRunAt = next
			}
			return res, nil // nothing is claimed from a paused queue
		}
		picks := choosePicks(cands, p.Limit-len(res.Instances), lost)
		stale, done, err := s.takePicks(ctx, p, lease, cs, picks, res)
		if err != nil {
			return nil, err
		}
		if done {
			return res, nil
		}
		if stale > 0 {
			lost = true
			window = 2*p.Limit + 4*s.window
			s.mu.Lock()
			s.contended = time.Now()
			s.mu.Unlock()
		}
		if len(res.Instances) >= p.Limit {
			return res, nil
		}
		if stale == 0 && len(cands) < window && len(picks) == len(cands) {
			// Everything ready was taken by us.
			res.NextRunAt = next
			return res, nil
		}
		if stale > 0 {
			if len(res.Instances) > 0 {
				// Others compete for the same work: return what we won
				// rather than race on, and say more is ready now.
				res.NextRunAt = p.Now
				return res, nil
			}
			if err := backoff(ctx, min(round, 3)); err != nil {
				return nil, err
			}
		}
	}
}

// claimSeq is a claim's owner claim number (ClaimSeq): read with the
// ready entries and taken by the first claim transaction, guarded on its
// revision (rev, 0 while it is absent); later transactions of the call
// are guarded on the revision that one wrote it at. A claim that takes
// nothing takes the number in a transaction of its own (reserveClaim),
// so a late call never claims after it.
type claimSeq struct {
	key, want string // key is "" for a claim without a number
	reserved  bool   // the number is taken (or there is none)
	rev       int64
}

func newClaimSeq(s *Store, p *store.ClaimParams) *claimSeq {
	cs := &claimSeq{want: hex16(p.ClaimSeq), reserved: p.ClaimSeq == 0}
	if !cs.reserved {
		cs.key = s.k.claimSeqKey(p.Owner)
	}
	return cs
}

// readKey is the key a claim's read reads with the ready entries: the
// number's while it is not taken yet.
func (cs *claimSeq) readKey() string {
	if cs.reserved {
		return ""
	}
	return cs.key
}

// late notes the number read (kv, nil when absent) and reports whether
// it is this claim's or a later one's: the claim is a repeat, or late.
func (cs *claimSeq) late(kv *mvccpb.KeyValue) bool {
	if cs.reserved {
		return false
	}
	cs.rev = 0
	if kv != nil {
		if string(kv.Value) >= cs.want {
			return true
		}
		cs.rev = kv.ModRevision
	}
	return false
}

// choosePicks returns the candidates a claim that needs need takes: the
// head in order, or, contended (lost), a head-biased random draw.
func choosePicks(cands []candidate, need int, lost bool) []candidate {
	if len(cands) <= need {
		return cands
	}
	if !lost {
		return cands[:need]
	}
	picks := make([]candidate, need)
	for j, ix := range headBiasedPicks(len(cands), need) {
		picks[j] = cands[ix]
	}
	return picks
}

// claimGroups makes the write of each pick: its ready key deleted, its
// dynamic record Processing under p.Owner, its static record read back.
// Picks that do not decode are returned as bad.
func (s *Store) claimGroups(p *store.ClaimParams, lease clientv3.LeaseID, picks []candidate) (gs []*group, dyns []*dynRec, bad []candidate) {
	for _, c := range picks {
		cd, err := decodeDyn(c.key, c.val)
		if err != nil {
			bad = append(bad, c)
			continue
		}
		d := cd.next()
		d.State = store.Processing
		d.Attempt++
		d.Owner = p.Owner
		d.LeaseUntil = tn(p.LeaseUntil)
		d.LeaseID = int64(lease)
		d.Cancel = false
		d.Updated = tn(p.Now)
		d.HSeq++
		// The pause key's absence is a guard too: a pause committed after
		// the read stops the claim (compared once per transaction,
		// however many picks share it).
		g := &group{guards: []guard{{c.key, c.rev}, {s.k.paused(p.Queue), 0}}, ref: len(dyns)}
		g.del(c.key)
		s.addHist(g, &d, store.Scheduled, p.Now, p.Owner, "", nil)
		g.put(s.k.dyn(d.ID), mustJSON(&d))
		g.get(s.k.static(d.ID))
		gs, dyns = append(gs, g), append(dyns, &d)
	}
	return gs, dyns, bad
}

// claimExtra is what each claim transaction carries besides its picks:
// the claim record of the attempts it takes (the running set and owner
// index in one key), the drop of this handle's claim records whose
// attempts all ended, and the claim number (guard and put).
func (s *Store) claimExtra(p *store.ClaimParams, lease clientv3.LeaseID, cs *claimSeq, dyns []*dynRec) extraOps {
	return func(batch []*group, room int) extraTxn {
		rec := claimRec{LeaseID: int64(lease), LeaseUntil: tn(p.LeaseUntil)}
		for _, g := range batch {
			rec.IDs = append(rec.IDs, dyns[g.ref].ID)
			rec.Attempts = append(rec.Attempts, dyns[g.ref].Attempt)
		}
		ck := s.claimRecKey(p.Owner, p.ClaimSeq)
		for _, g := range batch {
			g.ck = ck
		}
		x := s.dropOps(room - 2)
		x.ops = append(x.ops, clientv3.OpPut(ck, mustJSON(&rec)))
		if cs.key == "" {
			return x
		}
		x.guard = guard{cs.key, cs.rev}
		if !cs.reserved {
			x.ops = append(x.ops, clientv3.OpPut(cs.key, cs.want, clientv3.WithLease(lease)))
		}
		drop := x.done
		x.done = func(rev int64) {
			drop(rev)
			if !cs.reserved {
				cs.reserved, cs.rev = true, rev
			}
		}
		return x
	}
}

// takePicks claims picks and adds what it took to res; stale counts the
// picks others took first. done reports a claim that must end now
// (another claim of this owner took a number meanwhile).
func (s *Store) takePicks(ctx context.Context, p *store.ClaimParams, lease clientv3.LeaseID, cs *claimSeq, picks []candidate, res *store.ClaimResult) (stale int, done bool, err error) {
	gs, dyns, bad := s.claimGroups(p, lease, picks)
	if len(bad) > 0 {
		if err := s.quarantine(ctx, bad); err != nil {
			return 0, true, err
		}
	}
	if err := s.commitX(ctx, gs, s.claimExtra(p, lease, cs, dyns)); errors.Is(err, errGuardMoved) {
		// Another claim of this owner took a number meanwhile: this one
		// ends with what it has.
		res.NextRunAt = p.Now
		return 0, true, nil
	} else if err != nil {
		return 0, true, err
	}
	for j, g := range gs {
		if !g.applied {
			stale++
			continue
		}
		var st *staticRec
		if kvs := g.resp[len(g.resp)-1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			st, err = decodeStatic(string(kvs[0].Key), kvs[0].Value)
		} else {
			err = fmt.Errorf("%w: instance %s has no static record", store.ErrCorrupt, dyns[j].ID)
		}
		if err != nil {
			// Claimed, but cannot be run: end it so it does not come
			// back, and leave the rest of the queue working.
			if ferr := s.terminateCorrupt(ctx, dyns[j], p.Owner, p.Now, err); ferr != nil {
				return 0, true, ferr
			}
			continue
		}
		s.remember(dyns[j], g.rev, g.ck)
		res.Instances = append(res.Instances, instance(st, dyns[j]))
	}
	return stale, false, nil
}

// headBiasedPicks returns need distinct indexes below n (need < n), in
// order, drawn at random with the head favoured: index n·u² for a uniform
// u, so the first eighth of the window is drawn about a third of the time.
// Contended claimers still spread over the window (a collision costs a
// retry), but the oldest ready work (rescued attempts keep their place at
// the head) is not left waiting behind a uniform draw over the whole
// window.
func headBiasedPicks(n, need int) []int {
	if 2*need >= n {
		perm := rand.Perm(n)[:need]
		slices.Sort(perm)
		return perm
	}
	seen := make(map[int]bool, need)
	out := make([]int, 0, need)
	for len(out) < need {
		u := rand.Float64()
		ix := min(int(float64(n)*u*u), n-1)
		if !seen[ix] {
			seen[ix] = true
			out = append(out, ix)
		}
	}
	slices.Sort(out)
	return out
}

// reserveClaim makes p.ClaimSeq the owner's last claim number, in one
// transaction that compares the number stored: when it is lower (or none),
// the number is taken, the record of the owner's previous claim is dropped
// and fresh is true: the caller claims. When it is p.ClaimSeq, this is a
// repeat: res gets the attempts that claim took that are still running
// under the owner. When it is higher, this call came late: res stays empty.
// The owner's keys live on the handle's etcd lease.
func (s *Store) reserveClaim(ctx context.Context, p *store.ClaimParams, lease clientv3.LeaseID, res *store.ClaimResult) (fresh bool, err error) {
	sk, want := s.k.claimSeqKey(p.Owner), hex16(p.ClaimSeq)
	take := []clientv3.Op{clientv3.OpPut(sk, want, clientv3.WithLease(lease))}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(sk), "<", want)).Then(take...).Else(clientv3.OpGet(sk)).Commit()
	if err != nil {
		return false, err
	}
	if resp.Succeeded {
		return true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		// No number yet (a Value compare fails on a missing key).
		resp, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(sk), "=", 0)).Then(take...).Else(clientv3.OpGet(sk)).Commit()
		if err != nil {
			return false, err
		}
		if resp.Succeeded {
			return true, nil
		}
		if kvs = resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 0 {
			return false, fmt.Errorf("claim number of %s vanished while being read", p.Owner)
		}
	}
	if string(kvs[0].Value) != want {
		return false, nil // a newer claim was applied: this call is stale
	}
	// A repeat: what the first call took (its claim records), if still
	// running under owner.
	got, err := s.cli.Get(ctx, s.k.claimRecSeq(p.Owner, p.ClaimSeq), clientv3.WithPrefix())
	if err != nil {
		return false, err
	}
	var ids, cks []string
	var attempts []int
	for _, kv := range got.Kvs {
		var r claimRec
		if decode(string(kv.Key), kv.Value, &r) != nil || len(r.IDs) != len(r.Attempts) {
			continue
		}
		for i, id := range r.IDs {
			ids, cks, attempts = append(ids, id), append(cks, string(kv.Key)), append(attempts, r.Attempts[i])
		}
	}
	if len(ids) == 0 {
		return false, nil
	}
	ops := make([]clientv3.Op, 0, 2*len(ids))
	for _, id := range ids {
		ops = append(ops, clientv3.OpGet(s.k.static(id)), clientv3.OpGet(s.k.dyn(id)))
	}
	rs, err := s.read(ctx, ops)
	if err != nil {
		return false, err
	}
	for j := range ids {
		skv, dkv := rs[2*j].GetKvs(), rs[2*j+1].GetKvs()
		if len(skv) == 0 || len(dkv) == 0 {
			continue
		}
		st, err := decodeStatic(string(skv[0].Key), skv[0].Value)
		if err != nil {
			continue
		}
		d, err := decodeDyn(string(dkv[0].Key), dkv[0].Value)
		if err != nil || d.State != store.Processing || d.Owner != p.Owner || d.Attempt != attempts[j] {
			continue
		}
		s.remember(d, dkv[0].ModRevision, cks[j])
		res.Instances = append(res.Instances, instance(st, d))
	}
	return false, nil
}

// quarantine moves undecodable ready-index entries aside (under bad/), so
// they stop occupying the head of the queue.
func (s *Store) quarantine(ctx context.Context, bad []candidate) error {
	rs, err := s.read(ctx, func() []clientv3.Op {
		var ops []clientv3.Op
		for _, b := range bad {
			ops = append(ops, clientv3.OpGet(b.key))
		}
		return ops
	}())
	if err != nil {
		return err
	}
	var gs []*group
	for j, b := range bad {
		kvs := rs[j].GetKvs()
		if len(kvs) == 0 {
			continue
		}
		g := &group{guards: []guard{{b.key, kvs[0].ModRevision}}}
		g.del(b.key)
		g.put(s.k.p+"bad/"+b.key[len(s.k.p):], string(kvs[0].Value))
		gs = append(gs, g)
	}
	return s.commit(ctx, gs)
}

// terminateCorrupt ends a claimed instance whose static record cannot be
// decoded.
func (s *Store) terminateCorrupt(ctx context.Context, d *dynRec, node string, now time.Time, cause error) error {
	rs, err := s.read(ctx, []clientv3.Op{clientv3.OpGet(s.k.dyn(d.ID))})
	if err != nil || len(rs[0].GetKvs()) == 0 {
		return err
	}
	kv := rs[0].GetKvs()[0]
	e := d.next()
	e.State = store.Terminated
	e.Owner, e.LeaseUntil, e.LeaseID = "", 0, 0
	e.Finished, e.Updated = tn(now), tn(now)
	e.Error = cause.Error()
	e.HSeq++
	g := &group{guards: []guard{{s.k.dyn(d.ID), kv.ModRevision}}}
	s.addHist(g, &e, store.Processing, now, node, e.Error, nil)
	g.put(s.k.dyn(d.ID), mustJSON(&e))
	s.addFinished(g, &e)
	return s.commit(ctx, []*group{g})
}

// readDyn reads the dynamic records of ids: nil where absent; an error per
// undecodable one.
func (s *Store) readDyn(ctx context.Context, ids []string) ([]*dynRec, []int64, []error, error) {
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		ops[i] = clientv3.OpGet(s.k.dyn(id))
	}
	rs, err := s.read(ctx, ops)
	if err != nil {
		return nil, nil, nil, err
	}
	ds := make([]*dynRec, len(ids))
	revs := make([]int64, len(ids))
	errs := make([]error, len(ids))
	for i, r := range rs {
		if kvs := r.GetKvs(); len(kvs) > 0 {
			ds[i], errs[i] = decodeDyn(string(kvs[0].Key), kvs[0].Value)
			revs[i] = kvs[0].ModRevision
		}
	}
	return ds, revs, errs, nil
}

// readDynAlive reads the dynamic records of ids (nil where absent or
// undecodable) and the live handles' leases, in one round trip when they fit
// one transaction.
func (s *Store) readDynAlive(ctx context.Context, ids []string) ([]*dynRec, []int64, map[int64]bool, error) {
	ops := []clientv3.Op{clientv3.OpGet(s.k.alivePrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())}
	for _, id := range ids {
		ops = append(ops, clientv3.OpGet(s.k.dyn(id)))
	}
	rs, err := s.read(ctx, ops)
	if err != nil {
		return nil, nil, nil, err
	}
	alive := map[int64]bool{}
	for _, kv := range rs[0].GetKvs() {
		if v, ok := parseHex16(string(kv.Key[len(s.k.alivePrefix()):])); ok {
			alive[int64(v)] = true
		}
	}
	ds := make([]*dynRec, len(ids))
	revs := make([]int64, len(ids))
	for i, r := range rs[1:] {
		if kvs := r.GetKvs(); len(kvs) > 0 {
			ds[i], _ = decodeDyn(string(kvs[0].Key), kvs[0].Value)
			revs[i] = kvs[0].ModRevision
		}
	}
	return ds, revs, alive, nil
}

// aliveLeases returns the etcd leases of the store handles now alive.
func (s *Store) aliveLeases(ctx context.Context) (map[int64]bool, error) {
	resp, err := s.cli.Get(ctx, s.k.alivePrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	alive := map[int64]bool{}
	for _, kv := range resp.Kvs {
		if v, ok := parseHex16(string(kv.Key[len(s.k.alivePrefix()):])); ok {
			alive[int64(v)] = true
		}
	}
	return alive, nil
}

// Renew implements store.Queue. It is one read and one write transaction
// per batch of leases, whatever their number; between renewals, the etcd
// lease keep-alive alone keeps the handle's claims alive. An attempt whose
// claiming handle lost its etcd lease (the process was cut off for longer
// than the lease TTL) is Lost: another process may already run it.
func (s *Store) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("renew", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("renew", context.Background(), err)
	}
	defer cancel()
	res := &store.RenewResult{}
	pending := p.Leases
	for round := 0; len(pending) > 0; round++ {
		if round > maxRounds {
			return nil, s.wrap("renew", ctx, errors.New("gave up after repeated conflicts"))
		}
		ids := make([]string, len(pending))
		for i, l := range pending {
			ids[i] = l.ID
		}
		ds, revs, alive, err := s.readDynAlive(ctx, ids)
		if err != nil {
			return nil, s.wrap("renew", ctx, err)
		}
		var gs []*group
		for i, l := range pending {
			d := ds[i]
			if d == nil || d.State != store.Processing || d.Owner != p.Owner || d.Attempt != l.Attempt || !alive[d.LeaseID] {
				s.forget(l.ID)
				res.Lost = append(res.Lost, l)
				continue
			}
			e := d.next()
			e.LeaseUntil = tn(p.Until)
			g := &group{guards: []guard{{s.k.dyn(l.ID), revs[i]}}, ref: i}
			g.put(s.k.dyn(l.ID), mustJSON(&e))
			gs = append(gs, g)
		}
		if err := s.commit(ctx, gs); err != nil {
			return nil, s.wrap("renew", ctx, err)
		}
		var again []store.LeaseRef
		for _, g := range gs {
			l := pending[g.ref]
			if g.stale {
				again = append(again, l)
				continue
			}
			e := ds[g.ref].next()
			e.LeaseUntil = tn(p.Until)
			s.remember(&e, g.rev, "")
			if ds[g.ref].Cancel {
				res.CancelRequested = append(res.CancelRequested, l)
			}
		}
		pending = again
	}
	return res, nil
}

// Finish implements store.Queue.
func (s *Store) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("finish", ctx, err)
	}
	for i := range p.Outcomes {
		if err := p.Outcomes[i].Validate(); err != nil {
			return nil, s.wrap("finish", ctx, err)
		}
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("finish", context.Background(), err)
	}
	defer cancel()
	res := make([]store.FinishResult, len(p.Outcomes))
	seen := map[string]bool{}
	var pending []int
	for i, o := range p.Outcomes {
		if seen[o.ID] {
			res[i].Err = fmt.Errorf("%w: instance %s appears twice in one Finish", store.ErrLeaseLost, o.ID)
			continue
		}
		seen[o.ID] = true
		if o.State == store.Completed && 2*len(o.Result)+len(o.Error) > s.maxValue {
			res[i].Err = fmt.Errorf("%w: instance %s: result of %d bytes is over the etcd store's limit of %d (raise etcdstore.WithMaxValueBytes with etcd's --max-request-bytes, or return less)", store.ErrTooLarge, o.ID, len(o.Result), s.maxValue/2)
			continue
		}
		pending = append(pending, i)
	}
	for round := 0; len(pending) > 0; round++ {
		if round > maxRounds {
			return nil, s.wrap("finish", ctx, errors.New("gave up after repeated conflicts"))
		}
		ds, revs, err := s.finishRecords(ctx, p, pending, round)
		if err != nil {
			return nil, s.wrap("finish", ctx, err)
		}
		var gs []*group
		var dyns []*dynRec
		for j, i := range pending {
			o := &p.Outcomes[i]
			d := ds[j]
			if d == nil || d.State != store.Processing || d.Owner != p.Owner || d.Attempt != o.Attempt {
				if res[i], err = s.notRunning(ctx, d, o, p.Owner); err != nil {
					return nil, s.wrap("finish", ctx, err)
				}
				continue
			}
			g, e := s.finishGroup(p, o, d, revs[j])
			g.ref = i
			gs = append(gs, g)
			dyns = append(dyns, e)
		}
		// A claim record goes with the transaction that ends the last of
		// its attempts this handle runs; one whose attempts ended
		// otherwise (lost, or finished by concurrent calls) goes with a
		// later transaction (dropOps).
		extra := func(batch []*group, room int) extraTxn {
			return s.finishDrops(batch, room)
		}
		if err := s.commitX(ctx, gs, extra); err != nil {
			return nil, s.wrap("finish", ctx, err)
		}
		pending = pending[:0]
		for k, g := range gs {
			if g.stale {
				pending = append(pending, g.ref)
				continue
			}
			res[g.ref] = store.FinishResult{State: dyns[k].State}
			s.forget(p.Outcomes[g.ref].ID)
		}
	}
	return res, nil
}

// finishRecords returns the dynamic records (and their revisions) of the
// pending outcomes of p: first from what this handle wrote when it
// claimed (no read; in the first round only); what it does not know, or
// what changed since, is read.
func (s *Store) finishRecords(ctx context.Context, p *store.FinishParams, pending []int, round int) ([]*dynRec, []int64, error) {
	ds := make([]*dynRec, len(pending))
	revs := make([]int64, len(pending))
	var unknown []int
	var uids []string
	s.mu.Lock()
	for j, i := range pending {
		o := &p.Outcomes[i]
		ow, ok := s.owned[o.ID]
		if ok && round == 0 && ow.d.Owner == p.Owner && ow.d.Attempt == o.Attempt {
			d := ow.d
			ds[j], revs[j] = &d, ow.rev
		} else {
			unknown = append(unknown, j)
			uids = append(uids, o.ID)
		}
	}
	s.mu.Unlock()
	if len(unknown) == 0 {
		return ds, revs, nil
	}
	uds, urevs, _, err := s.readDyn(ctx, uids)
	if err != nil {
		return nil, nil, err
	}
	for k, j := range unknown {
		ds[j], revs[j] = uds[k], urevs[k]
	}
	return ds, revs, nil
}

// notRunning is the result of outcome o of owner for an instance whose
// record d (nil: gone) is not o's attempt running under owner: the
// outcome recorded already (a repeated Finish), or ErrLeaseLost.
func (s *Store) notRunning(ctx context.Context, d *dynRec, o *store.Outcome, owner string) (store.FinishResult, error) {
	s.forget(o.ID)
	if d != nil {
		ok, err := s.applied(ctx, d, o, owner)
		if err != nil {
			return store.FinishResult{}, err
		}
		if ok {
			return store.FinishResult{State: d.State}, nil // a repeated Finish: this very outcome is recorded
		}
	}
	return store.FinishResult{Err: fmt.Errorf("%w: instance %s attempt %d is not running under owner %s", store.ErrLeaseLost, o.ID, o.Attempt, owner)}, nil
}

// finishGroup makes the write of outcome o for d, o's attempt running
// under p.Owner at revision rev, and returns it with the record it
// writes.
func (s *Store) finishGroup(p *store.FinishParams, o *store.Outcome, d *dynRec, rev int64) (*group, *dynRec) {
	e := d.next()
	e.State = o.State
	if o.State == store.Scheduled && d.Cancel {
		// Canceled while the attempt ran, before a Renew told its owner:
		// the cancel wins over another attempt.
		e.State = store.Canceled
	}
	e.Owner, e.LeaseUntil, e.LeaseID, e.Cancel = "", 0, 0, false
	e.Updated = tn(p.Now)
	e.Error = o.Error
	e.Result = nil
	e.HSeq++
	g := &group{guards: []guard{{s.k.dyn(o.ID), rev}}}
	s.mu.Lock()
	if ow, ok := s.owned[o.ID]; ok && ow.d.Attempt == o.Attempt {
		g.ck = ow.ck
	}
	s.mu.Unlock()
	if e.State == store.Scheduled {
		if o.Release {
			e.Attempt--
		}
		e.RunAt = tn(o.RunAt)
		s.addHist(g, &e, store.Processing, p.Now, p.Owner, o.Error, nil)
		dv := mustJSON(&e)
		g.put(s.k.dyn(o.ID), dv)
		s.addReady(g, &e, dv)
		return g, &e
	}
	if o.State == store.Completed {
		e.Result = o.Result
	}
	e.Finished = tn(p.Now)
	s.addHist(g, &e, store.Processing, p.Now, p.Owner, o.Error, e.Result)
	g.put(s.k.dyn(o.ID), mustJSON(&e))
	s.addFinished(g, &e)
	return g, &e
}

// applied reports whether d is where outcome o of owner left it: the same
// state, attempt, error, result and run time, and its last history record
// is o's transition, made by owner; or, for a retry or release, it was
// canceled instead (see store.Queue.Finish), with o's attempt and error.
func (s *Store) applied(ctx context.Context, d *dynRec, o *store.Outcome, owner string) (bool, error) {
	state, attempt := o.State, o.Attempt
	if state == store.Scheduled && d.State == store.Canceled {
		state = store.Canceled
	} else if o.Release {
		attempt--
	}
	if d.State != state || d.Attempt != attempt || d.Error != o.Error {
		return false, nil
	}
	switch state {
	case store.Completed:
		if !bytes.Equal(d.Result, o.Result) {
			return false, nil
		}
	case store.Scheduled:
		if d.RunAt != tn(o.RunAt) {
			return false, nil
		}
	}
	if len(d.Hist) == 0 {
		return false, nil
	}
	h := d.Hist[len(d.Hist)-1]
	return h.Seq == d.HSeq && h.Node == owner && h.State == state, nil
}

// Rescue implements store.Queue. A running instance is rescued when its
// lease deadline passed p.Now, or when the etcd lease of the handle that
// claimed it has ended (its process died or was cut off for longer than the
// lease TTL) — so a crashed process's work comes back within the TTL, not
// the contract lease.
func (s *Store) Rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("rescue", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("rescue", context.Background(), err)
	}
	defer cancel()
	out, err := s.rescue(ctx, p)
	return out, s.wrap("rescue", ctx, err)
}

func (s *Store) rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	now := tn(p.Now)
	var out []*store.Instance
	for round := 0; len(out) < p.Limit && round < maxRounds; round++ {
		alive, err := s.aliveLeases(ctx)
		if err != nil {
			return nil, err
		}
		// Page through the claim records for those whose lease ended (the
		// deadline they were claimed with passed, or their handle's etcd
		// lease is gone): only their attempts can be due.
		var recs []claimRecAt
		from := s.k.claimRecPrefix()
		end := prefixEnd(from)
		need := p.Limit - len(out)
		members := 0
		for members < need+s.window {
			resp, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(1000))
			if err != nil {
				return nil, err
			}
			for _, kv := range resp.Kvs {
				var r claimRec
				key := string(kv.Key)
				if decode(key, kv.Value, &r) != nil || len(r.IDs) != len(r.Attempts) {
					recs = append(recs, claimRecAt{key: key}) // unreadable: dropped
					continue
				}
				if r.LeaseUntil < now || !alive[r.LeaseID] {
					recs = append(recs, claimRecAt{key: key, owner: s.k.ownerOf(key), rec: r, rev: kv.ModRevision})
					members += len(r.IDs)
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
		if len(recs) == 0 {
			break
		}
		got, changed, err := s.rescueRecords(ctx, recs, need, p.Now, p.Node, func(d *dynRec) string {
			switch {
			case d.LeaseUntil >= now && alive[d.LeaseID]:
				return "" // renewed
			case !alive[d.LeaseID] && d.LeaseUntil >= now:
				return fmt.Sprintf("lease of %s ended: its process stopped renewing its etcd lease %x", d.Owner, d.LeaseID)
			}
			return fmt.Sprintf("lease of %s expired at %v", d.Owner, nt(d.LeaseUntil).Format(time.RFC3339Nano))
		})
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
		if !changed {
			break
		}
	}
	return out, nil
}

// claimRecAt is a claim record read, with its key, the owner it names
// and its ModRevision (0: not known).
type claimRecAt struct {
	key, owner string
	rec        claimRec
	rev        int64
}

// rescueRecords reads the attempts recs list and rescues (rescueMove) up
// to need of those still running under their record for which why gives
// a reason, rescuers on several nodes spread at random over them. A record
// none of whose attempts runs any more is deleted; one some of whose
// attempts ended is rewritten without them. Claim records are written
// once by their claim and changed after only by this, guarded on their
// revision. changed reports
// whether anything was written.
func (s *Store) rescueRecords(ctx context.Context, recs []claimRecAt, need int, now time.Time, node string, why func(d *dynRec) string) (out []*store.Instance, changed bool, err error) {
	type member struct {
		id      string
		attempt int
		rec     int
	}
	var ms []member
	for ri, r := range recs {
		for i, id := range r.rec.IDs {
			ms = append(ms, member{id, r.rec.Attempts[i], ri})
		}
	}
	ids := make([]string, len(ms))
	for j, m := range ms {
		ids[j] = m.id
	}
	ds, revs, _, err := s.readDyn(ctx, ids)
	if err != nil {
		return nil, false, err
	}
	running := make([]int, len(recs))
	still := make([]claimRec, len(recs)) // each record's attempts still running
	var gs []*group
	var dyns []*dynRec
	rescues := 0
	for _, j := range rand.Perm(len(ms)) {
		m, d := ms[j], ds[j]
		if d == nil || d.State != store.Processing || d.Owner != recs[m.rec].owner || d.Attempt != m.attempt {
			continue // ended (or claimed again, under another record)
		}
		running[m.rec]++
		still[m.rec].IDs = append(still[m.rec].IDs, m.id)
		still[m.rec].Attempts = append(still[m.rec].Attempts, m.attempt)
		w := why(d)
		if w == "" || rescues >= need {
			continue
		}
		g, e := s.rescueMove(d, revs[j], now, node, w)
		gs, dyns = append(gs, g), append(dyns, e)
		rescues++
	}
	for ri, r := range recs {
		switch {
		case running[ri] == 0:
			g := &group{}
			g.del(r.key)
			gs, dyns = append(gs, g), append(dyns, nil)
		case running[ri] < len(r.rec.IDs) && r.rev != 0:
			// Forget the attempts that had ended when read (they never
			// run under this record again), so later passes read less;
			// guarded, so a record its owner deleted stays deleted.
			n := r.rec
			n.IDs, n.Attempts = still[ri].IDs, still[ri].Attempts
			g := &group{guards: []guard{{r.key, r.rev}}}
			g.put(r.key, mustJSON(&n))
			gs, dyns = append(gs, g), append(dyns, nil)
		}
	}
	if len(gs) == 0 {
		return nil, false, nil
	}
	if err := s.commit(ctx, gs); err != nil {
		return nil, false, err
	}
	for j, g := range gs {
		if !g.applied {
			continue
		}
		changed = true
		if dyns[j] == nil {
			continue
		}
		var st *staticRec
		if kvs := g.resp[len(g.resp)-1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			st, _ = decodeStatic(string(kvs[0].Key), kvs[0].Value)
		}
		out = append(out, instance(st, dyns[j]))
	}
	return out, changed, nil
}

// rescueMove builds the change that takes d, a Processing record read at
// revision rev whose owner is gone or whose lease ended, out of its owner's
// hands: back to Scheduled with its RunAt kept (it keeps its place in the
// queue), or to Canceled when a cancel was requested that the owner never
// saw, or to Terminated when it has no retries left. why is the recorded
// error. Lease rescue (Rescue) and dead-node rescue (RescueNodes) both use
// it. The group reads the static record last, for the caller's result.
func (s *Store) rescueMove(d *dynRec, rev int64, now time.Time, node, why string) (*group, *dynRec) {
	e := d.next()
	canceled := e.Cancel // its owner never saw the request
	e.Owner, e.LeaseUntil, e.LeaseID, e.Cancel = "", 0, 0, false
	e.Updated = tn(now)
	e.Error = why
	e.HSeq++
	g := &group{guards: []guard{{s.k.dyn(e.ID), rev}}}
	if canceled || e.MaxRetries >= 0 && e.Attempt > e.MaxRetries {
		e.State = store.Terminated
		if canceled {
			e.State = store.Canceled
		}
		e.Finished = tn(now)
		s.addHist(g, &e, store.Processing, now, node, why, nil)
		g.put(s.k.dyn(e.ID), mustJSON(&e))
		s.addFinished(g, &e)
	} else {
		e.State = store.Scheduled
		s.addHist(g, &e, store.Processing, now, node, why, nil)
		dv := mustJSON(&e)
		g.put(s.k.dyn(e.ID), dv)
		s.addReady(g, &e, dv)
	}
	g.get(s.k.static(e.ID))
	return g, &e
}

// Cancel implements store.Queue.
func (s *Store) Cancel(ctx context.Context, p *store.CancelParams) (*store.Instance, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("cancel", ctx, err)
	}
	what := "cancel instance " + p.ID
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap(what, context.Background(), err)
	}
	defer cancel()
	for round := 0; round < maxRounds; round++ {
		rs, err := s.read(ctx, []clientv3.Op{clientv3.OpGet(s.k.dyn(p.ID)), clientv3.OpGet(s.k.static(p.ID))})
		if err != nil {
			return nil, s.wrap(what, ctx, err)
		}
		kvs := rs[0].GetKvs()
		if len(kvs) == 0 {
			return nil, s.wrap(what, ctx, fmt.Errorf("%w: %s", store.ErrNotFound, p.ID))
		}
		d, err := decodeDyn(string(kvs[0].Key), kvs[0].Value)
		if err != nil {
			return nil, s.wrap(what, ctx, err)
		}
		var st *staticRec
		if skv := rs[1].GetKvs(); len(skv) > 0 {
			st, _ = decodeStatic(string(skv[0].Key), skv[0].Value)
		}
		if d.State.Final() {
			return instance(st, d), s.wrap(what, ctx, fmt.Errorf("%w: %s is %v", store.ErrFinished, p.ID, d.State))
		}
		e := d.next()
		g := &group{guards: []guard{{s.k.dyn(p.ID), kvs[0].ModRevision}}}
		switch d.State {
		case store.Processing:
			if d.Cancel {
				return instance(st, d), nil
			}
			e.Cancel = true
			e.Updated = tn(p.Now)
			g.put(s.k.dyn(p.ID), mustJSON(&e))
			g.put(s.k.cancelNotice(), cancelNoticeValue(p.ID, d.Attempt)) // SubscribeCancels (cancels.go)
		default:
			if d.State == store.Scheduled {
				g.del(s.k.ready(d))
				g.del(s.k.legacyReady(d))
			}
			e.State = store.Canceled
			e.Updated, e.Finished = tn(p.Now), tn(p.Now)
			e.HSeq++
			s.addHist(g, &e, d.State, p.Now, p.Node, "", nil)
			g.put(s.k.dyn(p.ID), mustJSON(&e))
			s.addFinished(g, &e)
		}
		if err := s.commit(ctx, []*group{g}); err != nil {
			return nil, s.wrap(what, ctx, err)
		}
		if g.applied {
			return instance(st, &e), nil
		}
	}
	return nil, s.wrap(what, ctx, errors.New("gave up after repeated conflicts"))
}

package etcdstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// candidate is one ready-index entry a claim may take.
type candidate struct {
	key string
	rev int64
	val []byte
}

// laneRead is what one claim read asks of one lane of the queue.
type laneRead struct {
	mark, pp, end string
	start         string // where the ready range is read from: pp, or the lane's low key
	hinted        bool   // read up to the lane's far key only
	legacy        bool   // a priority range written before lanes
	at            int    // index of the value range in the results
	nextAt        int    // index of the next-due read in the results (0: not read with them)
}

// readyPlan is one claim read of a queue: the operations of its read
// transaction and what each lane's results are.
type readyPlan struct {
	q      string
	window int      // entries read with their values
	depth  int      // keys read to find a lane's far key
	marks  []string // the lane markers the plan was made from
	ops    []clientv3.Op
	reads  []laneRead
	// lowCmps hold when the lanes read from their low keys (laneLow) have
	// kept their markers' revisions: the plan's reads are valid only then.
	lowCmps []clientv3.Cmp
}

// Indexes of the plan's first operations in its results.
const (
	readyMarksAt  = 0 // the queue's lane markers
	readyPausedAt = 1 // its pause key
	readySeqAt    = 2 // the owner's claim number
)

// readReady reads up to window ready entries of queue p.Queue at p.Now
// that the claimer may take (p.Kinds, p.Labels), in claim order, and, when
// fewer than need are ready, the earliest run time of the entries not yet
// ready in those lanes. It reads the queue's lane markers and its pause key
// in the same transaction as the per-lane ranges, and reads again when the
// markers differ from the cached ones. It ranges only the lanes the
// claimer may take, and merges them by priority, RunAt and Seq; paused
// reports a paused queue (and nothing is read). When seqKey is not
// empty, its key (the owner's claim number) is read in the same
// transaction and returned as seqKV (nil when absent).
//
// etcd walks the whole key range of a Range in its in-memory index even
// when a limit is given (3.4 to count what it skips, 3.5 and 3.6 to count
// the total it returns), so a range over the whole ready set costs
// O(ready instances), and the walk also steps over every key deleted
// since etcd last compacted. To keep claims flat, the store remembers per
// lane a "far key" some 16 contended windows deep into the ready range,
// and reads only up to it; only when that part of the queue has been
// drained does it read the whole range once (and find the next far key).
// It reads from the lane's low key (laneLow), not from its start.
func (s *Store) readReady(ctx context.Context, p *store.ClaimParams, window, need int, seqKey string) (cands []candidate, next time.Time, paused bool, seqKV *mvccpb.KeyValue, err error) {
	for attempt := range 4 {
		plan, rs, err := s.readPlanned(ctx, p, window, seqKey)
		if err != nil {
			return nil, time.Time{}, false, nil, err
		}
		if s.lanesAdded(plan, rs[readyMarksAt]) && attempt < 3 {
			// A new lane is read in another round; when lanes keep
			// appearing, this claim goes on with those read, and the
			// watch brings the claimer back for the rest.
			continue
		}
		if kvs := rs[readySeqAt].GetKvs(); seqKey != "" && len(kvs) > 0 {
			seqKV = kvs[0]
		}
		if len(rs[readyPausedAt].GetKvs()) > 0 {
			return nil, time.Time{}, true, seqKV, nil
		}
		if rs, err = s.refreshDrained(ctx, plan, rs); err != nil {
			return nil, time.Time{}, false, nil, err
		}
		cands = s.collectReady(p, plan, rs)
		s.noteLows(p, plan, rs)
		s.mu.Lock()
		s.short[plan.q] = len(cands) < need
		s.mu.Unlock()
		if len(cands) < need {
			if next, err = s.nextDue(ctx, plan, rs); err != nil {
				return nil, time.Time{}, false, nil, err
			}
		}
		return cands, next, false, seqKV, nil
	}
	return nil, time.Time{}, false, nil, errors.New("the queue's lanes keep changing; try again") // not reached: the last round returns
}

// planReady makes the read of queue p.Queue from the lane markers this
// handle knows: its markers, pause key and seqKey (the never written seq
// key when empty), then each lane's ranges.
// With low, a lane whose low key is valid (laneLow) is read from it, and
// the plan compares its marker's revision.
func (s *Store) planReady(p *store.ClaimParams, window int, seqKey string, low bool) *readyPlan {
	q := p.Queue
	s.mu.Lock()
	plan := &readyPlan{q: q, window: window, depth: 16 * max(window, p.Limit+s.window), marks: s.prios[q]}
	short, known := s.short[q]
	s.mu.Unlock()
	plan.ops = []clientv3.Op{
		clientv3.OpGet(s.k.prioMarkPrefix(q), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.k.paused(q), clientv3.WithKeysOnly()),
		clientv3.OpGet(cmp.Or(seqKey, s.k.seq())),
	}
	for _, mk := range plan.marks {
		kind, labels, lane := parseLaneMark(mk)
		if lane && !p.Claimable(kind, labels) {
			continue
		}
		pp := s.k.prioPrefix(q, mk)
		r := laneRead{mark: mk, pp: pp, start: pp, end: pp + tkeyAfter(p.Now), legacy: !lane}
		s.mu.Lock()
		far := s.far[q+"/"+mk]
		ll, hasLow := s.low[q+"/"+mk]
		s.mu.Unlock()
		if low && lane && hasLow && ll.valid() {
			r.start = ll.key
			plan.lowCmps = append(plan.lowCmps, clientv3.Compare(clientv3.ModRevision(s.k.prioMarkPrefix(q)+mk), "=", ll.markRev))
		}
		if far != "" && far+"\x00" < r.end {
			r.hinted = true
			r.at = len(plan.ops)
			plan.ops = append(plan.ops, clientv3.OpGet(r.start, clientv3.WithRange(far+"\x00"), clientv3.WithLimit(int64(window))))
		} else {
			plan.addFull(&r)
		}
		plan.reads = append(plan.reads, r)
	}
	// When this queue's last claim found fewer ready than it asked for (a
	// queue its workers keep drained), the next due time will be needed
	// again: it is read with the rest, not in a request of its own (on
	// etcd 3.4 every request copies the server's buffer of uncommitted
	// writes, so requests, not keys, are what a claim costs). Otherwise it
	// is read only when needed: that range holds every instance scheduled
	// for later, which etcd walks.
	if short || !known {
		for j := range plan.reads {
			plan.reads[j].nextAt = len(plan.ops)
			plan.ops = append(plan.ops, nextDueOp(plan.reads[j].pp, plan.reads[j].end))
		}
	}
	return plan
}

// readPlanned plans the read of queue p.Queue and reads it: from the
// lanes' low keys, in one transaction that compares their markers'
// revisions; when a marker moved (rare: a retry, a rescue, an enqueue
// due early, a lane made again), once more from the lanes' start.
func (s *Store) readPlanned(ctx context.Context, p *store.ClaimParams, window int, seqKey string) (*readyPlan, []*pb.RangeResponse, error) {
	plan := s.planReady(p, window, seqKey, true)
	if len(plan.lowCmps) > 0 && len(plan.ops) <= s.maxOps {
		resp, err := s.cli.Txn(ctx).If(plan.lowCmps...).Then(plan.ops...).Commit()
		if err != nil {
			return nil, nil, err
		}
		if resp.Succeeded {
			rs := make([]*pb.RangeResponse, len(resp.Responses))
			for i, r := range resp.Responses {
				rs[i] = r.GetResponseRange()
			}
			return plan, rs, nil
		}
	}
	if len(plan.lowCmps) > 0 {
		plan = s.planReady(p, window, seqKey, false)
	}
	rs, err := s.read(ctx, plan.ops)
	return plan, rs, err
}

// addFull adds the reads of r's whole ready range to the plan: the first
// window entries, and the keys of the first depth entries (the last of
// which becomes the lane's far key).
func (plan *readyPlan) addFull(r *laneRead) {
	r.hinted = false
	r.at = len(plan.ops)
	plan.ops = append(plan.ops,
		clientv3.OpGet(r.start, clientv3.WithRange(r.end), clientv3.WithLimit(int64(plan.window))),
		clientv3.OpGet(r.start, clientv3.WithRange(r.end), clientv3.WithLimit(int64(plan.depth)), clientv3.WithKeysOnly()))
}

// lanesAdded caches the lane markers read (res) as the queue's, and
// reports whether a lane the plan did not read was among them. Lanes only
// gone (emptied and dropped meanwhile) leave what was read valid.
func (s *Store) lanesAdded(plan *readyPlan, res *pb.RangeResponse) bool {
	mp := s.k.prioMarkPrefix(plan.q)
	var got []string
	for _, kv := range res.GetKvs() {
		got = append(got, string(kv.Key[len(mp):]))
	}
	if slices.Equal(got, plan.marks) {
		return false
	}
	s.mu.Lock()
	s.prios[plan.q] = got
	s.mu.Unlock()
	return slices.ContainsFunc(got, func(m string) bool { return !slices.Contains(plan.marks, m) })
}

// refreshDrained reads again, whole, the ranges of the lanes whose hinted
// read came back short (that part of the queue is drained), and returns
// rs with their results appended (the lanes' indexes moved to them).
func (s *Store) refreshDrained(ctx context.Context, plan *readyPlan, rs []*pb.RangeResponse) ([]*pb.RangeResponse, error) {
	var refresh []int
	for j, r := range plan.reads {
		if r.hinted && len(rs[r.at].GetKvs()) < plan.window {
			refresh = append(refresh, j)
		}
	}
	if len(refresh) == 0 {
		return rs, nil
	}
	again := &readyPlan{window: plan.window, depth: plan.depth}
	for _, j := range refresh {
		again.addFull(&plan.reads[j])
	}
	more, err := s.read(ctx, again.ops)
	if err != nil {
		return nil, err
	}
	for _, j := range refresh {
		r := &plan.reads[j]
		at := len(rs)
		rs = append(rs, more[r.at], more[r.at+1])
		r.at = at
	}
	return rs, nil
}

// collectReady returns the candidates the plan's reads found, in claim
// order, at most a window of them, and remembers each lane read whole's
// far key.
func (s *Store) collectReady(p *store.ClaimParams, plan *readyPlan, rs []*pb.RangeResponse) []candidate {
	var cands []candidate
	for _, r := range plan.reads {
		for _, kv := range rs[r.at].GetKvs() {
			if r.legacy && !legacyClaimable(p, kv) {
				continue
			}
			// Decoded only when picked.
			cands = append(cands, candidate{key: string(kv.Key), rev: kv.ModRevision, val: kv.Value})
		}
		if !r.hinted {
			// The far key is the depth-th ready key or, in a lane holding
			// fewer, its last one: keys added after it come after it in
			// claim order, so a read up to it that finds a window finds
			// the lane's first window. Without one (a lane of a couple of
			// windows), every claim reads the lane whole, which is then
			// no more than it would read; before, a lane shorter than the
			// depth had none, and every claim read all its keys.
			far := ""
			if kvs := rs[r.at+1].GetKvs(); len(kvs) == plan.depth || len(kvs) > 2*plan.window {
				far = string(kvs[len(kvs)-1].Key)
			}
			s.mu.Lock()
			s.far[plan.q+"/"+r.mark] = far
			s.mu.Unlock()
		}
	}
	if len(plan.reads) > 1 {
		s.mergeLanes(plan.q, cands)
	}
	if len(cands) > plan.window {
		cands = cands[:plan.window]
	}
	return cands
}

// laneLow is where a handle's claims start reading a lane's ready range
// (its low key), so they do not walk the keys claims deleted before it,
// which etcd's index keeps, and walks, until compaction (at 1,000 jobs a
// second and an hour's compaction, millions). No key may be added below it
// without moving the lane marker's revision: the low key is the first
// ready key a read found, or lowSlack before the claim's time if that is
// lower; every write that adds a ready key other than an enqueue puts the
// marker (appendMarks), and so does an enqueue of an instance due more
// than enqueueSlack before its own time. An enqueue whose call took longer
// than lowSlack-enqueueSlack between its time and its commit, or whose
// clock was as far behind the claimer's, could still land below: each
// handle reads every lane from its start at least every lowFullEvery, so
// such an instance waits no longer than that.
type laneLow struct {
	key     string
	markRev int64     // the lane marker's ModRevision when key was set
	fullAt  time.Time // when this handle last read the lane from its start
}

const (
	lowSlack     = 3 * time.Second
	enqueueSlack = time.Second
	lowFullEvery = time.Second
)

func (l laneLow) valid() bool { return l.markRev > 0 && time.Since(l.fullAt) < lowFullEvery }

// lowCut is the time under which an instance's ready key is "low": the
// earlier of t (the caller's clock, which tests move) and the machine's.
func lowCut(t time.Time, slack time.Duration) int64 {
	return min(tn(t), time.Now().UnixNano()) - int64(slack)
}

// noteLows remembers each lane's low key after a read (see laneLow).
func (s *Store) noteLows(p *store.ClaimParams, plan *readyPlan, rs []*pb.RangeResponse) {
	revs := map[string]int64{}
	mp := s.k.prioMarkPrefix(plan.q)
	for _, kv := range rs[readyMarksAt].GetKvs() {
		revs[string(kv.Key[len(mp):])] = kv.ModRevision
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.low) > 4096 {
		clear(s.low)
	}
	for _, r := range plan.reads {
		id := plan.q + "/" + r.mark
		if r.legacy || revs[r.mark] == 0 {
			delete(s.low, id)
			continue
		}
		key := r.pp + tkey(nt(lowCut(p.Now, lowSlack)))
		if kvs := rs[r.at].GetKvs(); len(kvs) > 0 {
			key = min(key, string(kvs[0].Key))
		}
		l := s.low[id]
		if r.start == r.pp || l.markRev != revs[r.mark] {
			l.fullAt = now
		}
		if r.start != r.pp && l.markRev != revs[r.mark] {
			// Read from a low key the marker moved past: not valid.
			delete(s.low, id)
			continue
		}
		s.low[id] = laneLow{key: key, markRev: revs[r.mark], fullAt: l.fullAt}
	}
}

// legacyClaimable reports whether the claimer may take kv, an entry of a
// priority range written before lanes: its kind and label requirements
// are in its value (a claimer with no labels may not take one that
// requires some). One that does not decode is kept, to be quarantined.
func legacyClaimable(p *store.ClaimParams, kv *mvccpb.KeyValue) bool {
	d, err := decodeDyn(string(kv.Key), kv.Value)
	return err != nil || p.Claimable(d.Kind, d.Labels)
}

// mergeLanes sorts the candidates of several lanes of queue q into claim
// order: priority (the 16 hex digits after the queue prefix), then RunAt
// and Seq (the last 32).
func (s *Store) mergeLanes(q string, cands []candidate) {
	qp := len(s.k.queuePrefix(q))
	slices.SortFunc(cands, func(a, b candidate) int {
		if c := strings.Compare(a.key[qp:qp+16], b.key[qp:qp+16]); c != 0 {
			return c
		}
		return strings.Compare(a.key[len(a.key)-32:], b.key[len(b.key)-32:])
	})
}

// nextDue returns the earliest run time of the plan's lanes' entries not
// yet ready (zero when there is none), reading the next-due keys the
// plan did not read with the rest, and drops the markers of lanes found
// empty.
func (s *Store) nextDue(ctx context.Context, plan *readyPlan, rs []*pb.RangeResponse) (time.Time, error) {
	nrs := make([]*pb.RangeResponse, len(plan.reads))
	var ops []clientv3.Op
	var unread []int
	for j, r := range plan.reads {
		if r.nextAt > 0 {
			nrs[j] = rs[r.nextAt]
			continue
		}
		unread = append(unread, j)
		ops = append(ops, nextDueOp(r.pp, r.end))
	}
	if len(ops) > 0 {
		more, err := s.read(ctx, ops)
		if err != nil {
			return time.Time{}, err
		}
		for k, j := range unread {
			nrs[j] = more[k]
		}
	}
	var next time.Time
	var empty []string
	for j, r := range plan.reads {
		if kvs := nrs[j].GetKvs(); len(kvs) > 0 {
			if v, ok := parseHex16(string(kvs[0].Key[len(r.pp) : len(r.pp)+16])); ok {
				if t := nt(int64(v ^ 1<<63)); next.IsZero() || t.Before(next) {
					next = t
				}
			}
		} else if !r.legacy && !r.hinted && len(rs[r.at].GetKvs()) == 0 {
			empty = append(empty, r.mark)
		}
	}
	return next, s.dropEmptyLanes(ctx, plan.q, empty)
}

// nextDueOp reads the first key of lane prefix pp from end (the ready
// range's end: the first instance due later).
func nextDueOp(pp, end string) clientv3.Op {
	return clientv3.OpGet(end, clientv3.WithRange(prefixEnd(pp)), clientv3.WithLimit(1), clientv3.WithKeysOnly())
}

// dropEmptyLanes deletes the markers of queue q's lanes that a claim found
// with no ready key and none due later, each in a transaction that checks
// the lane's whole key range is still empty: an enqueue into the lane puts
// the marker back in the transaction that adds its key, so either the
// enqueue comes after the delete (and restores the marker) or the delete
// fails. The check ranges the lane (etcd walks it), so each handle tries a
// lane at most once a second. The queue's known key keeps it listed by
// ListQueues.
func (s *Store) dropEmptyLanes(ctx context.Context, q string, marks []string) error {
	if len(marks) == 0 {
		return nil
	}
	now := time.Now()
	for _, mk := range marks {
		key := s.k.prioMarkPrefix(q) + mk
		s.mu.Lock()
		last, tried := s.emptied[key]
		if tried && now.Sub(last) < time.Second {
			s.mu.Unlock()
			continue
		}
		s.emptied[key] = now
		if len(s.emptied) > 4096 {
			clear(s.emptied)
		}
		s.mu.Unlock()
		pp := s.k.prioPrefix(q, mk)
		_, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(pp), "=", 0).WithRange(prefixEnd(pp))).
			Then(clientv3.OpDelete(key), clientv3.OpPut(s.k.known(q), "")).Commit()
		if err != nil {
			return err
		}
	}
	return nil
}

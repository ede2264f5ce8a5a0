package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// The node registry on etcd.
//
// etcd has no clock API, so the store judges what needs a clock two ways,
// both documented limits:
//
//   - Liveness: a handle declares a node dead when it has seen the node's
//     record (n/<id>) keep the same ModRevision for the dead threshold on
//     its own monotonic clock (from the watch event that brought that
//     revision, or from the read that first saw it). It never compares one node's clock with
//     another's, so skew plays no part; a handle needs to watch for the
//     threshold before it can declare anyone dead (a freshly started one
//     waits that long). The declaration is a transaction guarded on that
//     ModRevision, so one handle declares a node, once.
//   - The clock Heartbeat returns is the cluster's median clock: each
//     handle that heartbeats watches the records, and each put gives a
//     sample of that node's clock against this process's (the node's
//     reported time minus the time the event arrived, which errs by the
//     watch's delivery delay, a few milliseconds, the same for every
//     node). Over the live nodes it takes the median offset; with an even
//     number, of the two middle ones the node registered first. So a
//     lone node is never skewed, two nodes are judged against the one
//     that joined first, and from three up a node off by seconds is
//     outvoted whatever its age. While a handle has watched for less than
//     the dead threshold, StoreNow is zero (unknown), and the engine does
//     not claim until it knows.
//
// Running attempts are indexed by owner (no/<owner>/<id>, put with the
// claim and deleted with the running-set key). When a node is declared
// dead its record keeps DeadRev, a revision no later than the declaration,
// and rescuers take only the entries created at or before it (etcd's
// WithMaxCreateRev), so attempts a node claims should it come back are
// never taken for the dead ones; DeadRev is cleared once none is left.

// nodeRec is the value of n/<id>.
type nodeRec struct {
	Info    store.NodeInfo   `json:"i"`
	Status  store.NodeStatus `json:"s"`
	GoneAt  int64            `json:"g,omitempty"`
	DeadRev int64            `json:"dr,omitempty"`
}

// nodeView is what a handle has seen of the registry.
type nodeView struct {
	mu       sync.Mutex
	watching bool
	since    time.Time              // when the watch started (monotonic)
	samples  map[string]*clockRing  // node ID -> recent clock offsets
	seen     map[string]observation // node ID -> its record's revision, first seen when
	beats    map[string]time.Time   // node ID -> when its last successful heartbeat through this handle was sent (monotonic)
	self     map[string]selfRec     // node ID -> its record as its last heartbeat through this handle left it
	expired  time.Time              // when this handle last expired gone nodes' records
}

// selfRec is what a handle knows of the record of a node heartbeating
// through it.
type selfRec struct {
	rev     int64 // the record's ModRevision (0: absent)
	deadRev int64
	dead    bool // declared dead since the last heartbeat
}

func selfFrom(kvs []*mvccpb.KeyValue) selfRec {
	if len(kvs) == 0 {
		return selfRec{}
	}
	var r nodeRec
	if json.Unmarshal(kvs[0].Value, &r) != nil {
		return selfRec{rev: kvs[0].ModRevision}
	}
	return selfRec{rev: kvs[0].ModRevision, deadRev: r.DeadRev, dead: r.Status == store.NodeDead}
}

// expireNodes deletes the records of nodes gone, or silent, for longer
// than the retention, by the heartbeating node's clock; a dead node whose
// attempts are still to rescue is kept.
func (s *Store) expireNodes(ctx context.Context, p *store.HeartbeatParams) error {
	recs, revs, _, err := s.readNodes(ctx, clientv3.WithSerializable())
	if err != nil {
		return err
	}
	retain := p.RetainOrDefault()
	var gs []*group
	for id, r := range recs {
		if id == p.Node.ID || r.DeadRev != 0 {
			continue
		}
		last := r.Info.LastSeen
		if r.Status != store.NodeLive && r.GoneAt != 0 {
			last = time.Unix(0, r.GoneAt)
		}
		if p.Now.Sub(last) > retain {
			g := &group{guards: []guard{{s.k.node(id), revs[id]}}}
			g.del(s.k.node(id))
			gs = append(gs, g)
		}
	}
	return s.commit(ctx, gs)
}

// observation is a record revision and when this handle first saw it.
type observation struct {
	rev   int64
	first time.Time // monotonic
}

// clockRing keeps a node's recent clock offsets against this process.
type clockRing struct {
	offs      [8]time.Duration
	n, next   int
	last      time.Time // monotonic time of the last event
	createRev int64
	live      bool
}

// offset is the node's offset estimate: the largest recent sample, the one
// that waited least for delivery.
func (r *clockRing) offset() time.Duration {
	best := r.offs[0]
	for i := 1; i < r.n; i++ {
		best = max(best, r.offs[i])
	}
	return best
}

// observe records the revisions of the records in kvs (first seen now,
// when new), and returns for each node ID how long this handle has seen
// its current revision, up to ref.
func (v *nodeView) observe(kvs map[string]int64, now, ref time.Time) map[string]time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil {
		v.seen = map[string]observation{}
	}
	out := make(map[string]time.Duration, len(kvs))
	for id, rev := range kvs {
		o, ok := v.seen[id]
		if !ok || o.rev < rev {
			o = observation{rev: rev, first: now}
			v.seen[id] = o
		}
		out[id] = max(0, ref.Sub(o.first))
	}
	for id := range v.seen {
		if _, ok := kvs[id]; !ok {
			delete(v.seen, id)
		}
	}
	return out
}

// readNodes reads every node record: decoded records, their revisions, and
// the read's revision.
func (s *Store) readNodes(ctx context.Context, opts ...clientv3.OpOption) (map[string]*nodeRec, map[string]int64, int64, error) {
	resp, err := s.cli.Get(ctx, s.k.nodePrefix(), append([]clientv3.OpOption{clientv3.WithPrefix()}, opts...)...)
	if err != nil {
		return nil, nil, 0, err
	}
	recs := map[string]*nodeRec{}
	revs := map[string]int64{}
	for _, kv := range resp.Kvs {
		id := unesc(string(kv.Key[len(s.k.nodePrefix()):]))
		var r nodeRec
		if json.Unmarshal(kv.Value, &r) != nil {
			continue // a damaged record: it expires like any other
		}
		recs[id], revs[id] = &r, kv.ModRevision
	}
	return recs, revs, resp.Header.Revision, nil
}

// Heartbeat implements store.Nodes.
func (s *Store) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("heartbeat", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("heartbeat", context.Background(), err)
	}
	defer cancel()
	s.watchNodes(p.DeadAfter)
	sent := time.Now()
	res := &store.HeartbeatResult{}
	key := s.k.node(p.Node.ID)
	info := p.Node.Clone()
	info.LastSeen = p.Now
	info.StoreSeen, info.Status, info.GoneAt = time.Time{}, 0, time.Time{}
	rec := nodeRec{Info: *info, Status: store.NodeLive}
	if p.Leaving {
		rec.Status, rec.GoneAt = store.NodeLeft, p.Now.UnixNano()
	}
	// One round trip in the common case: a put guarded on the revision
	// of this node's last heartbeat through this handle, whose failure
	// branch reads the record back (declared dead, or written elsewhere).
	s.nodes.mu.Lock()
	if s.nodes.self == nil {
		s.nodes.self = map[string]selfRec{}
	}
	me, known := s.nodes.self[p.Node.ID]
	s.nodes.mu.Unlock()
	if !known {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return nil, s.wrap("heartbeat", ctx, err)
		}
		me = selfFrom(resp.Kvs)
	}
	for round := 0; ; round++ {
		if round > maxRounds {
			return nil, s.wrap("heartbeat", ctx, errors.New("gave up after repeated conflicts"))
		}
		rec.DeadRev = me.deadRev // the dead incarnation's attempts are still to rescue
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", me.rev)).
			Then(clientv3.OpPut(key, mustJSON(&rec))).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return nil, s.wrap("heartbeat", ctx, err)
		}
		if tr.Succeeded {
			res.WasDead = me.dead
			me = selfRec{rev: tr.Header.Revision, deadRev: rec.DeadRev}
			break
		}
		me = selfFrom(tr.Responses[0].GetResponseRange().GetKvs())
	}
	s.nodes.mu.Lock()
	s.nodes.self[p.Node.ID] = me
	expire := time.Since(s.nodes.expired) > min(10*time.Second, p.RetainOrDefault())
	if expire {
		s.nodes.expired = time.Now()
	}
	s.nodes.mu.Unlock()
	if expire {
		if err := s.expireNodes(ctx, p); err != nil {
			return nil, s.wrap("heartbeat", ctx, err)
		}
	}
	s.nodes.mu.Lock()
	if s.nodes.beats == nil {
		s.nodes.beats = map[string]time.Time{}
	}
	if p.Leaving {
		delete(s.nodes.beats, p.Node.ID)
	} else {
		s.nodes.beats[p.Node.ID] = sent
	}
	s.nodes.mu.Unlock()
	res.StoreNow = s.nodes.medianNow(p.Node.ID, p.Now, p.DeadAfter)
	return res, nil
}

// medianNow is the cluster's median clock as node self sees it at its
// clock reading now, or zero while it is not known (see the package notes
// in nodes.go).
func (v *nodeView) medianNow(self string, now time.Time, deadAfter time.Duration) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	mono := time.Now()
	if !v.watching || mono.Sub(v.since) < deadAfter {
		return time.Time{}
	}
	me := v.samples[self]
	if me == nil || me.n == 0 {
		return time.Time{}
	}
	type point struct {
		off time.Duration
		rev int64
	}
	var ps []point
	for _, r := range v.samples {
		if r.n > 0 && r.live && mono.Sub(r.last) <= 2*deadAfter {
			ps = append(ps, point{r.offset(), r.createRev})
		}
	}
	if len(ps) == 0 {
		return time.Time{}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].off < ps[j].off })
	mid := ps[(len(ps)-1)/2]
	if len(ps)%2 == 0 {
		if hi := ps[len(ps)/2]; hi.rev < mid.rev {
			mid = hi // of the two middle nodes, the one registered first
		}
	}
	return now.Add(mid.off - me.offset())
}

// watchNodes starts this handle's watch of the registry, once.
func (s *Store) watchNodes(deadAfter time.Duration) {
	v := &s.nodes
	v.mu.Lock()
	if v.watching {
		v.mu.Unlock()
		return
	}
	if !s.goBackground() {
		v.mu.Unlock()
		return
	}
	v.watching, v.since = true, time.Now()
	if v.samples == nil {
		v.samples = map[string]*clockRing{}
	}
	v.mu.Unlock()
	go func() {
		defer s.wg.Done()
		wctx := clientv3.WithRequireLeader(s.ctx)
		for {
			wch := s.cli.Watch(wctx, s.k.nodePrefix(), clientv3.WithPrefix())
			for resp := range wch {
				for _, ev := range resp.Events {
					s.nodes.sample(string(ev.Kv.Key[len(s.k.nodePrefix()):]), ev, time.Now())
				}
			}
			if s.ctx.Err() != nil || s.cli.Ctx().Err() != nil {
				return
			}
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// sample records one registry event seen at arrival.
func (v *nodeView) sample(key string, ev *clientv3.Event, arrival time.Time) {
	id := unesc(key)
	v.mu.Lock()
	defer v.mu.Unlock()
	if ev.Type == clientv3.EventTypeDelete {
		delete(v.samples, id)
		return
	}
	var r nodeRec
	if json.Unmarshal(ev.Kv.Value, &r) != nil {
		return
	}
	// The event dates this revision of the record more closely than a
	// later read would (see observe).
	if o, ok := v.seen[id]; !ok || o.rev < ev.Kv.ModRevision {
		if v.seen == nil {
			v.seen = map[string]observation{}
		}
		v.seen[id] = observation{rev: ev.Kv.ModRevision, first: arrival}
	}
	ring := v.samples[id]
	if ring == nil || ring.createRev != ev.Kv.CreateRevision {
		ring = &clockRing{createRev: ev.Kv.CreateRevision}
		v.samples[id] = ring
	}
	ring.live = r.Status == store.NodeLive
	ring.last = arrival
	if !ring.live {
		return
	}
	ring.offs[ring.next] = r.Info.LastSeen.Sub(arrival)
	ring.next = (ring.next + 1) % len(ring.offs)
	ring.n = min(ring.n+1, len(ring.offs))
}

// ListNodes implements store.Nodes. A live node is listed stale when this
// handle has seen its record unchanged for DeadAfter or, when it has not
// watched it that long, when the record's last heartbeat is older than
// DeadAfter on p.Now (the caller's clock).
func (s *Store) ListNodes(ctx context.Context, p *store.ListNodesParams) ([]*store.NodeInfo, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("list nodes", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("list nodes", context.Background(), err)
	}
	defer cancel()
	recs, revs, _, err := s.readNodes(ctx)
	if err != nil {
		return nil, s.wrap("list nodes", ctx, err)
	}
	mono := time.Now()
	ages := s.nodes.observe(revs, mono, mono)
	s.nodes.mu.Lock()
	since := s.nodes.since
	s.nodes.mu.Unlock()
	out := make([]*store.NodeInfo, 0, len(recs))
	for id, r := range recs {
		n := r.Info.Clone()
		n.ID = id
		n.Status = r.Status
		n.StoreSeen = n.LastSeen
		if r.GoneAt != 0 {
			n.GoneAt = time.Unix(0, r.GoneAt).UTC()
		}
		if r.Status == store.NodeLive {
			watched := ages[id] > 0 || (!since.IsZero() && mono.Sub(since) >= p.DeadAfter)
			if ages[id] >= p.DeadAfter || (!watched && p.Now.Sub(n.LastSeen) > p.DeadAfter) {
				n.Status = store.NodeStale
			}
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// RescueNodes implements store.Nodes.
func (s *Store) RescueNodes(ctx context.Context, p *store.RescueNodesParams) (*store.RescueNodesResult, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("rescue nodes", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("rescue nodes", context.Background(), err)
	}
	defer cancel()
	res, err := s.rescueNodes(ctx, p)
	return res, s.wrap("rescue nodes", ctx, err)
}

func (s *Store) rescueNodes(ctx context.Context, p *store.RescueNodesParams) (*store.RescueNodesResult, error) {
	res := &store.RescueNodesResult{}
	recs, revs, readRev, err := s.readNodes(ctx, clientv3.WithSerializable())
	if err != nil {
		return nil, err
	}
	// Silence is measured up to the rescuer's own last heartbeat through
	// this handle too, so a stall of etcd, which delays every heartbeat,
	// does not make the living look dead (see store.Nodes.RescueNodes).
	now := time.Now()
	ref := now
	s.nodes.mu.Lock()
	if b, ok := s.nodes.beats[p.Node]; ok && b.Before(ref) {
		ref = b
	}
	s.nodes.mu.Unlock()
	ages := s.nodes.observe(revs, now, ref)
	for id, r := range recs {
		if id == p.Node || r.Status != store.NodeLive || ages[id] < p.DeadAfter {
			continue
		}
		d := *r
		d.Status, d.GoneAt = store.NodeDead, p.Now.UnixNano()
		if d.DeadRev == 0 {
			d.DeadRev = readRev
		}
		key := s.k.node(id)
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", revs[id])).
			Then(clientv3.OpPut(key, mustJSON(&d))).Commit()
		if err != nil {
			return nil, err
		}
		if tr.Succeeded {
			res.Dead = append(res.Dead, id)
			recs[id], revs[id] = &d, tr.Header.Revision
		}
	}
	sort.Strings(res.Dead)
	for id, r := range recs {
		if r.DeadRev == 0 || len(res.Rescued) >= p.Limit {
			continue
		}
		n, err := s.rescueOwned(ctx, p, id, r.DeadRev, res)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			// Nothing of the dead incarnation is left: stop looking.
			c := *r
			c.DeadRev = 0
			key := s.k.node(id)
			if _, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", revs[id])).
				Then(clientv3.OpPut(key, mustJSON(&c))).Commit(); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

// rescueOwned rescues, into res, up to p.Limit - len(res.Rescued) running
// attempts of owner claimed at or before revision upTo (read from its
// claim records). It returns how many claim records it found (0: none
// left).
func (s *Store) rescueOwned(ctx context.Context, p *store.RescueNodesParams, owner string, upTo int64, res *store.RescueNodesResult) (int, error) {
	need := p.Limit - len(res.Rescued)
	prefix := s.k.claimRecOwner(owner)
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(upTo), clientv3.WithLimit(int64(need+s.window)))
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	recs := make([]claimRecAt, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r := claimRecAt{key: string(kv.Key), owner: owner, rev: kv.ModRevision}
		if decode(r.key, kv.Value, &r.rec) != nil || len(r.rec.IDs) != len(r.rec.Attempts) {
			r.rec = claimRec{} // unreadable: dropped
		}
		recs = append(recs, r)
	}
	why := fmt.Sprintf("node %s stopped heartbeating: declared dead and its attempt rescued", owner)
	got, _, err := s.rescueRecords(ctx, recs, need, p.Now, p.Node, func(*dynRec) string { return why })
	if err != nil {
		return 0, err
	}
	res.Rescued = append(res.Rescued, got...)
	return len(resp.Kvs), nil
}

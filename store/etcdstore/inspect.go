package etcdstore

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// Counters (store.Inspector). One counter key per (queue, kind, state)
// would make every transition of a queue compare and rewrite the same key,
// serialising every claim and finish of the cluster on it. Instead each
// transaction that changes states puts one small delta key of its own, the
// sum of its groups' count moves (countMove, countsOp), which conflicts
// with nothing:
//
//	P cn/<time><nonce><n>  a delta: one transaction's count moves
//	P cn0                  the folded counts: every delta folded so far
//
// Counts reads cn0 and the deltas at one revision (exact as of it), then
// folds what it read into cn0 and deletes those deltas in one transaction
// guarded by cn0's revision and by no delta key in the folded range having
// changed since (a range compare), so a fold never loses a delta. Prune,
// which the engine runs periodically, folds too, so deltas do not pile up
// when nobody asks for counts, and each handle folds in the background
// after every foldEvery deltas it wrote, so a Counts reads few.

// deltaSeq numbers this process's delta keys (with the handle's nonce and
// the time, they are unique).
var deltaSeq atomic.Uint64

func (k keys) countBase() string        { return k.p + "cn0" }
func (k keys) countDeltaPrefix() string { return k.p + "cn/" }
func (k keys) countDelta(t time.Time, nonce string) string {
	return k.countDeltaPrefix() + tkey(t) + nonce + hex16(deltaSeq.Add(1))
}

// deltaRec is one count move of a delta key's value (a JSON array of
// them): N instances of (Queue, Kind) left state From (0: new) for state
// To (0: removed).
type deltaRec struct {
	From  store.State `json:"f,omitempty"`
	To    store.State `json:"t,omitempty"`
	Queue string      `json:"q"`
	Kind  string      `json:"k"`
	N     int64       `json:"n"`
}

// countMoveRec is one count move a group makes, at time t.
type countMoveRec struct {
	deltaRec
	t time.Time
}

// countsRec is the value of cn0: the folded counts.
type countsRec struct {
	Groups []groupRec `json:"g"`
}

type groupRec struct {
	Queue  string  `json:"q"`
	Kind   string  `json:"k"`
	States []int64 `json:"s"`
}

// countMove is the one place a transition counts itself: it adds to g the
// delta of d's instance leaving state from (0: new) for state to (0:
// removed). addHist calls it for every state change and prune for every
// removal; a new transition that goes through either is counted.
func (s *Store) countMove(g *group, d *dynRec, from, to store.State, t time.Time) {
	if from == to {
		return
	}
	g.counts = append(g.counts, countMoveRec{deltaRec{From: from, To: to, Queue: d.Queue, Kind: d.Kind, N: 1}, t})
}

// countsOp returns the one delta key put of a transaction that applies gs
// (the sum of their count moves), or false when they move nothing. A
// transaction applies all of its groups or none, so its delta counts
// exactly what it changed.
func (s *Store) countsOp(gs []*group) (clientv3.Op, bool) {
	sum := map[deltaRec]int64{}
	var order []deltaRec
	var t time.Time
	for _, g := range gs {
		for _, c := range g.counts {
			k := c.deltaRec
			k.N = 0
			if _, ok := sum[k]; !ok {
				order = append(order, k)
			}
			sum[k] += c.N
			if c.t.After(t) {
				t = c.t
			}
		}
	}
	if len(order) == 0 {
		return clientv3.Op{}, false
	}
	recs := make([]deltaRec, len(order))
	for i, k := range order {
		k.N = sum[k]
		recs[i] = k
	}
	if after := s.fold.written.Add(int64(len(gs))); after/foldEvery != (after-int64(len(gs)))/foldEvery {
		go s.foldSoon() // not here: the caller may hold s.mu
	}
	return clientv3.OpPut(s.k.countDelta(t, s.nonce), mustJSON(recs)), true
}

// foldEvery is how many transitions a handle makes between two background
// folds, so the deltas a Counts reads stay few (a fold is one read and one
// transaction: a few ms per foldEvery transitions).
const foldEvery = 512

// folder is a handle's background folding of count deltas: one goroutine,
// started on the first fold, ended by Close.
type folder struct {
	written atomic.Int64
	ch      chan struct{} // guarded by Store.mu
}

// foldSoon asks the handle's folding goroutine for a fold, starting it.
func (s *Store) foldSoon() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if s.fold.ch == nil {
		s.fold.ch = make(chan struct{}, 1)
		s.wg.Add(1)
		go s.folding(s.fold.ch)
	}
	ch := s.fold.ch
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default: // one pending request is enough
	}
}

func (s *Store) folding(ch chan struct{}) {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-ch:
		}
		ctx, cancel := context.WithTimeout(s.ctx, max(s.opTimeout, 15*time.Second))
		_, _ = s.readCounts(ctx, -1) // best effort: a failed fold waits for the next
		cancel()
	}
}

// foldPage is how many delta keys one read (and one fold) takes.
const foldPage = 5000

// counter sums the folded base and deltas by (queue, kind).
type counter map[[2]string]*store.GroupCount

func (c counter) group(q, k string) *store.GroupCount {
	g := c[[2]string{q, k}]
	if g == nil {
		g = &store.GroupCount{Queue: q, Kind: k}
		c[[2]string{q, k}] = g
	}
	return g
}

// add adds the delta keys kvs to c.
func (c counter) add(kvs []*mvccpb.KeyValue) error {
	for _, kv := range kvs {
		var ds []deltaRec
		if err := decode(string(kv.Key), kv.Value, &ds); err != nil {
			return err
		}
		for _, d := range ds {
			g := c.group(d.Queue, d.Kind)
			if d.From.Valid() {
				g.States[d.From] -= d.N
			}
			if d.To.Valid() {
				g.States[d.To] += d.N
			}
		}
	}
	return nil
}

// record returns c as the value of cn0.
func (c counter) record() string {
	var r countsRec
	for _, g := range c {
		r.Groups = append(r.Groups, groupRec{Queue: g.Queue, Kind: g.Kind, States: g.States[:]})
	}
	return mustJSON(&r)
}

func (c counter) clone() counter {
	out := make(counter, len(c))
	for k, g := range c {
		cp := *g
		out[k] = &cp
	}
	return out
}

// readCounts returns the counts as of one revision: cn0 plus every delta,
// read in pages at that revision. Then it folds the deltas it read into
// cn0, page by page, each fold one transaction guarded by cn0's revision and
// by no key of the folded range having changed since the read; it stops at
// the first fold that loses a race (another Counts, or a delta written
// into the range meanwhile), leaving the rest for a later call. Folding
// never changes the counts, only where they are kept.
//
// maxFold bounds the pages one call folds (negative: no bound), so a
// Counts call stays short; the background fold and Prune fold them all.
func (s *Store) readCounts(ctx context.Context, maxFold int) (counter, error) {
	return atOneRevision(s, ctx, func() (counter, error) { return s.readCountsAt(ctx, maxFold) })
}

func (s *Store) readCountsAt(ctx context.Context, maxFold int) (counter, error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.k.countBase()),
		clientv3.OpGet(s.k.countDeltaPrefix(), clientv3.WithPrefix(), clientv3.WithLimit(foldPage)),
	).Commit()
	if err != nil {
		return nil, err
	}
	rev := resp.Header.Revision
	baseKV := resp.Responses[0].GetResponseRange().Kvs
	first := resp.Responses[1].GetResponseRange()
	base := counter{}
	var baseRev int64
	if len(baseKV) > 0 {
		baseRev = baseKV[0].ModRevision
		var b countsRec
		if err := decode(string(baseKV[0].Key), baseKV[0].Value, &b); err != nil {
			return nil, err
		}
		for _, gr := range b.Groups {
			g := base.group(gr.Queue, gr.Kind)
			for st, n := range gr.States {
				if st < len(g.States) {
					g.States[st] += n
				}
			}
		}
	}
	pages := [][]*mvccpb.KeyValue{first.Kvs}
	more := first.More
	for more {
		last := pages[len(pages)-1]
		from := string(last[len(last)-1].Key) + "\x00"
		r, err := s.cli.Get(ctx, from, clientv3.WithRange(prefixEnd(s.k.countDeltaPrefix())), clientv3.WithLimit(foldPage), clientv3.WithRev(rev))
		if err != nil {
			return nil, err
		}
		if len(r.Kvs) == 0 {
			break
		}
		pages = append(pages, r.Kvs)
		more = r.More
	}
	total := base.clone()
	for _, p := range pages {
		if err := total.add(p); err != nil {
			return nil, err
		}
	}
	// Fold page by page: cn0 becomes base plus the pages folded so far.
	folded := base
	for i, p := range pages {
		if len(p) == 0 || maxFold >= 0 && i >= maxFold {
			break
		}
		if err := folded.add(p); err != nil {
			return nil, err
		}
		end := string(p[len(p)-1].Key) + "\x00"
		fr, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(s.k.countBase()), "=", baseRev),
			clientv3.Compare(clientv3.ModRevision(s.k.countDeltaPrefix()), "<", rev+1).WithRange(end),
		).Then(
			clientv3.OpPut(s.k.countBase(), folded.record()),
			clientv3.OpDelete(s.k.countDeltaPrefix(), clientv3.WithRange(end)),
		).Commit()
		if err != nil {
			return nil, err
		}
		if !fr.Succeeded {
			break
		}
		baseRev = fr.Header.Revision
	}
	return total, nil
}

// Counts implements store.Inspector from the folded counts and the
// deltas not yet folded.
func (s *Store) Counts(ctx context.Context, p *store.CountsParams) ([]store.GroupCount, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("counts", context.Background(), err)
	}
	defer cancel()
	all, err := s.readCounts(ctx, 2)
	if err != nil {
		return nil, s.wrap("counts", ctx, err)
	}
	var out []store.GroupCount
	for _, g := range all {
		if (p.Queue == "" || g.Queue == p.Queue) && (p.Kind == "" || g.Kind == p.Kind) {
			out = append(out, *g)
		}
	}
	slices.SortFunc(out, func(a, b store.GroupCount) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Kind, b.Kind))
	})
	return out, nil
}

// lagScan is how many ready-index keys Lag reads per priority of a queue.
const lagScan = 1000

// Lag implements store.Inspector from the ready index: per queue and
// priority the first lagScan keys in RunAt order. A queue's lag is exact
// (the first key of each priority is its oldest); a kind whose oldest
// ready instance is deeper than lagScan in every priority of its queue is
// reported with nothing ready there.
func (s *Store) Lag(ctx context.Context, p *store.LagParams) (*store.LagResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	groups, err := s.Counts(ctx, &store.CountsParams{Queue: p.Queue}) // every kind: a queue's walk needs them all
	if err != nil {
		return nil, err
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("lag", context.Background(), err)
	}
	defer cancel()
	oldest := map[[2]string]time.Time{}
	kinds := map[string]int{} // per queue
	for _, g := range groups {
		kinds[g.Queue]++
	}
	done := map[string]bool{}
	now := tn(p.Now)
	for _, g := range groups {
		if done[g.Queue] {
			continue
		}
		done[g.Queue] = true
		// With one kind in the queue, the first ready key of each
		// priority is all Lag needs (a few more for one being removed).
		scan := int64(lagScan)
		if kinds[g.Queue] == 1 {
			scan = 8
		}
		marks, err := s.cli.Get(ctx, s.k.prioMarkPrefix(g.Queue), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return nil, s.wrap("lag", ctx, err)
		}
		for _, mk := range marks.Kvs {
			prio := string(mk.Key[len(s.k.prioMarkPrefix(g.Queue)):])
			pp := s.k.prioPrefix(g.Queue, prio)
			end := pp + tkeyAfter(p.Now)
			r, err := s.cli.Get(ctx, pp, clientv3.WithRange(end), clientv3.WithLimit(scan))
			if err != nil {
				return nil, s.wrap("lag", ctx, err)
			}
			for _, kv := range r.Kvs {
				d, err := decodeDyn(string(kv.Key), kv.Value)
				if err != nil || d.State != store.Scheduled || d.RunAt > now {
					continue
				}
				k := [2]string{d.Queue, d.Kind}
				if cur, ok := oldest[k]; !ok || nt(d.RunAt).Before(cur) {
					oldest[k] = nt(d.RunAt)
				}
				if kinds[g.Queue] == 1 {
					break // the first is the oldest of this priority
				}
			}
		}
	}
	var b store.LagBuilder
	for _, g := range groups {
		if p.Kind != "" && g.Kind != p.Kind {
			continue
		}
		b.Add(g.Queue, g.Kind, oldest[[2]string{g.Queue, g.Kind}])
	}
	return b.Result(p.Now), nil
}

// PageInstances implements store.Inspector.
func (s *Store) PageInstances(ctx context.Context, q *store.Query) (*store.InstancePage, error) {
	return store.PageInstances(ctx, s.k.p, s.LookupInstances, q)
}

// PageHistory implements store.Inspector.
func (s *Store) PageHistory(ctx context.Context, q *store.Query) (*store.HistoryPage, error) {
	return store.PageHistory(ctx, s.k.p, s.LookupHistory, q)
}

// PageLogs implements store.Inspector.
func (s *Store) PageLogs(ctx context.Context, q *store.Query) (*store.LogPage, error) {
	return store.PageLogs(ctx, s.k.p, s.LookupLogs, q)
}

package memdbstore

import (
	"container/heap"

	"github.com/jobkit/job/store"
)

// EnforcesKeyedLimits implements store.KeyedLimitEnforcer: Claim
// enforces per-key concurrency limits.
func (s *Store) EnforcesKeyedLimits() bool { return true }

func (r *rec) limitKey() string {
	if r.x == nil {
		return ""
	}
	return r.x.limitKey
}

// keyMove keeps t.keyRun as an instance moves from old to r (either nil):
// a Processing instance with a limit key counts in its key and group.
// An instance without a key is counted by t.counts alone (keyedUsed
// takes the keyed ones out). A key's entry goes when its count reaches
// zero, so keys that went idle leave nothing behind.
func (t *tables) keyMove(old, r *rec) {
	if t.keyRun == nil {
		return
	}
	if old != nil && old.state == store.Processing {
		if k := old.limitKey(); k != "" {
			g := group{old.qid, old.kind}
			t.keyDec(k, g)
			t.keyDec("", g)
		}
	}
	if r != nil && r.state == store.Processing {
		if k := r.limitKey(); k != "" {
			g := group{r.qid, r.kind}
			m := t.keyRun[k]
			if m == nil {
				m = map[group]int32{}
				t.keyRun[k] = m
			}
			m[g]++
			// keyRun[""] counts, per group, the Processing instances
			// that have a key: what t.counts holds beyond the empty key.
			all := t.keyRun[""]
			if all == nil {
				all = map[group]int32{}
				t.keyRun[""] = all
			}
			all[g]++
		}
	}
}

// keyDec uncounts one instance of group g in t.keyRun[k].
func (t *tables) keyDec(k string, g group) {
	m := t.keyRun[k]
	if m == nil {
		return
	}
	if m[g]--; m[g] <= 0 {
		delete(m, g)
		if len(m) == 0 {
			delete(t.keyRun, k)
		}
	}
}

// keyedUsed returns how many Processing instances limit l matches with
// limit key k.
func (t *tables) keyedUsed(l store.ConcurrencyLimit, k string, names []string) int {
	n := 0
	if k != "" {
		for g, c := range t.keyRun[k] {
			if l.Matches(names[g.kind], names[g.queue]) {
				n += int(c)
			}
		}
		return n
	}
	keyed := t.keyRun[""]
	for g, c := range t.counts {
		if p := c[store.Processing]; p > 0 && l.Matches(names[g.kind], names[g.queue]) {
			n += int(p) - int(keyed[g])
		}
	}
	return n
}

// keyIx names one per-key limit of a gate and one key.
type keyIx struct {
	limit int
	key   string
}

// pickKeyed is pickWithin for a claim with per-key limits: it goes
// through the ready instances of the lanes the claimer may take in claim
// order (priority, then RunAt and Seq across lanes), takes each that
// every limit leaves room for, and skips one whose key is at a per-key
// limit (it keeps its place), so one busy key never holds back the
// others. A lane whose kind is at a limit of its own (or of a rate) is
// left out whole, as pickWithin does. It visits the skipped instances,
// so its cost grows with the waiting instances of busy keys ahead of
// what it takes. s.mu is held.
func (s *Store) pickKeyed(g *limitGate, qid name, now int64, p *store.ClaimParams, filter func(name) bool, take func(*rec)) (n int, next int64) {
	q := s.t.lanes[qid]
	if q == nil {
		return 0, 0
	}
	used := map[keyIx]int{}
	var perKey []int // the gate's per-key limits
	for i, l := range g.ls {
		if l.PerKey {
			perKey = append(perKey, i)
		}
	}
	// keyRoom reports whether key k of an instance of kind has room in
	// every per-key limit that matches it.
	keyRoom := func(kind, k string) bool {
		for _, i := range perKey {
			l := g.ls[i]
			if l.Kind != "" && l.Kind != kind {
				continue
			}
			ix := keyIx{i, k}
			u, ok := used[ix]
			if !ok {
				u = s.t.keyedUsed(l, k, g.names)
				used[ix] = u
			}
			if u >= l.Max {
				return false
			}
		}
		return true
	}
	took := func(kind, k string) {
		for _, i := range perKey {
			if l := g.ls[i]; l.Kind == "" || l.Kind == kind {
				used[keyIx{i, k}]++
			}
		}
	}
	waits := func(r *rec) {
		if next == 0 || r.runAt < next {
			next = r.runAt
		}
	}
	// The instances to take, chosen first and taken after (taking
	// changes the index the ascents read); the counts move as each is
	// chosen.
	var picked []*rec
	var h headHeap
	for _, prio := range q.prios {
		h = h[:0]
		for lane := range q.byPrio[prio] {
			if !filter(lane) || g.room(lane) <= 0 {
				continue
			}
			probe := &rec{qid: qid, priority: prio, lane: lane, runAt: minNanos}
			s.t.ready.AscendGreaterOrEqual(probe, func(r *rec) bool {
				if r.qid == qid && r.priority == prio && r.lane == lane {
					if r.runAt > now {
						waits(r)
					} else {
						h = append(h, laneHead{r})
					}
				}
				return false
			})
		}
		heap.Init(&h)
		for h.Len() > 0 {
			// Go along the lane of the first head while it comes before
			// the other lanes' heads; the first that does not is its
			// lane's next head.
			r := heap.Pop(&h).(laneHead).r
			probe := &rec{qid: r.qid, priority: r.priority, lane: r.lane, runAt: r.runAt, seq: r.seq}
			full := false
			s.t.ready.AscendGreaterOrEqual(probe, func(x *rec) bool {
				switch {
				case x.qid != r.qid || x.priority != r.priority || x.lane != r.lane:
					return false // the lane ends
				case x.runAt > now:
					waits(x)
					return false
				case h.Len() > 0 && !before(x, h[0].r):
					heap.Push(&h, laneHead{x})
					return false
				case g.room(x.lane) <= 0:
					return false // its kind is at a limit: the lane sits out
				}
				kind, k := g.names[x.kind], x.limitKey()
				if !keyRoom(kind, k) {
					g.capped = true // skipped, in its place
					return true
				}
				took(kind, k)
				g.took(x.kind)
				picked = append(picked, x)
				full = len(picked) == p.Limit
				return !full
			})
			if full {
				break
			}
		}
		if len(picked) == p.Limit {
			break
		}
	}
	for _, r := range picked {
		take(r)
	}
	return len(picked), next
}

package memdbstore

import (
	"math"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// EnforcesConcurrencyLimits implements store.LimitEnforcer: Claim
// enforces ClaimParams.Limits.
func (s *Store) EnforcesConcurrencyLimits() bool { return true }

// limitGate applies a claim's concurrency limits. A limit counts the
// Processing instances it matches from the counts by (queue, kind) that
// every transition keeps (countMove), so a slot is released by whatever
// moves an attempt out of Processing, with nothing of its own to undo.
// Limits bound lanes (a lane is of one kind): a claim takes, per round,
// no more than the smallest room left among the lanes it may take, and
// leaves out the lanes with no room, so no limit is passed inside a round
// and a full lane never holds back the others.
type limitGate struct {
	ls    []store.ConcurrencyLimit // those that may match the claim's queue
	used  []int                    // per limit: Processing instances it matches
	names []string
	lanes map[name][]int // per lane: the limits that match its kind
	kinds map[name][]int // per kind name: the same

	// The claim's rate limits that may match its queue (ratelimit.go),
	// their state, the store's clock, and what they held back.
	rates  rateGate
	capped bool // a lane was left out for a concurrency limit
}

// newLimitGate returns the gate of a claim of queue with limits ls, or nil
// when none of them can match an instance of queue.
func newLimitGate(t *tables, queue string, ls []store.ConcurrencyLimit, names []string, rates rateGate) *limitGate {
	var g *limitGate
	if len(rates.ls) > 0 {
		g = &limitGate{names: names, lanes: map[name][]int{}, kinds: map[name][]int{}, rates: rates}
	}
	for _, l := range ls {
		if l.Queue == "" || l.Queue == queue {
			if g == nil {
				g = &limitGate{names: names, lanes: map[name][]int{}, kinds: map[name][]int{}}
			}
			g.ls = append(g.ls, l)
		}
	}
	if g == nil {
		return nil
	}
	g.used = make([]int, len(g.ls))
	for grp, c := range t.counts {
		if c[store.Processing] == 0 {
			continue
		}
		for i, l := range g.ls {
			if l.Matches(names[grp.kind], names[grp.queue]) {
				g.used[i] += int(c[store.Processing])
			}
		}
	}
	return g
}

// ofKind returns the limits matching instances of kind (in the claim's
// queue, which every limit of the gate may match).
func (g *limitGate) ofKind(kind string) []int {
	var out []int
	for i, l := range g.ls {
		if !l.PerKey && (l.Kind == "" || l.Kind == kind) { // per key: keyedlimits.go
			out = append(out, i)
		}
	}
	return out
}

// room returns how many more instances of lane may start.
func (g *limitGate) room(lane name) int {
	ix, ok := g.lanes[lane]
	if !ok {
		kind := g.names[lane]
		if i := strings.IndexByte(kind, 0); i >= 0 {
			kind = kind[:i]
		}
		ix = g.ofKind(kind)
		g.lanes[lane] = ix
	}
	room := math.MaxInt
	for _, i := range ix {
		if r := g.ls[i].Max - g.used[i]; r <= 0 {
			g.capped = true
			room = 0
		} else {
			room = min(room, r)
		}
	}
	kind := g.names[lane]
	if i := strings.IndexByte(kind, 0); i >= 0 {
		kind = kind[:i]
	}
	return min(room, g.rates.room(kind))
}

// took counts a claimed instance of kind k.
func (g *limitGate) took(k name) {
	ix, ok := g.kinds[k]
	if !ok {
		ix = g.ofKind(g.names[k])
		g.kinds[k] = ix
	}
	for _, i := range ix {
		g.used[i]++
	}
	g.rates.took(g.names[k])
}

// pickWithin claims, through take, up to p.Limit ready instances of queue
// qid that filter allows and the limits of p leave room for, in claim
// order. It returns how many it claimed, the earliest RunAt of those
// allowed that wait (as pickLanes), and whether a lane with Scheduled
// instances was left out for a limit. s.mu is held.
func (s *Store) pickWithin(qid name, now int64, p *store.ClaimParams, names []string, take func(*rec)) (n int, next int64, limited bool, retry time.Duration) {
	filter := newClaimFilter(p, names)
	g := newLimitGate(&s.t, p.Queue, p.Limits, names, s.rateGate(p))
	if g == nil {
		picked, next, _ := pickLanes(&s.t, &s.probe, qid, now, p.Limit, filter)
		for _, r := range picked {
			take(r)
		}
		return len(picked), next, false, 0
	}
	defer func() { limited, retry = g.capped, g.rates.wait }()
	if store.HasPerKey(g.ls) {
		n, next = s.pickKeyed(g, qid, now, p, filter, take)
		return n, next, false, 0
	}
	for n < p.Limit {
		// The smallest room among the lanes the claimer may take bounds
		// this round; the lanes without room sit it out.
		want := p.Limit - n
		if q := s.t.lanes[qid]; q != nil {
			for _, lanes := range q.byPrio {
				for lane := range lanes {
					if !filter(lane) {
						continue
					}
					if r := g.room(lane); r > 0 {
						want = min(want, r)
					}
				}
			}
		}
		ok := func(lane name) bool { return filter(lane) && g.room(lane) > 0 }
		picked, nx, _ := pickLanes(&s.t, &s.probe, qid, now, want, ok)
		for _, r := range picked {
			g.took(r.kind)
			take(r)
		}
		n += len(picked)
		next = nx
		if len(picked) < want {
			break // nothing more the limits let start
		}
	}
	return n, next, false, 0
}

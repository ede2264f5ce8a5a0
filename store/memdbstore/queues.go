package memdbstore

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jobkit/job/store"
)

// Lanes: the ready index is ordered by (queue, priority descending, lane,
// RunAt, Seq), where a lane is a kind together with the labels its
// instances require (the lane's name is the kind, then each label behind a
// NUL byte). laneIndex counts, per queue and priority, the Scheduled
// instances of each lane, so a claim visits only the lanes that hold work
// and that the claimer may take: it seeks each such lane's head once and
// merges the heads by (RunAt, Seq), never walking over instances it must
// skip. A claim costs O((lanes it may take + instances it takes) · log n).

// laneName returns the name of the lane of kind with the (normalised)
// labels.
func laneName(kind string, labels []string) string {
	if len(labels) == 0 {
		return kind
	}
	return kind + "\x00" + strings.Join(labels, "\x00")
}

// laneLabels returns the labels of the lane named lane (nil for none).
func laneLabels(lane string) []string {
	i := strings.IndexByte(lane, 0)
	if i < 0 {
		return nil
	}
	return strings.Split(lane[i+1:], "\x00")
}

// laneIndex counts the Scheduled instances per queue, priority and lane,
// and remembers each lane's head (its first entry in the ready index).
// Only the writer keeps it (snapshots have none).
type laneIndex map[name]*queueLanes

// queueLanes is one queue's lanes: its priorities (highest first) and, per
// priority, its non-empty lanes.
type queueLanes struct {
	prios  []int64
	byPrio map[int64]map[name]*laneState
}

// laneState is one non-empty lane at one priority: how many Scheduled
// instances it holds and its head, or nil when the head left the index
// and has not been looked up again since (pickLanes seeks it).
type laneState struct {
	count int
	head  *rec
}

// sameKey reports whether a and b have the same place in the ready index.
func sameKey(a, b *rec) bool { return !lessReady(a, b) && !lessReady(b, a) }

// laneAdd counts r, which has just entered the ready index.
func (t *tables) laneAdd(r *rec) {
	q := t.lanes[r.qid]
	if q == nil {
		q = &queueLanes{byPrio: map[int64]map[name]*laneState{}}
		t.lanes[r.qid] = q
	}
	lanes := q.byPrio[r.priority]
	if lanes == nil {
		lanes = map[name]*laneState{}
		q.byPrio[r.priority] = lanes
		i := sort.Search(len(q.prios), func(i int) bool { return q.prios[i] <= r.priority })
		q.prios = slices.Insert(q.prios, i, r.priority)
	}
	ls := lanes[r.lane]
	if ls == nil {
		lanes[r.lane] = &laneState{count: 1, head: r}
		return
	}
	ls.count++
	if ls.head != nil && lessReady(r, ls.head) {
		ls.head = r
	}
}

// laneDel uncounts r, which has just left the ready index.
func (t *tables) laneDel(r *rec) {
	q := t.lanes[r.qid]
	if q == nil {
		return
	}
	lanes := q.byPrio[r.priority]
	ls := lanes[r.lane]
	if ls == nil {
		return
	}
	ls.count--
	if ls.count > 0 {
		if ls.head != nil && sameKey(ls.head, r) {
			ls.head = nil // looked up when next needed
		}
		return
	}
	delete(lanes, r.lane)
	if len(lanes) == 0 {
		delete(q.byPrio, r.priority)
		if i := slices.Index(q.prios, r.priority); i >= 0 {
			q.prios = slices.Delete(q.prios, i, i+1)
		}
		if len(q.prios) == 0 {
			delete(t.lanes, r.qid)
		}
	}
}

// laneHead is the next ready candidate of one lane in a claim's merge.
type laneHead struct{ r *rec }

type headHeap []laneHead

func (h headHeap) Len() int           { return len(h) }
func (h headHeap) Less(i, j int) bool { return before(h[i].r, h[j].r) }
func (h headHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *headHeap) Push(x any)        { *h = append(*h, x.(laneHead)) }
func (h *headHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// before orders instances of one priority across lanes: RunAt, then Seq.
func before(a, b *rec) bool {
	if a.runAt != b.runAt {
		return a.runAt < b.runAt
	}
	return a.seq < b.seq
}

// claimFilter decides, once per lane and claim, whether the claimer may
// take a lane's instances.
type claimFilter struct {
	p      *store.ClaimParams
	names  []string
	sorted bool // p.Kinds is sorted: look kinds up by binary search
	seen   map[name]bool
}

// newClaimFilter returns the lane test of a claim with p. There is one
// even for a claimer with no kinds and no labels: it takes any kind, but
// only the lanes whose requirements a node without labels satisfies.
func newClaimFilter(p *store.ClaimParams, names []string) func(name) bool {
	f := &claimFilter{p: p, names: names, sorted: slices.IsSorted(p.Kinds)}
	return f.ok
}

func (f *claimFilter) ok(lane name) bool {
	if v, ok := f.seen[lane]; ok {
		return v
	}
	ln := f.names[lane]
	kind, labels := ln, []string(nil)
	if i := strings.IndexByte(ln, 0); i >= 0 {
		kind, labels = ln[:i], laneLabels(ln)
	}
	var v bool
	switch {
	case len(labels) == 0 && len(f.p.Kinds) == 0:
		v = true
	case f.sorted && len(f.p.Kinds) > 0:
		_, v = slices.BinarySearch(f.p.Kinds, kind)
		v = v && (len(labels) == 0 || f.p.Claimable(kind, labels))
	default:
		v = f.p.Claimable(kind, labels)
	}
	if f.seen == nil {
		f.seen = make(map[name]bool, 8)
	}
	f.seen[lane] = v
	return v
}

// pickLanes returns up to limit ready instances of queue qid that ok
// allows (nil: every lane), in claim order (priority descending, then RunAt, then Seq), and
// the earliest RunAt of those allowed that wait (0 when none, or when it
// stopped at limit before looking). It starts from the lanes' remembered
// heads, so a lane it may take costs no seek unless its head was claimed
// since; it takes runs of consecutive entries of one lane with one seek.
// visited counts the index entries it looked at.
func pickLanes(t *tables, probe *rec, qid name, now int64, limit int, ok func(name) bool) (picked []*rec, next int64, visited int) {
	defer func() { *probe = rec{} }()
	q := t.lanes[qid]
	if q == nil {
		return nil, 0, 0
	}
	waits := func(r *rec) {
		if next == 0 || r.runAt < next {
			next = r.runAt
		}
	}
	var h headHeap
	for _, prio := range q.prios {
		h = h[:0]
		var states []*laneState // parallel to h, for the single-lane path
		for lane, ls := range q.byPrio[prio] {
			if ok != nil && !ok(lane) {
				continue
			}
			if ls.head == nil {
				*probe = rec{qid: qid, priority: prio, lane: lane, runAt: minNanos}
				t.ready.AscendGreaterOrEqual(probe, func(r *rec) bool {
					visited++
					ls.head = r
					return false
				})
			}
			if ls.head == nil {
				continue
			}
			if ls.head.runAt > now {
				waits(ls.head)
				continue
			}
			h = append(h, laneHead{ls.head})
			states = append(states, ls)
		}
		if len(h) == 1 {
			// One lane: take its run in one ascent from its head, and
			// remember where it stopped as its next head.
			ls, r := states[0], h[0].r
			ls.head = nil
			full := false
			*probe = *r
			probe.data, probe.x = "", nil
			t.ready.AscendGreaterOrEqual(probe, func(n *rec) bool {
				visited++
				switch {
				case n.qid != r.qid || n.priority != r.priority || n.lane != r.lane:
					return false
				case n.runAt > now:
					waits(n)
					ls.head = n
					return false
				case full:
					ls.head = n // the first left behind
					return false
				}
				picked = append(picked, n)
				full = len(picked) == limit
				return true
			})
			if full {
				return picked, next, visited
			}
			continue
		}
		heap.Init(&h)
		for h.Len() > 0 {
			r := heap.Pop(&h).(laneHead).r
			picked = append(picked, r)
			if len(picked) == limit {
				return picked, next, visited
			}
			// Take what follows r in its lane while it comes before the
			// other lanes' heads; the first that does not is the lane's
			// next head in the merge.
			*probe = rec{qid: r.qid, priority: r.priority, lane: r.lane, runAt: r.runAt, seq: r.seq + 1}
			full := false
			t.ready.AscendGreaterOrEqual(probe, func(n *rec) bool {
				visited++
				switch {
				case n.qid != r.qid || n.priority != r.priority || n.lane != r.lane:
					return false // the lane ends
				case n.runAt > now:
					waits(n)
					return false
				case h.Len() > 0 && !before(n, h[0].r):
					heap.Push(&h, laneHead{n})
					return false
				}
				picked = append(picked, n)
				full = len(picked) == limit
				return !full
			})
			if full {
				return picked, next, visited
			}
		}
	}
	return picked, next, visited
}

// PauseQueue implements store.QueueAdmin. A queue never used is created
// paused.
func (s *Store) PauseQueue(ctx context.Context, p *store.QueueParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("memdbstore: pause queue: %w", err)
	}
	return s.write(ctx, "pause queue", func() error {
		s.queues[p.Queue] = true
		return nil
	})
}

// ResumeQueue implements store.QueueAdmin; it wakes the queue's
// subscribers.
func (s *Store) ResumeQueue(ctx context.Context, p *store.QueueParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("memdbstore: resume queue: %w", err)
	}
	err := s.write(ctx, "resume queue", func() error {
		if _, ok := s.queues[p.Queue]; ok {
			s.queues[p.Queue] = false
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.notify(map[string]struct{}{p.Queue: {}})
	return nil
}

// ListQueues implements store.QueueAdmin, in name order.
func (s *Store) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	if err := ctxErr(ctx, "list queues"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	out := make([]store.QueueInfo, 0, len(s.queues))
	for q, paused := range s.queues {
		out = append(out, store.QueueInfo{Name: q, Paused: paused})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b store.QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

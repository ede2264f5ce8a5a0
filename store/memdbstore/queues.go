package memdbstore

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/google/btree"

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

// laneIndex counts the Scheduled instances per queue, priority and lane.
// Only the writer keeps it (snapshots have none).
type laneIndex map[name]*queueLanes

// queueLanes is one queue's lanes: its priorities (highest first) and, per
// priority, the number of Scheduled instances in each lane.
type queueLanes struct {
	prios  []int64
	byPrio map[int64]map[name]int
}

func (x laneIndex) add(r *rec, d int) {
	q := x[r.qid]
	if q == nil {
		q = &queueLanes{byPrio: map[int64]map[name]int{}}
		x[r.qid] = q
	}
	lanes := q.byPrio[r.priority]
	if lanes == nil {
		lanes = map[name]int{}
		q.byPrio[r.priority] = lanes
		i := sort.Search(len(q.prios), func(i int) bool { return q.prios[i] <= r.priority })
		q.prios = slices.Insert(q.prios, i, r.priority)
	}
	n := lanes[r.lane] + d
	if n > 0 {
		lanes[r.lane] = n
		return
	}
	delete(lanes, r.lane)
	if len(lanes) == 0 {
		delete(q.byPrio, r.priority)
		if i := slices.Index(q.prios, r.priority); i >= 0 {
			q.prios = slices.Delete(q.prios, i, i+1)
		}
	}
}

// laneHead is the next ready candidate of one lane in a claim's merge.
type laneHead struct{ r *rec }

type headHeap []laneHead

func (h headHeap) Len() int { return len(h) }
func (h headHeap) Less(i, j int) bool {
	a, b := h[i].r, h[j].r
	if a.runAt != b.runAt {
		return a.runAt < b.runAt
	}
	return a.seq < b.seq
}
func (h headHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *headHeap) Push(x any)   { *h = append(*h, x.(laneHead)) }
func (h *headHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// claimFilter decides, once per lane and claim, whether the claimer may
// take a lane's instances.
type claimFilter struct {
	p     *store.ClaimParams
	names []string
	seen  map[name]bool
}

func (f *claimFilter) ok(lane name) bool {
	if len(f.p.Kinds) == 0 && len(f.p.Labels) == 0 {
		return true
	}
	if v, ok := f.seen[lane]; ok {
		return v
	}
	ln := f.names[lane]
	kind := ln
	if i := strings.IndexByte(ln, 0); i >= 0 {
		kind = ln[:i]
	}
	v := f.p.Claimable(kind, laneLabels(ln))
	if f.seen == nil {
		f.seen = map[name]bool{}
	}
	f.seen[lane] = v
	return v
}

// pickLanes returns up to limit ready instances of queue qid that ok
// allows, in claim order (priority descending, then RunAt, then Seq), and
// the earliest RunAt of those allowed that wait (0 when none, or when it
// stopped at limit before looking). visited counts the index entries it
// looked at: picked plus at most two per lane it may take.
func pickLanes(ready *btree.BTreeG[*rec], lanes laneIndex, probe *rec, qid name, now int64, limit int, ok func(name) bool) (picked []*rec, next int64, visited int) {
	defer func() { *probe = rec{} }()
	q := lanes[qid]
	if q == nil {
		return nil, 0, 0
	}
	// first returns the first entry at or after the probe, if it is still
	// in lane of priority prio.
	first := func(prio int64, lane name) *rec {
		var got *rec
		ready.AscendGreaterOrEqual(probe, func(r *rec) bool {
			visited++
			if r.qid == qid && r.priority == prio && r.lane == lane {
				got = r
			}
			return false
		})
		return got
	}
	var h headHeap
	for _, prio := range q.prios {
		h = h[:0]
		for lane := range q.byPrio[prio] {
			if !ok(lane) {
				continue
			}
			*probe = rec{qid: qid, priority: prio, lane: lane, runAt: minNanos}
			r := first(prio, lane)
			switch {
			case r == nil:
			case r.runAt > now:
				if next == 0 || r.runAt < next {
					next = r.runAt
				}
			default:
				h = append(h, laneHead{r})
			}
		}
		heap.Init(&h)
		for h.Len() > 0 {
			r := h[0].r
			picked = append(picked, r)
			if len(picked) == limit {
				return picked, next, visited
			}
			*probe = *r
			probe.seq++ // just after r: (runAt, seq) order within its lane
			probe.data, probe.x = "", nil
			n := first(prio, r.lane)
			switch {
			case n == nil:
				heap.Pop(&h)
			case n.runAt > now:
				if next == 0 || n.runAt < next {
					next = n.runAt
				}
				heap.Pop(&h)
			default:
				h[0].r = n
				heap.Fix(&h, 0)
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

package job

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// WaitReason names why an instance is not running (Manager.ExplainWaiting).
// The values are stable, lower-case words, as the API carries them.
type WaitReason string

// The wait reasons, in the order ExplainWaiting looks for them.
const (
	// WaitNotWaiting: the instance is not Scheduled (it runs, or is
	// finished).
	WaitNotWaiting WaitReason = "not_waiting"
	// WaitQueuePaused: its queue is paused (PauseQueue); nothing is
	// claimed from it until ResumeQueue.
	WaitQueuePaused WaitReason = "queue_paused"
	// WaitNotDue: its RunAt is still ahead (a delay, a retry's backoff).
	WaitNotDue WaitReason = "not_due"
	// WaitNoNodeForKind: no live node runs its kind.
	WaitNoNodeForKind WaitReason = "no_node_for_kind"
	// WaitNoNodeForQueue: live nodes run its kind, but none claims from
	// its queue (WithQueues).
	WaitNoNodeForQueue WaitReason = "no_node_for_queue"
	// WaitNoNodeWithLabels: live nodes run its kind from its queue, but
	// none has labels that satisfy its requirements (WithRequiredLabels,
	// WithLabels). It runs as soon as such a node starts.
	WaitNoNodeWithLabels WaitReason = "no_node_with_labels"
	// WaitNodesBusy: live nodes that may run it exist, and every one had
	// all of its worker slots busy at its last heartbeat.
	WaitNodesBusy WaitReason = "nodes_busy"
	// WaitConcurrencyLimit: it is due and nodes may run it, but a
	// concurrency limit that matches it is full (SetConcurrencyLimit).
	WaitConcurrencyLimit WaitReason = "concurrency_limit"
	// WaitRateLimit: it is due and nodes may run it, but a rate limit
	// that matches it holds more due work than it lets start at once
	// ("waiting for the rate limit of kind email ...").
	WaitRateLimit WaitReason = "rate_limit"
	// WaitReady: it is due and live nodes with free slots may run it; one
	// claims it shortly, after what is ahead of it in its queue.
	WaitReady WaitReason = "ready"
)

// WaitExplanation is what Manager.ExplainWaiting says about an instance.
type WaitExplanation struct {
	// ID is the instance's ID.
	ID string
	// Reason is the first reason found, in the order of the WaitReason
	// constants.
	Reason WaitReason
	// Message says the same for people, naming the kind, the queue, the
	// requirements and the nodes, such as `no live node has labels
	// satisfying [gpu] (live nodes running kind "render": n1 [region=eu])`.
	Message string
	// RunAt is when the instance is (or was) due.
	RunAt time.Time
	// Requires are the instance's label requirements (nil for none).
	Requires []string
	// Matching are the live nodes that run the kind from the queue and
	// whose labels satisfy the requirements, by ID.
	Matching []string
	// Unmatched are the live nodes that run the kind from the queue but
	// whose labels do not satisfy the requirements, each with what it
	// fails.
	Unmatched []NodeMismatch
}

// NodeMismatch is a live node that runs an instance's kind but whose
// labels do not satisfy the instance's requirements.
type NodeMismatch struct {
	Node   string   // the node's ID
	Labels []string // the node's labels
	Unmet  []string // the requirements its labels do not satisfy
}

// ExplainWaiting says why the instance id is not running: not Scheduled
// at all, its queue paused, not due yet, no live node that runs its kind
// (or claims from its queue), no live node whose labels satisfy its
// requirements, every node that may run it busy, or ready to be claimed.
// It reads the instance, the queues and the node registry (ListNodes),
// so it speaks of the whole cluster sharing the store, not only of this
// manager; a node is live as ListNodes says. An unknown id is
// ErrNotFound.
func (m *Manager) ExplainWaiting(ctx context.Context, id string) (*WaitExplanation, error) {
	recs, err := m.store.LookupInstances(ctx, &store.Query{InstanceID: id, Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("job: explain waiting %s: %w", id, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("job: explain waiting %s: %w", id, ErrNotFound)
	}
	rec := recs[0]
	ex := &WaitExplanation{ID: rec.ID, RunAt: rec.RunAt, Requires: slices.Clone(rec.Labels)}
	if rec.State != store.Scheduled {
		ex.Reason, ex.Message = WaitNotWaiting, fmt.Sprintf("the instance is %v, not waiting", rec.State)
		return ex, nil
	}
	qs, err := m.store.ListQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("job: explain waiting %s: list queues: %w", id, err)
	}
	nodes, err := m.Admin().ListNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("job: explain waiting %s: %w", id, err)
	}
	explainNodes(ex, rec, nodes)
	now := m.clock.Now()
	switch {
	case slices.ContainsFunc(qs, func(q store.QueueInfo) bool { return q.Name == rec.Queue && q.Paused }):
		ex.Reason, ex.Message = WaitQueuePaused, fmt.Sprintf("queue %q is paused; resume it with Manager.ResumeQueue to run its instances", rec.Queue)
	case rec.RunAt.After(now):
		msg := fmt.Sprintf("not due until %s (in %v)", rec.RunAt.UTC().Format(time.RFC3339Nano), rec.RunAt.Sub(now).Round(time.Millisecond))
		if ex.Reason != WaitReady && ex.Reason != WaitNodesBusy {
			msg += "; and then: " + ex.Message // the nodes will be the reason next
		}
		ex.Reason, ex.Message = WaitNotDue, msg
	case ex.Reason == WaitReady || ex.Reason == WaitNodesBusy:
		if err := m.explainLimits(ctx, ex, rec); err != nil {
			return nil, fmt.Errorf("job: explain waiting %s: %w", id, err)
		}
		if ex.Reason != WaitConcurrencyLimit {
			if err := m.explainRateLimits(ctx, ex, rec); err != nil { // ratelimit.go
				return nil, fmt.Errorf("job: explain waiting %s: %w", id, err)
			}
		}
	}
	return ex, nil
}

// explainNodes sets ex's node fields and, when the nodes are the reason,
// its Reason and Message.
func explainNodes(ex *WaitExplanation, rec *store.Instance, nodes []*store.NodeInfo) {
	var kindNodes, queueNodes []*store.NodeInfo
	live := 0
	for _, n := range nodes {
		if n.Status != store.NodeLive {
			continue
		}
		live++
		if !slices.Contains(n.Kinds, rec.Kind) {
			continue
		}
		kindNodes = append(kindNodes, n)
		if len(n.Queues) > 0 && !slices.Contains(n.Queues, rec.Queue) {
			continue
		}
		queueNodes = append(queueNodes, n)
		if unmet := store.UnmetLabels(rec.Labels, n.Labels); len(unmet) > 0 {
			ex.Unmatched = append(ex.Unmatched, NodeMismatch{Node: n.ID, Labels: slices.Clone(n.Labels), Unmet: unmet})
		} else {
			ex.Matching = append(ex.Matching, n.ID)
		}
	}
	switch {
	case len(kindNodes) == 0:
		ex.Reason = WaitNoNodeForKind
		ex.Message = fmt.Sprintf("no live node runs kind %q (%d live node(s) run other kinds); it runs once a node that registered the kind starts", rec.Kind, live)
	case len(queueNodes) == 0:
		var qs []string
		for _, n := range kindNodes {
			qs = append(qs, n.Queues...)
		}
		slices.Sort(qs)
		ex.Reason = WaitNoNodeForQueue
		ex.Message = fmt.Sprintf("no live node running kind %q claims from queue %q (they claim from %s)", rec.Kind, rec.Queue, strings.Join(slices.Compact(qs), ", "))
	case len(ex.Matching) == 0:
		parts := make([]string, len(ex.Unmatched))
		for i, u := range ex.Unmatched {
			parts[i] = fmt.Sprintf("%s has [%s], fails [%s]", u.Node, strings.Join(u.Labels, " "), strings.Join(u.Unmet, " "))
		}
		ex.Reason = WaitNoNodeWithLabels
		ex.Message = fmt.Sprintf("no live node has labels satisfying [%s] (live nodes running kind %q from queue %q: %s); it runs once such a node starts",
			strings.Join(rec.Labels, " "), rec.Kind, rec.Queue, strings.Join(parts, "; "))
	default:
		free, slots := 0, 0
		for _, n := range queueNodes {
			if slices.Contains(ex.Matching, n.ID) {
				free += max(n.Workers-n.Busy, 0)
				slots += n.Workers
			}
		}
		if free == 0 {
			ex.Reason = WaitNodesBusy
			ex.Message = fmt.Sprintf("every live node that may run it is busy (%d of %d slots on %s)", slots, slots, strings.Join(ex.Matching, ", "))
		} else {
			ex.Reason = WaitReady
			ex.Message = fmt.Sprintf("due; %d live node(s) may run it (%s, %d free slots) and claim it after what is ahead of it in queue %q", len(ex.Matching), strings.Join(ex.Matching, ", "), free, rec.Queue)
		}
	}
}

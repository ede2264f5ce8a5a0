package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// QueueAdmin pauses and resumes queues and lists them. A paused queue keeps
// accepting Enqueue (scheduling into it works as usual) but Claim takes
// nothing from it, on every handle and every node: the claim checks the
// flag inside its atomic operation, so a pause is in force from the next
// claim on. Resume wakes the queue's subscribers (a notifying store), so
// claimers pick its work up at once.
type QueueAdmin interface {
	// PauseQueue pauses p.Queue. A queue that has never been used is
	// created paused: it is listed by ListQueues, and what is later
	// enqueued into it waits until ResumeQueue. Pausing a paused queue
	// changes nothing.
	PauseQueue(ctx context.Context, p *QueueParams) error
	// ResumeQueue resumes p.Queue and wakes its claimers. Resuming a queue
	// that is not paused (or not known) changes nothing.
	ResumeQueue(ctx context.Context, p *QueueParams) error
	// ListQueues returns every queue the store knows (enqueued into, or
	// paused), by name, with its paused flag.
	ListQueues(ctx context.Context) ([]QueueInfo, error)
}

// QueueParams is the argument of QueueAdmin.PauseQueue and ResumeQueue.
type QueueParams struct {
	Queue string    // required
	Now   time.Time // when the change is made (stores may record it)
}

// Validate checks the parameters every plugin requires.
func (p *QueueParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil queue parameters", ErrInvalid)
	case p.Queue == "":
		return fmt.Errorf("%w: queue parameters without a queue name", ErrInvalid)
	}
	return nil
}

// QueueInfo is one queue as ListQueues reports it.
type QueueInfo struct {
	Name   string
	Paused bool
}

// Claimable reports whether a claimer with p's kinds and labels may take an
// instance of kind whose label requirements are labels: the claimer runs
// the kind (or names no kinds) and its labels satisfy every requirement
// (LabelsSatisfy). It is the rule every store applies inside Claim; stores
// that keep lanes apply it once per lane.
func (p *ClaimParams) Claimable(kind string, labels []string) bool {
	if len(p.Kinds) > 0 && !slices.Contains(p.Kinds, kind) {
		return false
	}
	return LabelsSatisfy(labels, p.Labels)
}

package job

import (
	"context"
	"fmt"
	"slices"

	"github.com/jobkit/job/store"
)

// QueueInfo is one queue as ListQueues reports it: its name and whether it
// is paused.
type QueueInfo = store.QueueInfo

// PauseQueue pauses the queue name on every node sharing the store: from
// the next claim on, no manager takes its instances, while ScheduleJob
// into it keeps working. Running attempts are not stopped. A queue that
// has never been used is created paused. Pausing a paused queue changes
// nothing.
func (a *Admin) PauseQueue(ctx context.Context, name string) error {
	m := a.m
	if name == "" {
		return fmt.Errorf("%w: PauseQueue needs a queue name", ErrInvalidOption)
	}
	if err := m.store.PauseQueue(ctx, &store.QueueParams{Queue: name, Now: m.clock.Now()}); err != nil {
		return fmt.Errorf("job: pause queue %q: %w", name, err)
	}
	return nil
}

// ResumeQueue resumes the queue name and wakes its claimers on every node.
// Resuming a queue that is not paused changes nothing.
func (a *Admin) ResumeQueue(ctx context.Context, name string) error {
	m := a.m
	if name == "" {
		return fmt.Errorf("%w: ResumeQueue needs a queue name", ErrInvalidOption)
	}
	if err := m.store.ResumeQueue(ctx, &store.QueueParams{Queue: name, Now: m.clock.Now()}); err != nil {
		return fmt.Errorf("job: resume queue %q: %w", name, err)
	}
	m.notifyLocal()
	return nil
}

// ListQueues returns every queue the store knows (scheduled into, or
// paused), sorted by name, with its paused flag. Counts and lag are in
// Counts and Lag.
func (a *Admin) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	m := a.m
	qs, err := m.store.ListQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("job: list queues: %w", err)
	}
	slices.SortFunc(qs, func(a, b QueueInfo) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return qs, nil
}

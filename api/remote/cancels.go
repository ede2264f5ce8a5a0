package remote

import (
	"context"
	"fmt"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

var _ store.CancelNotifier = (*Store)(nil)

// cancelBuffer is the channel capacity of a SubscribeCancels subscriber.
const cancelBuffer = 64

// SubscribeCancels implements store.CancelNotifier with the Cancel
// messages jobd pushes on the session: the attempts of this worker whose
// cancellation was requested (by any caller, through any jobd of the
// cluster, where jobd's store reports cancels), so the engine cancels
// them at once. With Options.NoPush the channel receives every running
// attempt of the namespace that is canceled. Subscriptions last across
// reconnections until ctx ends; then the channel is closed. A notice that
// finds the channel full is dropped: the engine still sees the request
// at its next lease renewal.
func (s *Store) SubscribeCancels(ctx context.Context) (<-chan store.LeaseRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("remote: SubscribeCancels: %w", context.Cause(ctx))
	}
	ch := make(chan store.LeaseRef, cancelBuffer)
	s.mu.Lock()
	if s.cancelSubs == nil {
		s.cancelSubs = make(map[chan store.LeaseRef]struct{})
	}
	s.cancelSubs[ch] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.cancelSubs, ch)
		close(ch)
	})
	return ch, nil
}

// receiveCancel hands the attempts of a Cancel message to the
// subscribers.
func (s *Store) receiveCancel(c *jobkitv1.Cancel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range c.GetTasks() {
		ref := store.LeaseRef{ID: t.GetId(), Attempt: int(t.GetAttempt())}
		for ch := range s.cancelSubs {
			select {
			case ch <- ref:
			default: // seen at the next renewal
			}
		}
	}
}

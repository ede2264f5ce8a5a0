package wire

import (
	"context"
	"time"

	"github.com/jobkit/job/store"
)

// MethodFollowNext is the long poll that carries store.Events.Follow: a
// remote follower asks for the events after its cursor whenever it has
// room for them, so it never holds more than one batch beyond what its
// consumer read (a feed pushed over the network would read ahead by the
// transport's buffers, and a lagging consumer would not lag where the
// contract says it does: in the store's history).
const MethodFollowNext = "FollowNext"

// FollowNextParams asks for the events after Cursor that match the
// filters of FollowParams.
type FollowNextParams struct {
	store.FollowParams
	// Max is the most events to return (1 when 0).
	Max int
	// Wait is how long to wait for a first event; 0 returns what is there
	// at once (it still checks the cursor).
	Wait time.Duration
}

// FollowNextResult is the batch of a FollowNext.
type FollowNextResult struct {
	// Events in order; the last may carry Err (the feed ended).
	Events []Event
}

// maxFollowWait bounds FollowNextParams.Wait.
const maxFollowWait = 30 * time.Second

// followNext opens the store's feed at p.Cursor, takes up to p.Max events
// (waiting up to p.Wait for the first, then taking only what is at hand),
// and closes it.
func followNext(ctx context.Context, st store.Store, p *FollowNextParams) (*FollowNextResult, error) {
	if p == nil {
		p = &FollowNextParams{}
	}
	max := max(p.Max, 1)
	wait := min(p.Wait, maxFollowWait)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fp := p.FollowParams
	fp.Buffer = max
	ch, err := st.Follow(ctx, &fp)
	if err != nil {
		return nil, err
	}
	out := &FollowNextResult{}
	take := func(ev store.Event) bool {
		out.Events = append(out.Events, EncodeEvent(ev))
		return ev.Err == nil && len(out.Events) < max
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case ev, ok := <-ch:
		if !ok || !take(ev) {
			return out, nil
		}
	case <-t.C:
		return out, nil
	case <-ctx.Done():
		return out, context.Cause(ctx)
	}
	// What else is at hand: the store delivers what it has at once; a
	// short grace lets a batch written together arrive together.
	grace := time.NewTimer(time.Millisecond)
	defer grace.Stop()
	for {
		select {
		case ev, ok := <-ch:
			if !ok || !take(ev) {
				return out, nil
			}
		case <-grace.C:
			return out, nil
		}
	}
}

package redisscript

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// cancelBuffer is the channel capacity of a SubscribeCancels subscriber.
const cancelBuffer = 64

// SubscribeCancels implements store.CancelNotifier: a SUBSCRIBE to the
// namespace's cancels channel, which lua/cancel.lua PUBLISHes to when it
// sets the cancel flag of a Processing instance. It returns once the
// server confirmed the subscription (or after 10 s, subscribing on in the
// background); a broken connection is re-subscribed with backoff (notices
// published meanwhile are lost: the owners see them at their next Renew).
func (c *Core) SubscribeCancels(ctx context.Context) (<-chan store.LeaseRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(chan store.LeaseRef, cancelBuffer)
	first := make(chan struct{})
	confirmed := false
	subscribed := func() {
		if !confirmed {
			confirmed = true
			close(first)
		}
	}
	message := func(payload string) {
		att, id, ok := strings.Cut(payload, " ")
		n, err := strconv.Atoi(att)
		if !ok || err != nil {
			return
		}
		if id, err = DecodeID(id); err != nil {
			return
		}
		select {
		case out <- store.LeaseRef{ID: id, Attempt: n}:
		default: // the owner sees it at its next Renew
		}
	}
	go func() {
		defer close(out)
		c.listenAlways(ctx, c.keys.Cancels(), subscribed, message)
	}()
	select {
	case <-first:
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
	}
	return out, nil
}

package memdbstore

import (
	"context"

	"github.com/jobkit/job/store"
)

// cancelBuffer is the channel capacity of a SubscribeCancels subscriber.
const cancelBuffer = 64

// cancelSub is one SubscribeCancels call's channel.
type cancelSub struct {
	ch     chan store.LeaseRef
	closed bool
}

// SubscribeCancels implements store.CancelNotifier: the channel receives
// the attempt of every Processing instance Cancel is called on, from any
// handle of this store. It is closed when ctx ends; a notice that finds it
// full is dropped. Subscribing starts no goroutine.
func (s *Store) SubscribeCancels(ctx context.Context) (<-chan store.LeaseRef, error) {
	if err := ctxErr(ctx, "subscribe to cancels"); err != nil {
		return nil, err
	}
	sub := &cancelSub{ch: make(chan store.LeaseRef, cancelBuffer)}
	s.subMu.Lock()
	if s.cancelSubs == nil {
		s.cancelSubs = make(map[*cancelSub]struct{})
	}
	s.cancelSubs[sub] = struct{}{}
	s.subMu.Unlock()
	context.AfterFunc(ctx, func() {
		s.subMu.Lock()
		defer s.subMu.Unlock()
		delete(s.cancelSubs, sub)
		sub.closed = true
		close(sub.ch)
	})
	return sub.ch, nil
}

// noticeCancel tells the SubscribeCancels subscribers that ref's cancel
// was requested.
func (s *Store) noticeCancel(ref store.LeaseRef) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	for sub := range s.cancelSubs {
		if sub.closed {
			continue
		}
		select {
		case sub.ch <- ref:
		default: // the owner sees it at its next Renew
		}
	}
}

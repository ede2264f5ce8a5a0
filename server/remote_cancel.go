package server

import (
	"context"
	"time"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// Cancels pushed to remote workers (issue 21): while workers of a
// namespace are connected, jobd follows its store's cancel notices
// (store.CancelNotifier) and sends a Cancel on the stream of the worker
// holding the attempt, so it stops at once instead of at its next lease
// renewal (which still reports the request). One subscription per
// namespace, shared by its sessions.

// cancelFeed is one namespace's subscription to its store's cancel
// notices.
type cancelFeed struct {
	sessions int // connected sessions of the namespace
	stop     context.CancelFunc
}

// followCancelsLocked counts x among its namespace's sessions and starts
// following the namespace's cancel notices for the first. Called with
// s.sessMu held.
func (s *Server) followCancelsLocked(x *session) {
	n, ok := x.st.(store.CancelNotifier)
	if !ok {
		return // cancels reach the worker with its renewals
	}
	if s.cancelFeeds == nil {
		s.cancelFeeds = make(map[string]*cancelFeed)
	}
	f := s.cancelFeeds[x.ns]
	if f == nil {
		ctx, stop := context.WithCancel(context.Background())
		f = &cancelFeed{stop: stop}
		s.cancelFeeds[x.ns] = f
		go s.followCancels(ctx, x.ns, n)
	}
	f.sessions++
}

// unfollowCancelsLocked stops following the namespace's cancel notices
// when x was its last session. Called with s.sessMu held.
func (s *Server) unfollowCancelsLocked(x *session) {
	f := s.cancelFeeds[x.ns]
	if f == nil {
		return
	}
	if f.sessions--; f.sessions <= 0 {
		f.stop()
		delete(s.cancelFeeds, x.ns)
	}
}

// followCancels forwards the cancel notices of namespace ns to its
// sessions until ctx ends, subscribing again (with backoff) when the
// subscription ends.
func (s *Server) followCancels(ctx context.Context, ns string, n store.CancelNotifier) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		ch, err := n.SubscribeCancels(ctx)
		if err == nil {
			backoff = 50 * time.Millisecond
			for ref := range ch {
				s.pushCancel(ns, ref)
			}
		}
		if ctx.Err() != nil {
			return
		}
		s.cfg.Logger.Warn("jobkit server: cancel notices for remote workers ended; subscribing again (cancels still reach workers with their renewals)", "namespace", ns, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// pushCancel sends a Cancel for ref to the session of namespace ns whose
// worker holds it, and to the namespace's pull-only sessions (tools and
// the contract suite, which claim for owners of their own).
func (s *Server) pushCancel(ns string, ref store.LeaseRef) {
	s.sessMu.Lock()
	var to []*session
	for _, x := range s.sessions {
		if x.ns == ns {
			to = append(to, x)
		}
	}
	s.sessMu.Unlock()
	msg := &pb.ConnectResponse{Msg: &pb.ConnectResponse_Cancel{Cancel: &pb.Cancel{
		Tasks: []*pb.LeaseRef{{Id: ref.ID, Attempt: int64(ref.Attempt)}},
	}}}
	for _, x := range to {
		x.mu.Lock()
		_, held := x.inflight[ref]
		hit := held || x.pullOnly
		x.mu.Unlock()
		if hit {
			// Not from this goroutine: a worker that does not read its
			// stream must not hold up the others' cancels.
			go func() { _ = x.send(msg) }()
		}
	}
}

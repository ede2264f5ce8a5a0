package remote

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/remote/wire"
	"github.com/jobkit/job/store"
)

var (
	_ store.Store    = (*Store)(nil)
	_ store.Notifier = (*Store)(nil)
	_ store.Closer   = (*Store)(nil)
)

// learn records what the engine's calls say about the worker, for the
// hello of the next session.
func (s *Store) learn(node string, kinds, labels []string, slots int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if node != "" {
		s.node = node
	}
	if kinds != nil {
		s.kinds = slices.Clone(kinds)
	}
	if labels != nil {
		s.labels = slices.Clone(labels)
	}
	if slots > 0 {
		s.slots = slots
	}
}

// Claim returns the tasks jobd pushed for p.Queue, up to p.Limit, at once,
// and tells jobd in passing (a Credit message) how many more it may push.
// When none were pushed, it claims through the session (jobd claims from
// its store for this worker, and keeps what that leaves of p.Limit as
// credit). Either way jobd pushes what becomes ready later, and Subscribe
// wakes the engine.
func (s *Store) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("remote: Claim: %w", context.Cause(ctx))
	}
	s.learn(p.Owner, p.Kinds, p.Labels, 0)
	s.mu.Lock()
	var took []*store.Instance
	if buf := s.buffer[p.Queue]; len(buf) > 0 {
		n := min(len(buf), p.Limit)
		took = slices.Clone(buf[:n])
		s.buffer[p.Queue] = slices.Delete(buf, 0, n)
	}
	sess := s.sess
	slots := s.slots
	s.mu.Unlock()
	// On a msgpack-keyed session that jobd pushes on, a claim that finds
	// nothing pushed makes no round trip either: jobd holds credit for
	// the queue and pushes what becomes ready, waking the engine.
	standing := sess != nil && sess.keyed && sess.pushed.Load() && !s.opts.NoPush
	if len(took) > 0 || standing {
		// Start what jobd pushed at once: a claim of the rest would put a
		// round trip to jobd and its store before these tasks start. jobd
		// learns the credit left from a Credit message instead, and
		// pushes what becomes ready (waking the engine).
		if want := p.Limit - len(took); want > 0 && sess != nil {
			limit := want
			if standing {
				// Grant what the worker's slots hold, and say so again
				// only when jobd may have pushed most of it: jobd caps
				// every push by the slots less what it counts in flight
				// (which a slot the engine frees is until its outcome
				// lands), so no more than the slots are ever in flight,
				// and the engine's claim loop, which claims each time a
				// slot frees, sends no message per task.
				limit = max(want, slots)
			}
			if s.creditDue(sess, p, want, limit) {
				_ = sess.send(&jobkitv1.ConnectRequest{Msg: &jobkitv1.ConnectRequest_Credit{Credit: &jobkitv1.Credit{
					Queue: p.Queue, Limit: int32(min(limit, math.MaxInt32)), LeaseMillis: max(p.LeaseUntil.Sub(p.Now).Milliseconds(), 1),
					Kinds: p.Kinds, Labels: p.Labels,
				}}})
			}
		}
		return &store.ClaimResult{Instances: took}, nil
	}
	// Claim through the session: this also tells jobd the credit left
	// (what the claim does not fill), so it pushes more.
	var r *wire.ClaimResult
	err := s.sessionCall(ctx, wire.MethodClaim, p, &r)
	res := r.Store()
	if err != nil {
		return res, err
	}
	if res == nil {
		res = &store.ClaimResult{}
	}
	s.mu.Lock()
	for _, in := range res.Instances {
		s.held[store.LeaseRef{ID: in.ID, Attempt: in.Attempt}] = struct{}{}
	}
	s.mu.Unlock()
	return res, nil
}

// sentCredit is a Credit message sent on a session: its limit less the
// tasks pushed since, and the claim parameters it carried.
type sentCredit struct {
	limit         int
	kinds, labels []string
	lease         time.Duration
}

// creditDue reports whether a claim of p that leaves want slots unfilled
// must send jobd a Credit of limit: unless jobd may still push want or
// more by the last Credit this session sent (less what it pushed since),
// for the same kinds, labels and lease. Only a msgpack-keyed session
// skips a Credit; on others every claim that takes pushed tasks tells
// jobd the rest, as before. It records the Credit it says is due as
// sent.
func (s *Store) creditDue(sess *session, p *store.ClaimParams, want, limit int) bool {
	lease := p.LeaseUntil.Sub(p.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := sess.credits[p.Queue]
	if sess.keyed && c != nil && c.limit >= want && c.lease == lease && slices.Equal(c.kinds, p.Kinds) && slices.Equal(c.labels, p.Labels) {
		return false
	}
	sess.credits[p.Queue] = &sentCredit{limit: limit, kinds: slices.Clone(p.Kinds), labels: slices.Clone(p.Labels), lease: lease}
	return true
}

// Renew renews leases through the session.
func (s *Store) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var r *store.RenewResult
	if err := s.sessionCall(ctx, wire.MethodRenew, p, &r); err != nil {
		return r, err
	}
	if r == nil {
		r = &store.RenewResult{}
	}
	s.mu.Lock()
	for _, l := range r.Lost {
		delete(s.held, l)
	}
	s.mu.Unlock()
	return r, nil
}

// Finish applies outcomes through the session.
func (s *Store) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var rs []wire.FinishResult
	err := s.sessionCall(ctx, wire.MethodFinish, p, &rs)
	out := make([]store.FinishResult, len(rs))
	for i, r := range rs {
		out[i] = r.Store()
	}
	if err == nil && p != nil && len(out) == len(p.Outcomes) {
		s.mu.Lock()
		for i, o := range p.Outcomes {
			if out[i].Err == nil || errors.Is(out[i].Err, store.ErrLeaseLost) {
				delete(s.held, store.LeaseRef{ID: o.ID, Attempt: o.Attempt})
			}
		}
		s.mu.Unlock()
	}
	if len(rs) == 0 && err != nil {
		return nil, err
	}
	return out, err
}

// Rescue goes through the session.
func (s *Store) Rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var r []*store.Instance
	err := s.sessionCall(ctx, wire.MethodRescue, p, &r)
	return r, err
}

// Heartbeat records the worker's node through the session.
func (s *Store) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if p != nil {
		s.learn(p.Node.ID, p.Node.Kinds, p.Node.Labels, p.Node.Workers)
	}
	var r *store.HeartbeatResult
	err := s.sessionCall(ctx, wire.MethodHeartbeat, p, &r)
	if err == nil && p != nil && p.Leaving {
		// The worker stops: jobd pushes nothing more, and every task it
		// pushed came before this reply. Hand back those the engine
		// never took, so they run elsewhere at once.
		s.handBack(ctx, p.Node.ID, p.Now)
	}
	return r, err
}

// handBack releases the pushed tasks no Claim took (the attempt not
// counted).
func (s *Store) handBack(ctx context.Context, owner string, now time.Time) {
	s.mu.Lock()
	var outs []store.Outcome
	for q, buf := range s.buffer {
		for _, in := range buf {
			outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: in.RunAt, Release: true,
				Error: "handed back: the remote worker stopped before it started the attempt"})
		}
		delete(s.buffer, q)
	}
	s.mu.Unlock()
	if len(outs) == 0 {
		return
	}
	if _, err := s.Finish(ctx, &store.FinishParams{Owner: owner, Now: now, Outcomes: outs}); err != nil {
		s.log.Warn("could not hand back pushed tasks; they run elsewhere once their leases lapse", "tasks", len(outs), "err", err)
	}
}

// RescueNodes goes through the session.
func (s *Store) RescueNodes(ctx context.Context, p *store.RescueNodesParams) (*store.RescueNodesResult, error) {
	var r *store.RescueNodesResult
	err := s.sessionCall(ctx, wire.MethodRescueNodes, p, &r)
	return r, err
}

// AppendLogs goes through the session.
func (s *Store) AppendLogs(ctx context.Context, recs []*store.LogRecord) error {
	for _, l := range recs {
		if err := l.Validate(); err != nil {
			return err
		}
	}
	return s.sessionCall(ctx, wire.MethodAppendLogs, recs, nil)
}

// SetProgress goes through the session.
func (s *Store) SetProgress(ctx context.Context, p *store.ProgressParams) error {
	return s.sessionCall(ctx, wire.MethodSetProgress, p, nil)
}

// Subscribe returns a channel that receives a value whenever jobd pushed
// tasks of queue (with Options.NoPush: whenever jobd's store may have new
// work ready in it), until ctx ends.
func (s *Store) Subscribe(ctx context.Context, queue string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.subs[queue] == nil {
		s.subs[queue] = make(map[chan struct{}]struct{})
	}
	s.subs[queue][ch] = struct{}{}
	sess := s.sess
	s.mu.Unlock()
	if s.opts.NoPush && sess != nil {
		// Wait until jobd follows the queue's wake-ups, so a change made
		// after Subscribe returns wakes the channel. A session that comes
		// up later subscribes again when it starts.
		if err := s.sessionCall(ctx, wire.MethodSubscribe, &wire.SubscribeParams{Queue: queue}, nil); err != nil && !errors.Is(err, ErrDisconnected) {
			s.mu.Lock()
			delete(s.subs[queue], ch)
			s.mu.Unlock()
			return nil, err
		}
	}
	// The read loop wakes ch itself (wakeLocked, under s.mu): no
	// goroutine between a push and the engine's claim loop.
	go func() {
		select {
		case <-ctx.Done():
		case <-s.ctx.Done():
		}
		s.mu.Lock()
		delete(s.subs[queue], ch)
		close(ch)
		s.mu.Unlock()
	}()
	return ch, nil
}

// Enqueue goes as a unary call.
func (s *Store) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var rs []wire.EnqueueResult
	err := s.unaryCall(ctx, "Enqueue", p, &rs)
	if len(rs) == 0 && err != nil {
		return nil, err
	}
	out := make([]store.EnqueueResult, len(rs))
	for i, r := range rs {
		out[i] = r.Store()
	}
	return out, err
}

// Cancel goes as a unary call.
func (s *Store) Cancel(ctx context.Context, p *store.CancelParams) (*store.Instance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var r *store.Instance
	err := s.unaryCall(ctx, "Cancel", p, &r)
	return r, err
}

// LookupInstances goes as a unary call.
func (s *Store) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	var r []*store.Instance
	err := s.unaryCall(ctx, "LookupInstances", q, &r)
	return r, err
}

// LookupHistory goes as a unary call.
func (s *Store) LookupHistory(ctx context.Context, q *store.Query) ([]*store.HistoryRecord, error) {
	var r []*store.HistoryRecord
	err := s.unaryCall(ctx, "LookupHistory", q, &r)
	return r, err
}

// LookupLogs goes as a unary call.
func (s *Store) LookupLogs(ctx context.Context, q *store.Query) ([]*store.LogRecord, error) {
	var r []*store.LogRecord
	err := s.unaryCall(ctx, "LookupLogs", q, &r)
	return r, err
}

// LookupProgress goes as a unary call.
func (s *Store) LookupProgress(ctx context.Context, ids []string) ([]*store.ProgressRecord, error) {
	var r []*store.ProgressRecord
	err := s.unaryCall(ctx, "LookupProgress", ids, &r)
	return r, err
}

// Prune goes as a unary call.
func (s *Store) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var r *store.PruneResult
	err := s.unaryCall(ctx, "Prune", p, &r)
	return r, err
}

// PutDefinition goes as a unary call.
func (s *Store) PutDefinition(ctx context.Context, p *store.PutDefinitionParams) (*store.Definition, error) {
	var r *store.Definition
	err := s.unaryCall(ctx, "PutDefinition", p, &r)
	return r, err
}

// GetDefinition goes as a unary call.
func (s *Store) GetDefinition(ctx context.Context, kind string) (*store.Definition, error) {
	var r *store.Definition
	err := s.unaryCall(ctx, "GetDefinition", kind, &r)
	return r, err
}

// ListDefinitions goes as a unary call.
func (s *Store) ListDefinitions(ctx context.Context, p *store.ListDefinitionsParams) ([]*store.Definition, error) {
	var r []*store.Definition
	err := s.unaryCall(ctx, "ListDefinitions", p, &r)
	return r, err
}

// DeleteDefinition goes as a unary call.
func (s *Store) DeleteDefinition(ctx context.Context, p *store.DeleteDefinitionParams) error {
	return s.unaryCall(ctx, "DeleteDefinition", p, nil)
}

// EventCursor goes as a unary call.
func (s *Store) EventCursor(ctx context.Context) (string, error) {
	var r string
	err := s.unaryCall(ctx, "EventCursor", nil, &r)
	return r, err
}

// ListNodes goes as a unary call.
func (s *Store) ListNodes(ctx context.Context, p *store.ListNodesParams) ([]*store.NodeInfo, error) {
	var r []*store.NodeInfo
	err := s.unaryCall(ctx, "ListNodes", p, &r)
	return r, err
}

// PauseQueue goes as a unary call.
func (s *Store) PauseQueue(ctx context.Context, p *store.QueueParams) error {
	return s.unaryCall(ctx, "PauseQueue", p, nil)
}

// ResumeQueue goes as a unary call.
func (s *Store) ResumeQueue(ctx context.Context, p *store.QueueParams) error {
	return s.unaryCall(ctx, "ResumeQueue", p, nil)
}

// ListQueues goes as a unary call.
func (s *Store) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	var r []store.QueueInfo
	err := s.unaryCall(ctx, "ListQueues", nil, &r)
	return r, err
}

// Counts goes as a unary call.
func (s *Store) Counts(ctx context.Context, p *store.CountsParams) ([]store.GroupCount, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var r []store.GroupCount
	err := s.unaryCall(ctx, "Counts", p, &r)
	return r, err
}

// Lag goes as a unary call.
func (s *Store) Lag(ctx context.Context, p *store.LagParams) (*store.LagResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var r *store.LagResult
	err := s.unaryCall(ctx, "Lag", p, &r)
	return r, err
}

// PageInstances goes as a unary call.
func (s *Store) PageInstances(ctx context.Context, q *store.Query) (*store.InstancePage, error) {
	var r *store.InstancePage
	err := s.unaryCall(ctx, "PageInstances", q, &r)
	return r, err
}

// PageHistory goes as a unary call.
func (s *Store) PageHistory(ctx context.Context, q *store.Query) (*store.HistoryPage, error) {
	var r *store.HistoryPage
	err := s.unaryCall(ctx, "PageHistory", q, &r)
	return r, err
}

// PageLogs goes as a unary call.
func (s *Store) PageLogs(ctx context.Context, q *store.Query) (*store.LogPage, error) {
	var r *store.LogPage
	err := s.unaryCall(ctx, "PageLogs", q, &r)
	return r, err
}

// Retry goes as a unary call.
func (s *Store) Retry(ctx context.Context, p *store.RetryParams) ([]store.AdminResult, error) {
	var rs []wire.AdminResult
	err := s.unaryCall(ctx, "Retry", p, &rs)
	return adminResults(rs, err)
}

// Delete goes as a unary call.
func (s *Store) Delete(ctx context.Context, p *store.DeleteParams) ([]store.AdminResult, error) {
	var rs []wire.AdminResult
	err := s.unaryCall(ctx, "Delete", p, &rs)
	return adminResults(rs, err)
}

func adminResults(rs []wire.AdminResult, err error) ([]store.AdminResult, error) {
	if len(rs) == 0 && err != nil {
		return nil, err
	}
	out := make([]store.AdminResult, len(rs))
	for i, r := range rs {
		out[i] = r.Store()
	}
	return out, err
}

// Follow delivers the namespace's events: a long poll (FollowNext) from
// the last cursor whenever the returned channel has room, so a consumer
// that lags, lags in jobd's store as it would against a local one.
func (s *Store) Follow(ctx context.Context, p *store.FollowParams) (<-chan store.Event, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	fp := *p
	if fp.Cursor == "" {
		// From now: pin now's position first.
		c, err := s.EventCursor(ctx)
		if err != nil {
			return nil, err
		}
		fp.Cursor = c
	}
	// The first call checks the cursor at once (and returns what is at hand).
	first, err := s.followNext(ctx, fp, 0)
	if err != nil {
		return nil, err
	}
	out := make(chan store.Event, p.BufferOrDefault())
	go func() {
		defer close(out)
		batch := first
		failures := 0
		for {
			for _, ev := range batch {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
				if ev.Err != nil {
					return // the feed's last event
				}
				fp.Cursor = ev.Cursor
			}
			var err error
			batch, err = s.followNext(ctx, fp, 10*time.Second)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrCursorExpired) || failures >= 5 {
					select {
					case out <- store.Event{Err: fmt.Errorf("remote: the event feed from jobd ended: %w", err)}:
					case <-ctx.Done():
					}
					return
				}
				failures++
				t := time.NewTimer(time.Duration(failures) * 100 * time.Millisecond)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
				continue
			}
			failures = 0
		}
	}()
	return out, nil
}

// followNext asks jobd for the next batch of events after fp.Cursor.
func (s *Store) followNext(ctx context.Context, fp store.FollowParams, wait time.Duration) ([]store.Event, error) {
	var r *wire.FollowNextResult
	if err := s.unaryCall(ctx, wire.MethodFollowNext, &wire.FollowNextParams{FollowParams: fp, Max: max(fp.BufferOrDefault()/4, 1), Wait: wait}, &r); err != nil {
		return nil, err
	}
	if r == nil {
		return nil, nil
	}
	out := make([]store.Event, len(r.Events))
	for i, ev := range r.Events {
		out[i] = ev.Store()
	}
	return out, nil
}

// PutDocument goes as a unary call.
func (s *Store) PutDocument(ctx context.Context, p *store.PutDocumentParams) (*store.Document, error) {
	var r *wire.Document
	err := s.unaryCall(ctx, "PutDocument", wire.EncodePutDocument(p), &r)
	return r.Store(), err
}

// GetDocument goes as a unary call.
func (s *Store) GetDocument(ctx context.Context, collection, name string) (*store.Document, error) {
	var r *wire.Document
	err := s.unaryCall(ctx, "GetDocument", &wire.DocumentKey{Collection: collection, Name: name}, &r)
	return r.Store(), err
}

// ListDocuments goes as a unary call.
func (s *Store) ListDocuments(ctx context.Context, p *store.ListDocumentsParams) (*store.DocumentPage, error) {
	var r *wire.DocumentPage
	err := s.unaryCall(ctx, "ListDocuments", p, &r)
	if r == nil {
		return nil, err
	}
	out := &store.DocumentPage{Next: r.Next}
	for _, d := range r.Documents {
		out.Documents = append(out.Documents, d.Store())
	}
	return out, err
}

// DeleteDocument goes as a unary call.
func (s *Store) DeleteDocument(ctx context.Context, p *store.DeleteDocumentParams) error {
	return s.unaryCall(ctx, "DeleteDocument", p, nil)
}

// PruneDocuments goes as a unary call.
func (s *Store) PruneDocuments(ctx context.Context, p *store.PruneDocumentsParams) (int, error) {
	var n int
	err := s.unaryCall(ctx, "PruneDocuments", p, &n)
	return n, err
}

// Wake (sharded tasks) goes as a unary call.
func (s *Store) Wake(ctx context.Context, p *store.WakeParams) error {
	return s.unaryCall(ctx, "Wake", p, nil)
}

// EnforcesConcurrencyLimits implements store.LimitEnforcer: jobd applies
// the limits of every claim (store.ClaimParams.Limits, or its cluster's
// when a claim carries none) with job.Manager.ApplyLimits, enforced by
// its own store or, when that store cannot, by leaving out what they
// bound.
func (s *Store) EnforcesConcurrencyLimits() bool { return true }

package memdbstore

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/jobkit/job/store"
)

// Enqueue implements store.Queue.
func (s *Store) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: enqueue: %w", err)
	}
	now := nanos(p.Now)
	node := s.nameOf(p.Node)
	res := make([]store.EnqueueResult, len(p.Instances))
	woken := map[string]struct{}{}
	err := s.write(ctx, "enqueue", func() error {
		for i, in := range p.Instances {
			if old := s.t.get(&s.probe, in.ID); old != nil {
				// A repeated Enqueue: the instance is stored already.
				res[i] = store.EnqueueResult{ID: in.ID, Seq: old.seq, Existed: true}
				continue
			}
			if in.UniqueKey != "" {
				if u, ok := s.unique[in.UniqueKey]; ok && u.until > now {
					res[i] = store.EnqueueResult{ID: u.id, Err: fmt.Errorf("memdbstore: instance %s: unique key %q is held by %s until %v: %w",
						in.ID, in.UniqueKey, u.id, fromNanos(u.until), store.ErrDuplicate)}
					continue
				}
				s.unique[in.UniqueKey] = uniqueRow{id: in.ID, until: nanos(in.UniqueUntil)}
			}
			seq := s.seq.Add(3) - 2 // seq+1 and seq+2 number the Created and Scheduled records
			r := newRec(in.ID, in.Args)
			r.kind = s.nameOf(in.Kind)
			r.lane = r.kind
			if labels := store.NormLabels(in.Labels); len(labels) > 0 {
				r.lane = s.nameOf(laneName(in.Kind, labels))
			}
			r.qid = s.nameOf(in.Queue)
			if _, ok := s.queues[in.Queue]; !ok {
				s.queues[in.Queue] = false
			}
			r.enqNode = node
			r.priority = int64(in.Priority)
			r.timeout = in.Timeout
			r.seq = seq
			r.runAt = nanos(in.RunAt)
			r.createdAt = nanos(in.CreatedAt)
			r.updatedAt, r.enqAt = now, now
			r.maxRetries = clamp32(in.MaxRetries)
			r.state = store.Scheduled
			if in.UniqueKey != "" || len(in.Metadata) > 0 || in.ShardCount > 0 || in.Task != nil || in.LimitKey != "" {
				r.x = &extra{uniqueKey: in.UniqueKey, uniqueTill: nanos(in.UniqueUntil), meta: store.CloneMetadata(in.Metadata),
					parent: in.Parent, shardIndex: clamp32(in.ShardIndex), shardCount: clamp32(in.ShardCount),
					task: in.Task.Clone(), limitKey: in.LimitKey}
			}
			s.t.put(nil, r)
			res[i] = store.EnqueueResult{ID: in.ID, Seq: seq}
			woken[in.Queue] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.notify(woken)
	return res, nil
}

// Claim implements store.Queue.
func (s *Store) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: claim: %w", err)
	}
	res := &store.ClaimResult{}
	qid, ok := s.knownName(p.Queue)
	if !ok { // never enqueued into: nothing waits
		return res, ctxErr(ctx, "claim")
	}
	now, until := nanos(p.Now), nanos(p.LeaseUntil)
	owner := s.nameOf(p.Owner)
	var last *ownerClaim
	if p.ClaimSeq != 0 {
		s.claimMu.Lock()
		defer s.claimMu.Unlock()
		if c := s.claims[p.Owner]; c != nil && c.until >= now && c.seq >= p.ClaimSeq {
			last = c
		}
	}
	var took []store.LeaseRef
	err := s.write(ctx, "claim", func() error {
		names := s.nameList() // loaded under the lock: it names every stored record
		if last != nil {
			if last.seq > p.ClaimSeq {
				return nil // a stale call: a newer claim was applied
			}
			// A repeat: what the first call took and still holds.
			for _, l := range last.refs {
				r := s.t.get(&s.probe, l.ID)
				if r != nil && r.state == store.Processing && r.leaseOwner == owner && int(r.attempt) == l.Attempt {
					res.Instances = append(res.Instances, r.toInstance(names))
				}
			}
			return nil
		}
		if s.queues[p.Queue] {
			return nil // paused: nothing is claimed, and nothing to wait for
		}
		res.Instances = make([]*store.Instance, 0, min(p.Limit, 64))
		n, next, limited, retry := s.pickWithin(qid, now, p, names, func(old *rec) {
			r := old.clone()
			r.state = store.Processing
			r.attempt++
			r.leaseOwner = owner
			r.leaseUntil = until
			r.updatedAt = now
			r.addHist(hist{state: store.Processing, attempt: r.attempt, t: now, seq: s.seq.Add(1), node: names[owner]})
			s.t.put(old, r)
			res.Instances = append(res.Instances, r.toInstance(names))
			took = append(took, store.LeaseRef{ID: r.id(), Attempt: int(r.attempt)})
		})
		res.Limited, res.RetryAfter = limited, retry
		if n < p.Limit {
			res.NextRunAt = fromNanos(next)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if p.ClaimSeq != 0 && last == nil {
		s.claims[p.Owner] = &ownerClaim{seq: p.ClaimSeq, until: until, refs: took}
		s.forgetClaims(now)
	}
	return res, nil
}

// ownerClaim is the last claim of one owner made with a ClaimSeq: its
// number, its lease deadline and the attempts it took.
type ownerClaim struct {
	seq   uint64
	until int64
	refs  []store.LeaseRef
}

// forgetClaims drops the last claims whose lease ended before now, once
// every 256 claims, so owners that stopped claiming cost nothing.
// s.claimMu is held.
func (s *Store) forgetClaims(now int64) {
	s.claimsSweep++
	if s.claimsSweep%256 != 0 {
		return
	}
	for o, c := range s.claims {
		if c.until < now {
			delete(s.claims, o)
		}
	}
}

// minNanos is the smallest stored time (nanos clamps to it).
const minNanos = -1 << 63

// Renew implements store.Queue.
func (s *Store) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	res := &store.RenewResult{}
	now, until := nanos(p.Now), nanos(p.Until)
	owner, _ := s.knownName(p.Owner) // unknown: 0, which owns nothing
	err := s.write(ctx, "renew", func() error {
		for _, l := range p.Leases {
			old := s.t.get(&s.probe, l.ID)
			if old == nil || old.state != store.Processing || old.leaseOwner != owner || int(old.attempt) != l.Attempt {
				res.Lost = append(res.Lost, l)
				continue
			}
			r := old.clone()
			r.leaseUntil = until
			r.updatedAt = now
			s.t.put(old, r)
			if r.cancelReq {
				res.CancelRequested = append(res.CancelRequested, l)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Finish implements store.Queue.
func (s *Store) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	for i := range p.Outcomes {
		if err := p.Outcomes[i].Validate(); err != nil {
			return nil, fmt.Errorf("memdbstore: finish: %w", err)
		}
	}
	now := nanos(p.Now)
	owner := s.nameOf(p.Owner)
	res := make([]store.FinishResult, len(p.Outcomes))
	woken := map[string]struct{}{}
	err := s.write(ctx, "finish", func() error {
		names := s.nameList() // loaded under the lock: it names every stored record
		for i := range p.Outcomes {
			o := &p.Outcomes[i]
			old := s.t.get(&s.probe, o.ID)
			if old == nil || old.state != store.Processing || old.leaseOwner != owner || int(old.attempt) != o.Attempt {
				if old != nil && applied(old, o, names[owner]) {
					res[i].State = old.state // a repeated Finish: this very outcome is recorded
					continue
				}
				res[i].Err = fmt.Errorf("memdbstore: finish %s attempt %d as %v: the attempt is no longer owned by %s: %w", o.ID, o.Attempt, o.State, p.Owner, store.ErrLeaseLost)
				continue
			}
			state := o.State
			if state == store.Scheduled && old.cancelReq {
				// Canceled while the attempt ran, before a Renew told
				// its owner: the cancel wins over another attempt.
				state = store.Canceled
			}
			r := old.clone()
			r.state = state
			r.leaseOwner, r.leaseUntil = 0, 0
			r.cancelReq = false
			r.updatedAt = now
			result := cloneBytes(o.Result)
			if state == store.Scheduled {
				r.runAt = nanos(o.RunAt)
				if o.Release {
					r.attempt--
				}
				r.setOutcome(o.Error, result, 0)
				woken[names[r.qid]] = struct{}{}
			} else {
				r.setOutcome(o.Error, result, now)
			}
			r.addHist(hist{state: state, attempt: old.attempt, t: now, seq: s.seq.Add(1), node: names[owner], err: o.Error, result: result})
			s.t.put(old, r)
			res[i].State = state
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.notify(woken)
	return res, nil
}

// applied reports whether r is where outcome o of owner left it: its last
// transition is o's, made by owner for o's attempt, and its state, error,
// result and run time are o's; or, for a retry or release, it was
// canceled instead (see store.Queue.Finish), with o's attempt and error.
func applied(r *rec, o *store.Outcome, owner string) bool {
	hs := r.hist()
	if len(hs) == 0 {
		return false
	}
	state := o.State
	if state == store.Scheduled && r.state == store.Canceled {
		state = store.Canceled
	}
	h := hs[len(hs)-1]
	if h.state != state || h.node != owner || int(h.attempt) != o.Attempt || r.state != state {
		return false
	}
	var err string
	var result []byte
	if r.x != nil {
		err, result = r.x.err, r.x.result
	}
	if err != o.Error || !bytes.Equal(result, o.Result) {
		return false
	}
	if state == store.Scheduled {
		want := o.Attempt
		if o.Release {
			want--
		}
		return int(r.attempt) == want && r.runAt == nanos(o.RunAt)
	}
	return int(r.attempt) == o.Attempt
}

// Rescue implements store.Queue.
func (s *Store) Rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := nanos(p.Now)
	node := s.intern(p.Node)
	var out []*store.Instance
	woken := map[string]struct{}{}
	err := s.write(ctx, "rescue", func() error {
		names := s.nameList() // loaded under the lock: it names every stored record
		var expired []*rec
		s.t.due.Ascend(func(r *rec) bool {
			if r.leaseUntil >= now {
				return false
			}
			expired = append(expired, r)
			return len(expired) < p.Limit
		})
		for _, old := range expired {
			msg := fmt.Sprintf("lease of %s expired at %s", names[old.leaseOwner], fromNanos(old.leaseUntil).Format(time.RFC3339Nano))
			r := s.rescueMove(old, msg, now, node, names, woken)
			out = append(out, r.toInstance(names))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.notify(woken)
	return out, nil
}

// rescueMove takes back old, a Processing attempt whose owner is gone (its
// lease expired, or its node was declared dead), at time at: to Canceled
// when a cancel was requested (its owner never saw the request), to
// Scheduled keeping runAt and its place in the queue while retries are
// left (waking the queue), else to Terminated; msg is the history
// record's error. It stores and returns the new record. s.mu is held.
func (s *Store) rescueMove(old *rec, msg string, at int64, node string, names []string, woken map[string]struct{}) *rec {
	r := old.clone()
	r.leaseOwner, r.leaseUntil = 0, 0
	r.updatedAt = at
	switch {
	case old.cancelReq:
		r.cancelReq = false
		r.state = store.Canceled
		r.setOutcome(msg, nil, at)
	case r.retriesLeft():
		r.state = store.Scheduled // runAt kept: it keeps its place in the queue
		r.setOutcome(msg, nil, 0)
		woken[names[r.qid]] = struct{}{}
	default:
		r.state = store.Terminated
		r.setOutcome(msg, nil, at)
	}
	r.addHist(hist{state: r.state, attempt: r.attempt, t: at, seq: s.seq.Add(1), node: node, err: msg})
	s.t.put(old, r)
	return r
}

// Cancel implements store.Queue.
func (s *Store) Cancel(ctx context.Context, p *store.CancelParams) (*store.Instance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := nanos(p.Now)
	node := s.intern(p.Node)
	var out *store.Instance
	err := s.write(ctx, "cancel", func() error {
		names := s.nameList() // loaded under the lock: it names every stored record
		old := s.t.get(&s.probe, p.ID)
		if old == nil {
			return fmt.Errorf("memdbstore: cancel %s: %w", p.ID, store.ErrNotFound)
		}
		if old.state.Final() {
			return fmt.Errorf("memdbstore: cancel %s: it is %v: %w", p.ID, old.state, store.ErrFinished)
		}
		r := old.clone()
		r.updatedAt = now
		if old.state == store.Processing {
			r.cancelReq = true
		} else {
			r.state = store.Canceled
			r.mutX().finishedAt = now
			r.addHist(hist{state: store.Canceled, attempt: r.attempt, t: now, seq: s.seq.Add(1), node: node})
		}
		s.t.put(old, r)
		out = r.toInstance(names)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out.State == store.Processing {
		s.noticeCancel(store.LeaseRef{ID: out.ID, Attempt: out.Attempt})
	}
	return out, nil
}

package memdbstore

import (
	"context"
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/jobkit/job/store"
)

// Enqueue implements store.Queue.
func (s *Store) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil enqueue parameters", store.ErrInvalid)
	}
	for _, in := range p.Instances {
		if err := in.Validate(); err != nil {
			return nil, fmt.Errorf("memdbstore: enqueue: %w", err)
		}
	}
	now := nanos(p.Now)
	node := s.intern(p.Node)
	res := make([]store.EnqueueResult, len(p.Instances))
	woken := map[string]struct{}{}
	err := s.write(ctx, "enqueue", func(tx *memdb.Txn) error {
		for i, in := range p.Instances {
			old, err := get(tx, in.ID)
			if err != nil {
				return err
			}
			if old != nil {
				res[i] = store.EnqueueResult{ID: in.ID, Err: fmt.Errorf("memdbstore: instance %s is already stored: %w", in.ID, store.ErrDuplicate)}
				continue
			}
			if in.UniqueKey != "" {
				obj, err := tx.First(tUnique, iID, in.UniqueKey)
				if err != nil {
					return err
				}
				if u, _ := obj.(*uniqueRow); u != nil && u.until > now {
					res[i] = store.EnqueueResult{ID: u.id, Err: fmt.Errorf("memdbstore: instance %s: unique key %q is held by %s until %v: %w",
						in.ID, in.UniqueKey, u.id, fromNanos(u.until), store.ErrDuplicate)}
					continue
				}
				if err := tx.Insert(tUnique, &uniqueRow{key: in.UniqueKey, id: in.ID, until: nanos(in.UniqueUntil)}); err != nil {
					return err
				}
			}
			qid, _ := s.queueID(in.Queue, true)
			seq := s.seq.Add(3) - 2 // seq+1 and seq+2 number the Created and Scheduled records
			r := &rec{
				id:         in.ID,
				kind:       s.intern(in.Kind),
				queue:      s.intern(in.Queue),
				enqNode:    node,
				args:       cloneBytes(in.Args),
				priority:   int64(in.Priority),
				timeout:    in.Timeout,
				seq:        seq,
				runAt:      nanos(in.RunAt),
				createdAt:  nanos(in.CreatedAt),
				updatedAt:  now,
				enqAt:      now,
				qid:        qid,
				maxRetries: clamp32(in.MaxRetries),
				state:      store.Scheduled,
			}
			if in.UniqueKey != "" {
				r.x = &extra{uniqueKey: in.UniqueKey, uniqueTill: nanos(in.UniqueUntil)}
			}
			if err := put(tx, r); err != nil {
				return err
			}
			res[i] = store.EnqueueResult{ID: in.ID, Seq: seq}
			woken[r.queue] = struct{}{}
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
	qid, ok := s.queueID(p.Queue, false)
	if !ok { // never enqueued into: nothing waits
		return res, ctxErr(ctx, "claim")
	}
	now, until := nanos(p.Now), nanos(p.LeaseUntil)
	owner := s.intern(p.Owner)
	err := s.write(ctx, "claim", func(tx *memdb.Txn) error {
		picked, next, _, err := pickReady(tx, qid, now, p.Limit)
		if err != nil {
			return err
		}
		res.Instances = make([]*store.Instance, 0, len(picked))
		for _, old := range picked {
			r := old.clone()
			r.state = store.Processing
			r.attempt++
			r.leaseOwner = owner
			r.leaseUntil = until
			r.updatedAt = now
			r.addHist(hist{state: store.Processing, attempt: r.attempt, t: now, seq: s.seq.Add(1), node: owner})
			if err := put(tx, r); err != nil {
				return err
			}
			res.Instances = append(res.Instances, r.toInstance())
		}
		if len(picked) < p.Limit {
			res.NextRunAt = fromNanos(next)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// pickReady returns up to limit ready instances of queue qid in claim order,
// and the earliest RunAt of those that wait (0 when none, or when it stopped
// at limit before looking). It seeks once per priority level: a level's
// instances are ordered by RunAt, so when the next one at a level is not due
// nothing after it at that level is, and it jumps to the next level.
// visited counts the index entries it looked at: picked plus at most two
// per priority level.
func pickReady(tx *memdb.Txn, qid uint32, now int64, limit int) (picked []*rec, next int64, visited int, err error) {
	level := uint32(0)
	for len(picked) < limit {
		it, err := tx.LowerBound(tInstances, iReady, readyKey(qid, level, minNanos, 0))
		if err != nil {
			return nil, 0, 0, err
		}
		obj := it.Next()
		visited++
		if obj == nil {
			break
		}
		r := obj.(*rec)
		if r.qid != qid {
			break // past the queue's last level
		}
		level = prioKey(r.priority)
		for obj != nil && len(picked) < limit {
			r = obj.(*rec)
			if r.qid != qid || prioKey(r.priority) != level {
				break
			}
			if r.runAt > now {
				if next == 0 || r.runAt < next {
					next = r.runAt
				}
				break
			}
			picked = append(picked, r)
			obj = it.Next()
			visited++
		}
		if level == ^uint32(0) {
			break
		}
		level++
	}
	return picked, next, visited, nil
}

// minNanos is the smallest stored time (nanos clamps to it).
const minNanos = -1 << 63

// Renew implements store.Queue.
func (s *Store) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("%w: nil renew parameters", store.ErrInvalid)
	case p.Owner == "":
		return nil, fmt.Errorf("%w: renew without an owner", store.ErrInvalid)
	}
	for _, l := range p.Leases {
		if l.ID == "" {
			return nil, fmt.Errorf("%w: renew of a lease without an instance ID", store.ErrInvalid)
		}
	}
	res := &store.RenewResult{}
	now, until := nanos(p.Now), nanos(p.Until)
	err := s.write(ctx, "renew", func(tx *memdb.Txn) error {
		for _, l := range p.Leases {
			old, err := get(tx, l.ID)
			if err != nil {
				return err
			}
			if old == nil || old.state != store.Processing || old.leaseOwner != p.Owner || int(old.attempt) != l.Attempt {
				res.Lost = append(res.Lost, l)
				continue
			}
			r := old.clone()
			r.leaseUntil = until
			r.updatedAt = now
			if err := put(tx, r); err != nil {
				return err
			}
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
func (s *Store) Finish(ctx context.Context, p *store.FinishParams) ([]error, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("%w: nil finish parameters", store.ErrInvalid)
	case p.Owner == "":
		return nil, fmt.Errorf("%w: finish without an owner", store.ErrInvalid)
	}
	for i := range p.Outcomes {
		if err := p.Outcomes[i].Validate(); err != nil {
			return nil, fmt.Errorf("memdbstore: finish: %w", err)
		}
	}
	now := nanos(p.Now)
	owner := s.intern(p.Owner)
	errs := make([]error, len(p.Outcomes))
	woken := map[string]struct{}{}
	err := s.write(ctx, "finish", func(tx *memdb.Txn) error {
		for i := range p.Outcomes {
			o := &p.Outcomes[i]
			old, err := get(tx, o.ID)
			if err != nil {
				return err
			}
			if old == nil || old.state != store.Processing || old.leaseOwner != p.Owner || int(old.attempt) != o.Attempt {
				errs[i] = fmt.Errorf("memdbstore: finish %s attempt %d as %v: the attempt is no longer owned by %s: %w", o.ID, o.Attempt, o.State, p.Owner, store.ErrLeaseLost)
				continue
			}
			r := old.clone()
			r.state = o.State
			r.leaseOwner, r.leaseUntil = "", 0
			r.updatedAt = now
			result := cloneBytes(o.Result)
			if o.State == store.Scheduled {
				r.runAt = nanos(o.RunAt)
				if o.Release {
					r.attempt--
				}
				r.setOutcome(o.Error, result, 0)
				woken[r.queue] = struct{}{}
			} else {
				r.setOutcome(o.Error, result, now)
			}
			r.addHist(hist{state: o.State, attempt: old.attempt, t: now, seq: s.seq.Add(1), node: owner, err: o.Error, result: result})
			if err := put(tx, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.notify(woken)
	return errs, nil
}

// Rescue implements store.Queue.
func (s *Store) Rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("%w: nil rescue parameters", store.ErrInvalid)
	case p.Limit <= 0:
		return nil, fmt.Errorf("%w: rescue limit %d, want > 0", store.ErrInvalid, p.Limit)
	}
	now := nanos(p.Now)
	node := s.intern(p.Node)
	var out []*store.Instance
	woken := map[string]struct{}{}
	err := s.write(ctx, "rescue", func(tx *memdb.Txn) error {
		it, err := tx.LowerBound(tInstances, iDue, timeSeqKey(minNanos, 0))
		if err != nil {
			return err
		}
		var expired []*rec
		for obj := it.Next(); obj != nil && len(expired) < p.Limit; obj = it.Next() {
			r := obj.(*rec)
			if r.leaseUntil >= now {
				break
			}
			expired = append(expired, r)
		}
		for _, old := range expired {
			r := old.clone()
			msg := fmt.Sprintf("lease of %s expired at %s", old.leaseOwner, fromNanos(old.leaseUntil).Format(time.RFC3339Nano))
			r.leaseOwner, r.leaseUntil = "", 0
			r.updatedAt = now
			if r.retriesLeft() {
				r.state = store.Scheduled // runAt kept: it keeps its place in the queue
				r.setOutcome(msg, nil, 0)
				woken[r.queue] = struct{}{}
			} else {
				r.state = store.Terminated
				r.setOutcome(msg, nil, now)
			}
			r.addHist(hist{state: r.state, attempt: r.attempt, t: now, seq: s.seq.Add(1), node: node, err: msg})
			if err := put(tx, r); err != nil {
				return err
			}
			out = append(out, r.toInstance())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.notify(woken)
	return out, nil
}

// Cancel implements store.Queue.
func (s *Store) Cancel(ctx context.Context, p *store.CancelParams) (*store.Instance, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("%w: nil cancel parameters", store.ErrInvalid)
	case p.ID == "":
		return nil, fmt.Errorf("%w: cancel without an instance ID", store.ErrInvalid)
	}
	now := nanos(p.Now)
	var out *store.Instance
	err := s.write(ctx, "cancel", func(tx *memdb.Txn) error {
		old, err := get(tx, p.ID)
		if err != nil {
			return err
		}
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
			r.addHist(hist{state: store.Canceled, attempt: r.attempt, t: now, seq: s.seq.Add(1), node: s.intern(p.Node)})
		}
		if err := put(tx, r); err != nil {
			return err
		}
		out = r.toInstance()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

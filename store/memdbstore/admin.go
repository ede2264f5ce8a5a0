package memdbstore

import (
	"context"
	"fmt"

	"github.com/jobkit/job/store"
)

var _ store.Admin = (*Store)(nil)

// Retry implements store.Admin: each instance moves from the index of
// finished instances to its queue's ready index, in one write.
func (s *Store) Retry(ctx context.Context, p *store.RetryParams) ([]store.AdminResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: %w", err)
	}
	now, runAt := nanos(p.Now), nanos(p.ReadyAt())
	node := s.intern(p.Node)
	msg := store.RetryMessage(p.Node)
	res := make([]store.AdminResult, len(p.IDs))
	woken := map[string]struct{}{}
	err := s.write(ctx, "retry", func() error {
		names := s.nameList() // loaded under the lock: it names every stored record
		for i, id := range p.IDs {
			res[i].ID = id
			old := s.t.get(&s.probe, id)
			switch {
			case old == nil:
				res[i].Err = fmt.Errorf("memdbstore: retry %s: %w", id, store.ErrNotFound)
				continue
			case !old.state.Final():
				res[i].Err = fmt.Errorf("memdbstore: retry %s: it is %v; cancel it first or wait for it to finish: %w", id, old.state, store.ErrNotFinished)
				continue
			}
			r := old.clone()
			r.state = store.Scheduled
			if p.ResetAttempts {
				r.attempt = 0
			}
			r.runAt = runAt
			r.updatedAt = now
			r.leaseOwner, r.leaseUntil, r.cancelReq = 0, 0, false
			r.setOutcome("", nil, 0)
			r.addHist(hist{state: store.Scheduled, attempt: r.attempt, t: now, seq: s.seq.Add(1), node: node, err: msg})
			s.t.put(old, r)
			res[i].State = store.Scheduled
			woken[names[r.qid]] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.notify(woken)
	return res, nil
}

// Delete implements store.Admin: each instance leaves every index, with
// its logs and the unique key it holds, as Prune removes one.
func (s *Store) Delete(ctx context.Context, p *store.DeleteParams) ([]store.AdminResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: %w", err)
	}
	res := make([]store.AdminResult, len(p.IDs))
	err := s.write(ctx, "delete", func() error {
		var removed store.PruneResult
		for i, id := range p.IDs {
			res[i].ID = id
			r := s.t.get(&s.probe, id)
			if r == nil {
				res[i].Err = fmt.Errorf("memdbstore: delete %s: %w", id, store.ErrNotFound)
				continue
			}
			res[i].State = r.state
			s.remove([]*rec{r}, &removed)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

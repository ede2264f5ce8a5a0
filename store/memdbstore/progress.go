package memdbstore

import (
	"context"
	"fmt"

	"github.com/jobkit/job/store"
)

// SetProgress implements store.Progress. The progress lives in its own map
// beside the tables, so a report neither copies a record nor invalidates
// the readers' snapshot; it is checked against the lease under the write
// lock, so it cannot land after the attempt finished.
func (s *Store) SetProgress(ctx context.Context, p *store.ProgressParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("memdbstore: %w", err)
	}
	if err := ctxErr(ctx, "set progress"); err != nil {
		return err
	}
	owner, known := s.knownName(p.Owner)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.t.get(&s.probe, p.ID)
	switch {
	case r == nil:
		return fmt.Errorf("memdbstore: set progress of %s: %w", p.ID, store.ErrNotFound)
	case !known || r.state != store.Processing || r.leaseOwner != owner || int(r.attempt) != p.Attempt:
		return fmt.Errorf("memdbstore: set progress of %s attempt %d by %s: it is %v in attempt %d: %w", p.ID, p.Attempt, p.Owner, r.state, r.attempt, store.ErrLeaseLost)
	}
	if s.progress == nil {
		s.progress = map[string]store.ProgressRecord{}
	}
	s.progress[p.ID] = store.ProgressRecord{InstanceID: p.ID, Attempt: p.Attempt, Fraction: p.Fraction, Message: p.Message, Time: p.Now.UTC()}
	return nil
}

// LookupProgress implements store.Progress.
func (s *Store) LookupProgress(ctx context.Context, ids []string) ([]*store.ProgressRecord, error) {
	if err := ctxErr(ctx, "lookup progress"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*store.ProgressRecord
	for _, id := range ids {
		if pr, ok := s.progress[id]; ok {
			out = append(out, &pr)
		}
	}
	return out, nil
}

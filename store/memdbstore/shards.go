package memdbstore

import (
	"context"
	"fmt"

	"github.com/jobkit/job/store"
)

// Wake implements store.Shards: one write that moves the RunAt of each
// Scheduled instance due after p.Now to p.Now.
func (s *Store) Wake(ctx context.Context, p *store.WakeParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("memdbstore: %w", err)
	}
	now := nanos(p.Now)
	woken := map[string]struct{}{}
	err := s.write(ctx, "wake", func() error {
		names := s.nameList()
		for _, id := range p.IDs {
			old := s.t.get(&s.probe, id)
			if old == nil || old.state != store.Scheduled || old.runAt <= now {
				continue
			}
			r := old.clone()
			r.runAt, r.updatedAt = now, now
			s.t.put(old, r)
			woken[names[r.qid]] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.notify(woken)
	return nil
}

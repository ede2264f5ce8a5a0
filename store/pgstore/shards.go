package pgstore

import (
	"context"
	"fmt"

	"github.com/jobkit/job/store"
)

// Wake implements store.Shards: one statement moves the RunAt of the
// Scheduled instances due later to p.Now and notifies their queues (the
// notification goes out at its commit). It changes no state, so it takes
// no history record and moves no counter.
func (s *Store) Wake(ctx context.Context, p *store.WakeParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("pgstore: wake: %w", err)
	}
	if len(p.IDs) == 0 {
		return ctx.Err()
	}
	now := nanos(p.Now)
	_, err := s.q(ctx).Exec(ctx, `WITH u AS (UPDATE `+s.t("instances")+` SET run_at = $3, updated_at = $3
		WHERE ns = $1 AND id = ANY($2::text[]) AND state = 2 AND run_at > $3 RETURNING queue)
	SELECT pg_notify($4, $5::text || d.queue) FROM (SELECT DISTINCT queue FROM u) AS d`,
		s.cfg.ns, p.IDs, now, s.channel, s.payload(""))
	return s.wrap(ctx, "wake", err)
}

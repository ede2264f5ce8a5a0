package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// SetProgress implements store.Progress. The progress row is written from
// a SELECT ... FOR SHARE of the instance's row that holds only while it is
// the caller's running attempt, so a report racing the attempt's Finish
// either lands before it or finds the lease gone.
func (s *Store) SetProgress(ctx context.Context, p *store.ProgressParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	var one int
	err := s.q(ctx).QueryRow(ctx, `INSERT INTO `+s.t("progress")+` (ns, id, attempt, fraction, message, at)
		SELECT i.ns, i.id, i.attempt, $5, $6, $7 FROM `+s.t("instances")+` i
		WHERE i.ns = $1 AND i.id = $2 AND i.state = 3 AND i.lease_owner = $3 AND i.attempt = $4
		FOR SHARE
		ON CONFLICT (ns, id) DO UPDATE SET attempt = excluded.attempt, fraction = excluded.fraction,
			message = excluded.message, at = excluded.at
		RETURNING 1`, s.cfg.ns, p.ID, p.Owner, clamp32(p.Attempt), p.Fraction, p.Message, nanos(p.Now)).Scan(&one)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return s.wrap(ctx, "set progress", err)
	}
	var st int16
	var att int32
	err = s.q(ctx).QueryRow(ctx, `SELECT state, attempt FROM `+s.t("instances")+` WHERE ns = $1 AND id = $2`, s.cfg.ns, p.ID).Scan(&st, &att)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgstore: set progress: %w: instance %s", store.ErrNotFound, p.ID)
	}
	if err != nil {
		return s.wrap(ctx, "set progress", err)
	}
	return fmt.Errorf("pgstore: set progress of %s attempt %d by %s: it is %v in attempt %d: %w", p.ID, p.Attempt, p.Owner, store.State(st), att, store.ErrLeaseLost)
}

// LookupProgress implements store.Progress.
func (s *Store) LookupProgress(ctx context.Context, ids []string) ([]*store.ProgressRecord, error) {
	if len(ids) == 0 {
		return nil, s.wrap(ctx, "lookup progress", ctx.Err())
	}
	rows, err := s.q(ctx).Query(ctx, `SELECT p.id, p.attempt, p.fraction, p.message, p.at
		FROM unnest($2::text[]) WITH ORDINALITY AS x(id, n)
		JOIN `+s.t("progress")+` p ON p.ns = $1 AND p.id = x.id
		ORDER BY x.n`, s.cfg.ns, ids)
	if err != nil {
		return nil, s.wrap(ctx, "lookup progress", err)
	}
	defer rows.Close()
	var out []*store.ProgressRecord
	for rows.Next() {
		var pr store.ProgressRecord
		var att int32
		var at int64
		if err := rows.Scan(&pr.InstanceID, &att, &pr.Fraction, &pr.Message, &at); err != nil {
			return out, s.wrap(ctx, "lookup progress", err)
		}
		pr.Attempt, pr.Time = int(att), fromNanos(at)
		out = append(out, &pr)
	}
	return out, s.wrap(ctx, "lookup progress", rows.Err())
}

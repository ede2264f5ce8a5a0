package pgstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// Rate limits (store.ClaimParams.RateLimits). A claim with rate limits
// that may match its queue is a limited claim (limits.go): under the
// namespace's limits lock it reads the server's clock (clock_timestamp(),
// after the lock is taken, so the claims the lock orders read times in
// the same order) and each limit's GCRA time, claims in rounds restricted
// to the kinds the limits leave room for, and writes the moved times back
// in the same transaction. A limit's time is a row of the documents table
// in the collection rateStateCollection, which no user collection can
// name (CheckCollection allows no dot), so no migration is needed; its
// name is the limit's kind and queue, its body the time in nanoseconds
// since the epoch of the server's clock.
const rateStateCollection = "jobkit.rate-state"

// EnforcesRateLimits implements store.RateLimitEnforcer.
func (s *Store) EnforcesRateLimits() bool { return true }

// rateLimitsOf returns the rate limits of p that may match an instance
// of p.Queue.
func rateLimitsOf(p *store.ClaimParams) []store.RateLimit {
	var out []store.RateLimit
	for _, l := range p.RateLimits {
		if l.Queue == "" || l.Queue == p.Queue {
			out = append(out, l)
		}
	}
	return out
}

// rateStateName is the document name of the state of the limit of (kind,
// queue).
func rateStateName(kind, queue string) string {
	return strconv.Itoa(len(kind)) + ":" + kind + "/" + queue
}

// rates is the state of a claim's rate limits, read under the lock.
type rates struct {
	ls    []store.RateLimit
	st    []store.RateState
	moved []bool
	now   int64 // the server's clock, ns
}

// serverNow reads the server's clock, in nanoseconds (microsecond
// precision).
func serverNow(ctx context.Context, tx pgx.Tx) (int64, error) {
	var us int64
	err := tx.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8`).Scan(&us)
	return us * 1000, err
}

// loadRates reads the state of the limits ls; the limits lock is held.
func (s *Store) loadRates(ctx context.Context, tx pgx.Tx, ls []store.RateLimit) (*rates, error) {
	r := &rates{ls: ls, st: make([]store.RateState, len(ls)), moved: make([]bool, len(ls))}
	if len(ls) == 0 {
		return r, nil
	}
	now, err := serverNow(ctx, tx)
	if err != nil {
		return nil, err
	}
	r.now = now
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = rateStateName(l.Kind, l.Queue)
	}
	rows, err := tx.Query(ctx, `SELECT name, body FROM `+s.t("documents")+` WHERE ns = $1 AND collection = $2 AND name = ANY($3)`, s.cfg.ns, rateStateCollection, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var body []byte
		if err := rows.Scan(&name, &body); err != nil {
			return nil, err
		}
		tat, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: rate limit state %q: %v", store.ErrCorrupt, name, err)
		}
		for i := range names {
			if names[i] == name {
				r.st[i].TAT = tat
			}
		}
	}
	return r, rows.Err()
}

// room returns how many instances of kind the limits let start now, and
// lowers *wait to the time until one may when none may.
func (r *rates) room(kind string, wait *time.Duration) int {
	room := math.MaxInt
	for i, l := range r.ls {
		if l.Kind != "" && l.Kind != kind {
			continue
		}
		n, w := r.st[i].Room(l, r.now)
		if n == 0 && (*wait == 0 || w < *wait) {
			*wait = w
		}
		room = min(room, n)
	}
	return room
}

// took counts a start of an instance of kind ("" for one whose kind is
// unknown: it counts in every limit).
func (r *rates) took(kind string) {
	for i, l := range r.ls {
		if kind == "" || l.Kind == "" || l.Kind == kind {
			r.st[i].Take(l, r.now)
			r.moved[i] = true
		}
	}
}

// saveRates writes the moved states back.
func (s *Store) saveRates(ctx context.Context, tx pgx.Tx, r *rates) error {
	for i, l := range r.ls {
		if r.moved[i] {
			if err := s.putRate(ctx, tx, l, r.st[i].TAT, r.now); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Store) putRate(ctx context.Context, tx pgx.Tx, l store.RateLimit, tat, now int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+s.t("documents")+` (ns, collection, name, body, version, created_at, updated_at) VALUES ($1, $2, $3, $4, 0, $5, $5)
		ON CONFLICT (ns, collection, name) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at`,
		s.cfg.ns, rateStateCollection, rateStateName(l.Kind, l.Queue), []byte(strconv.FormatInt(tat, 10)), now)
	return err
}

// DelayRateLimit implements store.RateLimitDelayer, on the server's clock,
// under the namespace's limits lock.
func (s *Store) DelayRateLimit(ctx context.Context, l store.RateLimit, d time.Duration) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("pgstore: delay rate limit: %w", err)
	}
	if d < 0 {
		return fmt.Errorf("pgstore: delay rate limit of %s: %w: negative delay %s", l.Scope(), store.ErrInvalid, d)
	}
	return s.write(ctx, "delay rate limit", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('jobkit-limits:' || $1, 0))`, s.cfg.ns); err != nil {
			return err
		}
		r, err := s.loadRates(ctx, tx, []store.RateLimit{l})
		if err != nil {
			return err
		}
		r.st[0].Delay(l, r.now, d)
		return s.putRate(ctx, tx, l, r.st[0].TAT, r.now)
	})
}

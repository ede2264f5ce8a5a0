package pgstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// EnforcesConcurrencyLimits implements store.LimitEnforcer: Claim
// enforces ClaimParams.Limits.
func (s *Store) EnforcesConcurrencyLimits() bool { return true }

// Concurrency limits (store.ClaimParams.Limits). A claim with limits that
// may match its queue runs in a transaction of its own that first takes
// the namespace's limits lock (a transaction-level advisory lock), then
// counts the running instances by queue and kind (the rows of the
// instances_running index: as many as attempts running), and then runs
// the ordinary claim statement in the same transaction, in rounds, each
// restricted to the kinds with room left and to at most the smallest room
// among them. The
// lock is held until the claim commits, so the next limited claim counts
// what this one took; an attempt that ends commits its own row change,
// and until then counts as running, which errs on the safe side. So a
// limit is never passed, and a slot comes back with whatever moves the
// attempt out of Processing, with nothing of its own to release.
// Claims without limits never take the lock.

// claimLimited is Claim for p with limits ls (those that may match
// p.Queue). It claims in rounds, each an ordinary claim statement without
// a ClaimSeq, and records the claim for p.ClaimSeq itself, once, with
// what every round took; a repeat (or a late call) is the ordinary
// statement's to answer.
func (s *Store) claimLimited(ctx context.Context, p *store.ClaimParams, ls []store.ConcurrencyLimit, rls []store.RateLimit) (*store.ClaimResult, error) {
	if p.ClaimSeq != 0 {
		if err := s.ensureClaimRecord(ctx, p.Owner); err != nil {
			return nil, s.wrap(ctx, "claim", err)
		}
	}
	now := nanos(p.Now)
	var res *store.ClaimResult
	err := s.write(ctx, "claim", func(tx pgx.Tx) error {
		res = &store.ClaimResult{}
		inner := WithTx(ctx, tx)
		if p.ClaimSeq != 0 {
			var seq, until int64
			err := tx.QueryRow(ctx, `SELECT seq, until FROM `+s.t("claims")+` WHERE ns = $1 AND owner = $2 FOR UPDATE`, s.cfg.ns, p.Owner).Scan(&seq, &until)
			if err != nil {
				return err
			}
			if until >= now && uint64(seq) >= p.ClaimSeq {
				q := *p
				q.Limits, q.RateLimits = nil, nil
				r, err := s.Claim(inner, &q) // a repeat or a late call
				if err != nil {
					return errStop{err}
				}
				res = r
				return nil
			}
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('jobkit-limits:' || $1, 0))`, s.cfg.ns); err != nil {
			return err
		}
		used, err := s.limitsUsed(ctx, tx, ls)
		if err != nil {
			return err
		}
		rates, err := s.loadRates(ctx, tx, rls) // ratelimit.go
		if err != nil {
			return err
		}
		kinds := p.Kinds
		if len(kinds) == 0 {
			if kinds, err = s.queueKinds(ctx, tx, p.Queue); err != nil {
				return err
			}
		}
		var ids []string
		var attempts []int32
		for n := 0; n < p.Limit; {
			allowed := make([]string, 0, len(kinds))
			want := p.Limit - n
			for _, k := range kinds {
				room := math.MaxInt
				for i, l := range ls {
					if l.Kind == "" || l.Kind == k {
						room = min(room, l.Max-used[i])
					}
				}
				if room <= 0 {
					res.Limited = true
					continue
				}
				if room = min(room, rates.room(k, &res.RetryAfter)); room == 0 {
					continue
				}
				allowed = append(allowed, k)
				want = min(want, room)
			}
			if len(allowed) == 0 {
				res.NextRunAt = time.Time{}
				break
			}
			q := *p
			q.Kinds, q.Limit, q.Limits, q.RateLimits, q.ClaimSeq = allowed, want, nil, nil, 0
			r, err := s.Claim(inner, &q)
			if err != nil {
				return errStop{err}
			}
			for _, in := range r.Instances {
				for i, l := range ls {
					if l.Kind == "" || l.Kind == in.Kind {
						used[i]++
					}
				}
				rates.took(in.Kind)
				ids, attempts = append(ids, in.ID), append(attempts, int32(in.Attempt))
			}
			for _, u := range r.Undecodable {
				for i := range used { // its kind is unknown: counted everywhere
					used[i]++
				}
				rates.took("")
				ids, attempts = append(ids, u.ID), append(attempts, int32(u.Attempt))
			}
			got := len(r.Instances) + len(r.Undecodable)
			res.Instances = append(res.Instances, r.Instances...)
			res.Undecodable = append(res.Undecodable, r.Undecodable...)
			res.NextRunAt = r.NextRunAt
			n += got
			if got < want {
				break // nothing more the limits let start
			}
		}
		if len(res.Instances)+len(res.Undecodable) == p.Limit {
			res.NextRunAt = time.Time{}
		}
		if err := s.saveRates(ctx, tx, rates); err != nil {
			return err
		}
		if p.ClaimSeq != 0 {
			if ids == nil {
				ids, attempts = []string{}, []int32{}
			}
			_, err := tx.Exec(ctx, `UPDATE `+s.t("claims")+` SET seq = $3::int8, until = $4, ids = $5, attempts = $6 WHERE ns = $1 AND owner = $2`,
				s.cfg.ns, p.Owner, int64(p.ClaimSeq), nanos(p.LeaseUntil), ids, attempts)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// limitsUsed counts, per limit of ls, the running instances it matches
// (the rows of the instances_running index).
func (s *Store) limitsUsed(ctx context.Context, tx pgx.Tx, ls []store.ConcurrencyLimit) ([]int, error) {
	used := make([]int, len(ls))
	rows, err := tx.Query(ctx, `SELECT queue, kind, count(*) FROM `+s.t("instances")+` WHERE ns = $1 AND state = 3 GROUP BY queue, kind`, s.cfg.ns)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var q, k string
		var n int64
		if err := rows.Scan(&q, &k, &n); err != nil {
			return nil, err
		}
		for i, l := range ls {
			if l.Matches(k, q) {
				used[i] += int(n)
			}
		}
	}
	return used, rows.Err()
}

// queueKinds returns the kinds the counters know in queue q, for a claim
// of any kind: the kinds a limit may hold back.
func (s *Store) queueKinds(ctx context.Context, tx pgx.Tx, q string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT kind FROM `+s.t("counts")+` WHERE ns = $1 AND queue = $2
		UNION SELECT kind FROM `+s.t("count_deltas")+` WHERE ns = $1 AND queue = $2`, s.cfg.ns, q)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("kinds of queue %s: %w", q, err)
	}
	slices.Sort(out)
	return out, nil
}

// limitsOf returns the limits of p that may match an instance of p.Queue.
func limitsOf(p *store.ClaimParams) []store.ConcurrencyLimit {
	var out []store.ConcurrencyLimit
	for _, l := range p.Limits {
		if l.Queue == "" || l.Queue == p.Queue {
			out = append(out, l)
		}
	}
	return out
}

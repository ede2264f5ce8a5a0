package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// PauseQueue implements store.QueueAdmin: the claim statement checks the
// flag, so the pause holds from the next claim on.
func (s *Store) PauseQueue(ctx context.Context, p *store.QueueParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("pgstore: pause queue: %w", err)
	}
	_, err := s.q(ctx).Exec(ctx, `INSERT INTO `+s.t("queues")+` (ns, name, paused) VALUES ($1, $2, true)
		ON CONFLICT (ns, name) DO UPDATE SET paused = true`, s.cfg.ns, p.Queue)
	return s.wrap(ctx, "pause queue", err)
}

// ResumeQueue implements store.QueueAdmin; the notification that wakes
// the queue's claimers goes out with the change.
func (s *Store) ResumeQueue(ctx context.Context, p *store.QueueParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("pgstore: resume queue: %w", err)
	}
	_, err := s.q(ctx).Exec(ctx, `WITH u AS (UPDATE `+s.t("queues")+` SET paused = false WHERE ns = $1 AND name = $2 AND paused RETURNING 1)
		SELECT pg_notify($3, $4) FROM u`, s.cfg.ns, p.Queue, s.channel, s.payload(p.Queue))
	return s.wrap(ctx, "resume queue", err)
}

// ListQueues implements store.QueueAdmin.
func (s *Store) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	rows, err := s.q(ctx).Query(ctx, `SELECT name, paused FROM `+s.t("queues")+` WHERE ns = $1 ORDER BY name COLLATE "C"`, s.cfg.ns)
	if err != nil {
		return nil, s.wrap(ctx, "list queues", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.QueueInfo, error) {
		var q store.QueueInfo
		err := r.Scan(&q.Name, &q.Paused)
		return q, err
	})
	if err != nil {
		return nil, s.wrap(ctx, "list queues", err)
	}
	if out == nil {
		out = []store.QueueInfo{}
	}
	return out, nil
}

// Counts implements store.Inspector from the counters and the changes
// transitions added to them since the last compaction (counters.go), in
// one snapshot: no walk of the instances.
func (s *Store) Counts(ctx context.Context, p *store.CountsParams) ([]store.GroupCount, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	// The Scheduled counter holds the Processing instances too (migration
	// 0011): the running rows, counted through instances_running (as many
	// as attempts running), are taken from it.
	rows, err := s.q(ctx).Query(ctx, `WITH run AS (SELECT queue, kind, count(*) AS n FROM `+s.t("instances")+`
			WHERE ns = $1 AND state = 3 AND ($2 = '' OR queue = $2) AND ($3 = '' OR kind = $3) GROUP BY queue, kind)
		SELECT queue, kind, state, sum(n)::int8 FROM (
			SELECT queue, kind, state, n FROM `+s.t("counts")+` WHERE ns = $1 AND ($2 = '' OR queue = $2) AND ($3 = '' OR kind = $3)
			UNION ALL
			SELECT queue, kind, state, n FROM `+s.t("count_deltas")+` WHERE ns = $1 AND ($2 = '' OR queue = $2) AND ($3 = '' OR kind = $3)
			UNION ALL
			SELECT queue, kind, 2::int2, -n FROM run
			UNION ALL
			SELECT queue, kind, 3::int2, n FROM run) AS a
		GROUP BY queue, kind, state
		ORDER BY queue COLLATE "C", kind COLLATE "C", state`, s.cfg.ns, p.Queue, p.Kind)
	if err != nil {
		return nil, s.wrap(ctx, "counts", err)
	}
	defer rows.Close()
	out := []store.GroupCount{}
	for rows.Next() {
		var q, k string
		var st int16
		var n int64
		if err := rows.Scan(&q, &k, &st, &n); err != nil {
			return nil, s.wrap(ctx, "counts", err)
		}
		if len(out) == 0 || out[len(out)-1].Queue != q || out[len(out)-1].Kind != k {
			out = append(out, store.GroupCount{Queue: q, Kind: k})
		}
		if g := &out[len(out)-1]; st > 0 && int(st) < len(g.States) {
			g.States[st] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "counts", err)
	}
	return out, nil
}

// Lag implements store.Inspector: per (queue, kind) seen, the first entry
// of the lag index (queue, kind, RunAt) of what is Scheduled.
func (s *Store) Lag(ctx context.Context, p *store.LagParams) (*store.LagResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	// Per group, one probe of the claim index per priority the queue
	// holds (see stmts.next).
	rows, err := s.q(ctx).Query(ctx, `WITH RECURSIVE g AS (SELECT DISTINCT queue, kind FROM (
				SELECT queue, kind FROM `+s.t("counts")+` WHERE ns = $1 AND ($2 = '' OR queue = $2) AND ($3 = '' OR kind = $3)
				UNION ALL
				SELECT queue, kind FROM `+s.t("count_deltas")+` WHERE ns = $1 AND ($2 = '' OR queue = $2) AND ($3 = '' OR kind = $3)) AS a),
		q AS (SELECT DISTINCT queue FROM g),
		p(queue, prio) AS (
			SELECT q.queue, (SELECT priority FROM `+s.t("instances")+` WHERE ns = $1 AND queue = q.queue AND state = 2 ORDER BY priority DESC LIMIT 1) FROM q
			UNION ALL
			SELECT p.queue, (SELECT priority FROM `+s.t("instances")+` WHERE ns = $1 AND queue = p.queue AND state = 2 AND priority < p.prio
				ORDER BY priority DESC LIMIT 1) FROM p WHERE p.prio IS NOT NULL)
		SELECT g.queue, g.kind, coalesce(min((SELECT i.run_at FROM `+s.t("instances")+` i
			WHERE i.ns = $1 AND i.queue = g.queue AND i.state = 2 AND i.priority = p.prio AND i.kind = g.kind AND i.run_at <= $4
			ORDER BY i.priority DESC, i.run_at, i.seq LIMIT 1)), 0)
		FROM g LEFT JOIN p ON p.queue = g.queue AND p.prio IS NOT NULL
		GROUP BY g.queue, g.kind`,
		s.cfg.ns, p.Queue, p.Kind, nanos(p.Now))
	if err != nil {
		return nil, s.wrap(ctx, "lag", err)
	}
	defer rows.Close()
	var b store.LagBuilder
	for rows.Next() {
		var q, k string
		var oldest int64
		if err := rows.Scan(&q, &k, &oldest); err != nil {
			return nil, s.wrap(ctx, "lag", err)
		}
		b.Add(q, k, fromNanos(oldest))
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "lag", err)
	}
	return b.Result(p.Now), nil
}

// pageNS names the store's namespace in page cursors.
func (s *Store) pageNS() string { return "pg:" + s.cfg.schema + "/" + s.cfg.ns }

// PageInstances implements store.Inspector.
func (s *Store) PageInstances(ctx context.Context, q *store.Query) (*store.InstancePage, error) {
	return store.PageInstances(ctx, s.pageNS(), s.LookupInstances, q)
}

// PageHistory implements store.Inspector.
func (s *Store) PageHistory(ctx context.Context, q *store.Query) (*store.HistoryPage, error) {
	return store.PageHistory(ctx, s.pageNS(), s.LookupHistory, q)
}

// PageLogs implements store.Inspector.
func (s *Store) PageLogs(ctx context.Context, q *store.Query) (*store.LogPage, error) {
	return store.PageLogs(ctx, s.pageNS(), s.LookupLogs, q)
}

// Retry implements store.Admin in one transaction: the rows are locked in
// ID order, each final one moves back to Scheduled.
func (s *Store) Retry(ctx context.Context, p *store.RetryParams) ([]store.AdminResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	var res []store.AdminResult
	err := s.write(ctx, "retry", func(tx pgx.Tx) error {
		res = make([]store.AdminResult, len(p.IDs))
		cur, bad, err := s.lockRows(ctx, tx, p.IDs)
		if err != nil {
			return err
		}
		f := &final{}
		changed := map[string]*store.Instance{}
		var order []*store.Instance
		msg := store.RetryMessage(p.Node)
		for i, id := range p.IDs {
			res[i].ID = id
			in := cur[id]
			switch {
			case bad[id] != nil:
				_, derr := bad[id].instance()
				res[i].Err = fmt.Errorf("pgstore: retry %s: %w", id, derr)
				continue
			case in == nil:
				res[i].Err = fmt.Errorf("pgstore: retry %s: %w", id, store.ErrNotFound)
				continue
			case !in.State.Final():
				res[i].Err = fmt.Errorf("pgstore: retry %s: it is %v; cancel it first or wait for it to finish: %w", id, in.State, store.ErrNotFinished)
				continue
			}
			f.move(in.Queue, in.Kind, in.State, store.Scheduled)
			in.State = store.Scheduled
			if p.ResetAttempts {
				in.Attempt = 0
			}
			in.RunAt, in.UpdatedAt = p.ReadyAt(), p.Now
			in.LeaseOwner, in.LeaseUntil, in.CancelRequested = "", time.Time{}, false
			in.Error, in.Result, in.FinishedAt = "", nil, time.Time{}
			f.hist(in.ID, in.Kind, in.Queue, store.Scheduled, in.Attempt, p.Now, p.Node, msg, nil)
			f.wakeQueue(in.Queue)
			if changed[id] == nil {
				order = append(order, in)
			}
			changed[id] = in
			res[i].State = store.Scheduled
		}
		if err := s.saveRows(ctx, tx, order); err != nil {
			return err
		}
		return s.apply(ctx, tx, f)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Delete implements store.Admin in one transaction: the instances, their
// history, logs and unique keys go in one statement.
func (s *Store) Delete(ctx context.Context, p *store.DeleteParams) ([]store.AdminResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	found := map[string]store.State{}
	err := s.write(ctx, "delete", func(tx pgx.Tx) error {
		clear(found)
		return s.removeWhere(ctx, tx, `SELECT id FROM `+s.t("instances")+` WHERE ns = $1 AND id = ANY($2::text[]) ORDER BY id FOR UPDATE`,
			[]any{s.cfg.ns, p.IDs}, &store.PruneResult{}, found)
	})
	if err != nil {
		return nil, err
	}
	res := make([]store.AdminResult, len(p.IDs))
	for i, id := range p.IDs {
		res[i].ID = id
		if st, ok := found[id]; ok {
			res[i].State = st
			delete(found, id) // an ID given twice: the second finds nothing
			continue
		}
		res[i].Err = fmt.Errorf("pgstore: delete %s: %w", id, store.ErrNotFound)
	}
	return res, nil
}

package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// clockSQL reads the database's clock as Unix nanoseconds: liveness is
// judged on it alone (see store.Nodes).
const clockSQL = `(extract(epoch FROM clock_timestamp()) * 1000000000)::int8`

// Heartbeat implements store.Nodes in one statement: the node's record
// is upserted with the database's clock, and records gone for longer
// than Retain are deleted (a dead node's only once its attempts are
// rescued).
func (s *Store) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: heartbeat: %w", err)
	}
	info := p.Node.Clone()
	info.Status, info.GoneAt, info.LastSeen, info.StoreSeen = 0, time.Time{}, p.Now, time.Time{}
	body, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("pgstore: heartbeat: encode node %s: %w", p.Node.ID, err)
	}
	status := store.NodeLive
	if p.Leaving {
		status = store.NodeLeft
	}
	var now int64
	var old *int16
	var a, b int64
	// The dead-node rescue that follows a heartbeat (the rescuer calls it
	// after each one) asks, with ref the node's store_seen this statement
	// sets, whether any live node is silent for longer than DeadAfter or
	// any dead node still holds attempts; the heartbeat answers that
	// question in the same statement, and when the answer is no the
	// rescue costs no statement (rescueMemo).
	s.quiet.Delete(p.Node.ID)
	var quiet bool
	err = s.q(ctx).QueryRow(ctx, s.heartbeatSQL(),
		s.cfg.ns, p.Node.ID, body, int16(status), nanos(p.Now), int64(p.RetainOrDefault()), int64(p.DeadAfter)).Scan(&now, &old, &a, &b, &quiet)
	if err != nil {
		return nil, s.wrap(ctx, "heartbeat", err)
	}
	if quiet && !p.Leaving {
		s.quiet.Store(p.Node.ID, rescueMemo{deadAfter: p.DeadAfter})
	}
	return &store.HeartbeatResult{StoreNow: fromNanos(now), WasDead: old != nil && store.NodeStatus(*old) == store.NodeDead}, nil
}

// deadHold is the SQL condition that a node declared dead still holds
// attempts. The instances are read only when a dead node exists (an
// uncorrelated EXISTS, which PostgreSQL runs once, before the scan): the
// running rows' owner has no index, so the scan reads every running row
// and, after many claims, the dead index entries of rows claimed since
// the last vacuum (some 470 buffers a heartbeat in a burn-down), once a
// second per node even though a dead node is rare.
func (s *Store) deadHold() string {
	return `EXISTS (SELECT 1 FROM ` + s.t("instances") + ` i
		WHERE EXISTS (SELECT 1 FROM ` + s.t("nodes") + ` WHERE ns = $1 AND status = 3)
			AND i.ns = $1 AND i.state = 3 AND i.lease_owner = ANY(ARRAY(SELECT id FROM ` + s.t("nodes") + ` WHERE ns = $1 AND status = 3)))`
}

// heartbeatSQL is Heartbeat's statement.
func (s *Store) heartbeatSQL() string {
	return `WITH now AS (SELECT ` + clockSQL + ` AS t),
		old AS (SELECT status FROM ` + s.t("nodes") + ` WHERE ns = $1 AND id = $2 FOR UPDATE),
		up AS (INSERT INTO ` + s.t("nodes") + ` AS n (ns, id, info, status, last_seen, store_seen, gone_at)
			SELECT $1, $2, $3, $4::int2, $5, now.t, CASE WHEN $4::int2 = 4 THEN now.t ELSE 0 END FROM now
			ON CONFLICT (ns, id) DO UPDATE SET info = excluded.info, status = excluded.status, last_seen = excluded.last_seen,
				store_seen = excluded.store_seen, gone_at = excluded.gone_at
			RETURNING 1),
		del AS (DELETE FROM ` + s.t("nodes") + ` AS n USING now
			WHERE n.ns = $1 AND n.id <> $2
			AND now.t - (CASE WHEN n.status = 1 THEN n.store_seen ELSE n.gone_at END) > $6
			AND NOT (n.status = 3 AND EXISTS (SELECT 1 FROM ` + s.t("instances") + ` i WHERE i.ns = $1 AND i.state = 3 AND i.lease_owner = n.id))
			RETURNING 1)
		SELECT now.t, (SELECT status FROM old), (SELECT count(*) FROM up), (SELECT count(*) FROM del),
			NOT EXISTS (SELECT 1 FROM ` + s.t("nodes") + ` n, now
				WHERE n.ns = $1 AND n.id <> $2 AND n.status = 1 AND now.t - n.store_seen > $7::int8)
			AND NOT ` + s.deadHold() + `
		FROM now`
}

// rescueMemo is what a node's last heartbeat found about the dead-node
// rescue that follows it: no live node silent for longer than deadAfter
// and no dead node holding attempts, as the rescue's own statement would
// find with the store_seen the heartbeat set as its reference. Another
// node's heartbeat since only makes that node less silent; a node another
// rescuer declared dead since has its attempts taken by that rescuer, or
// by the next rescue after a heartbeat if that one failed.
type rescueMemo struct {
	deadAfter time.Duration
}

// ListNodes implements store.Nodes.
func (s *Store) ListNodes(ctx context.Context, p *store.ListNodesParams) ([]*store.NodeInfo, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: list nodes: %w", err)
	}
	rows, err := s.q(ctx).Query(ctx, `SELECT id, info, status, last_seen, store_seen, gone_at, `+clockSQL+`
		FROM `+s.t("nodes")+` WHERE ns = $1 ORDER BY id`, s.cfg.ns)
	if err != nil {
		return nil, s.wrap(ctx, "list nodes", err)
	}
	defer rows.Close()
	out := []*store.NodeInfo{}
	for rows.Next() {
		var id string
		var body []byte
		var st int16
		var last, seen, gone, now int64
		if err := rows.Scan(&id, &body, &st, &last, &seen, &gone, &now); err != nil {
			return nil, s.wrap(ctx, "list nodes", err)
		}
		n := &store.NodeInfo{}
		if err := json.Unmarshal(body, n); err != nil {
			n = &store.NodeInfo{} // an undecodable record still lists the node
		}
		n.ID, n.LastSeen, n.StoreSeen, n.GoneAt = id, fromNanos(last), fromNanos(seen), fromNanos(gone)
		n.Status = store.NodeStatus(st)
		if n.Status == store.NodeLive && time.Duration(now-seen) > p.DeadAfter {
			n.Status = store.NodeStale
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "list nodes", err)
	}
	return out, nil
}

// RescueNodes implements store.Nodes. One UPDATE declares the silent
// nodes dead (PostgreSQL re-checks its condition on a row another call
// changed meanwhile, so exactly one call declares each); the attempts of
// dead nodes, when there are any, are then taken in a transaction with
// SKIP LOCKED, so concurrent rescuers split them.
func (s *Store) RescueNodes(ctx context.Context, p *store.RescueNodesParams) (*store.RescueNodesResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: rescue nodes: %w", err)
	}
	res := &store.RescueNodesResult{}
	// Right after a heartbeat of p.Node that found nothing to do for this
	// DeadAfter (see Heartbeat): nothing, without a statement. The memo is
	// taken, so a second call before the next heartbeat looks again.
	if m, ok := s.quiet.LoadAndDelete(p.Node); ok && m.(rescueMemo).deadAfter == p.DeadAfter {
		res.Dead = []string{}
		return res, nil
	}
	// The declaration, in one statement of its own, which also says
	// whether any dead node still holds attempts: the rule (no node died,
	// none left attempts) costs that one statement, not a transaction of
	// four. Nodes declared dead stay so if the rescue that follows fails:
	// the next call takes their attempts.
	var dead bool
	err := s.q(ctx).QueryRow(ctx, `WITH now AS (SELECT `+clockSQL+` AS t),
			ref AS (SELECT least(now.t, coalesce((SELECT store_seen FROM `+s.t("nodes")+` WHERE ns = $1 AND id = $2 AND status = 1), now.t)) AS r, now.t FROM now),
			d AS (UPDATE `+s.t("nodes")+` n SET status = 3, gone_at = ref.t FROM ref
				WHERE n.ns = $1 AND n.id <> $2 AND n.status = 1 AND ref.r - n.store_seen > $3
				RETURNING n.id)
		SELECT coalesce((SELECT array_agg(id) FROM d), '{}'), `+s.deadHold(),
		s.cfg.ns, p.Node, int64(p.DeadAfter)).Scan(&res.Dead, &dead)
	if err != nil {
		return nil, s.wrap(ctx, "rescue nodes", err)
	}
	if len(res.Dead) == 0 && !dead {
		res.Dead = []string{}
		return res, nil
	}
	err = s.write(ctx, "rescue nodes", func(tx pgx.Tx) error {
		res.Rescued = nil
		rows, err := tx.Query(ctx, `SELECT `+instColsOf("i")+` FROM `+s.t("instances")+` i
			WHERE i.ns = $1 AND i.state = 3 AND i.lease_owner = ANY(ARRAY(SELECT id FROM `+s.t("nodes")+` WHERE ns = $1 AND status = 3))
			LIMIT $2 FOR UPDATE OF i SKIP LOCKED`, s.cfg.ns, p.Limit)
		if err != nil {
			return err
		}
		ins, _, err := scanInstances(rows)
		if ins == nil && err != nil {
			return err
		}
		f := &final{}
		for _, in := range ins {
			msg := fmt.Sprintf("node %s stopped heartbeating: declared dead and its attempt rescued", in.LeaseOwner)
			rescueMove(f, in, msg, p.Now, p.Node)
		}
		if err := s.saveRows(ctx, tx, ins); err != nil {
			return err
		}
		res.Rescued = ins
		return s.apply(ctx, tx, f)
	})
	if err != nil {
		return nil, err
	}
	if res.Dead == nil {
		res.Dead = []string{}
	}
	return res, nil
}

package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// where builds a WHERE clause from conditions and their arguments.
type where struct {
	conds []string
	args  []any
}

// add appends a condition; each "?" in cond becomes the next argument.
func (w *where) add(cond string, args ...any) {
	for _, a := range args {
		w.args = append(w.args, a)
		cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(w.args)), 1)
	}
	w.conds = append(w.conds, cond)
}

func (w *where) String() string { return strings.Join(w.conds, " AND ") }

func limitClause(n int) string {
	if n <= 0 {
		return ""
	}
	return " LIMIT " + strconv.Itoa(n)
}

func states16(states []store.State) []int16 {
	out := make([]int16, len(states))
	for i, st := range states {
		out[i] = int16(st)
	}
	return out
}

// LookupInstances implements store.History.
func (s *Store) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: lookup instances: %w", err)
	}
	w := &where{}
	w.add("ns = ?", s.cfg.ns)
	if q.InstanceID != "" {
		w.add("id = ?", q.InstanceID)
	}
	if q.Kind != "" {
		w.add("kind = ?", q.Kind)
	}
	if q.Queue != "" {
		w.add("queue = ?", q.Queue)
	}
	if q.Parent != "" {
		w.add("parent = ?", q.Parent) // instances_parent
	}
	if len(q.IDs) > 0 {
		w.add("id = ANY(?::text[])", q.IDs) // instances_pkey
	}
	if len(q.States) > 0 {
		w.add("state = ANY(?::int2[])", states16(q.States))
	}
	if !q.Since.IsZero() {
		w.add("created_at >= ?", nanos(q.Since))
	}
	if !q.Until.IsZero() {
		w.add("created_at < ?", nanos(q.Until))
	}
	rows, err := s.q(ctx).Query(ctx, `SELECT `+instCols+` FROM `+s.t("instances")+` WHERE `+w.String()+
		` ORDER BY created_at DESC, seq DESC`+limitClause(q.Limit), w.args...)
	if err != nil {
		return nil, s.wrap(ctx, "lookup instances", err)
	}
	out, _, err := scanInstances(rows)
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return nil, s.wrap(ctx, "lookup instances", err)
	}
	if out == nil {
		out = []*store.Instance{}
	}
	if err != nil {
		return out, fmt.Errorf("pgstore: lookup instances: %w", err)
	}
	return out, nil
}

// LookupHistory implements store.History. Query.Queue is ignored, as the
// contract says.
func (s *Store) LookupHistory(ctx context.Context, q *store.Query) ([]*store.HistoryRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: lookup history: %w", err)
	}
	// The records are in six places (see feedOnce): history rows (their
	// own record and the Created record a row may hold), the Processing
	// records of finished attempts (in the outcome's row, proc_pos), those
	// of running attempts (on the instance row; migration 0008), the
	// Created and Scheduled records of enqueues (rows of enqueued, one
	// pair per instance, migration 0012; read as a history row holding a
	// Created record, at position Seq), and the outcome and Processing
	// record of the attempt that ended an instance, on its row (fin_pos,
	// migration 0013). Each place is read in (time, position) order up to
	// the limit, and the union cut to it.
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	ns := arg(s.cfg.ns)
	// Finished instance rows holding their last attempt's records
	// (migration 0013): the outcome (fin) and the Processing record
	// (finProc).
	var own, done, running, enq, fin, finProc []string
	own = append(own, "ns = "+ns)
	done = append(done, "ns = "+ns, "proc_pos > 0")
	running = append(running, "ns = "+ns, "state = 3", "proc_pos > 0")
	fin = append(fin, "ns = "+ns, "state >= 4", "fin_pos > 0")
	finProc = append(finProc, "ns = "+ns, "state >= 4", "fin_pos > 0", "proc_pos > 0")
	// A pair of enqueued is there while its instance is (its ID not
	// NULL) and retention left its Scheduled record (2o-1 >= cut); its
	// Created record is there when 2o-2 >= cut.
	enq = append(enq, "e.ns = "+ns, "r.id IS NOT NULL", "2 * r.o - 1 >= e.cut")
	enqFrom := s.t("enqueued") + ` e, LATERAL unnest(e.seqs, e.ids, e.kinds) WITH ORDINALITY AS r(seq, id, kind, o)`
	if q.InstanceID != "" {
		v := arg(q.InstanceID)
		own, done, running = append(own, "instance_id = "+v), append(done, "instance_id = "+v), append(running, "id = "+v)
		fin, finProc = append(fin, "id = "+v), append(finProc, "id = "+v)
		// The instance row names its enqueue's row.
		enqFrom = s.t("instances") + ` i JOIN ` + s.t("enqueued") + ` e ON e.ns = i.ns AND e.last = i.enq_last,
			LATERAL unnest(e.seqs, e.ids, e.kinds) WITH ORDINALITY AS r(seq, id, kind, o)`
		enq = append(enq, "i.ns = "+ns, "i.id = "+v, "r.seq = i.seq")
	}
	if q.Kind != "" {
		v := arg(q.Kind)
		own, done, running, enq = append(own, "kind = "+v), append(done, "kind = "+v), append(running, "kind = "+v), append(enq, "r.kind = "+v)
		fin, finProc = append(fin, "kind = "+v), append(finProc, "kind = "+v)
	}
	procs := len(q.States) == 0 || slices.Contains(q.States, store.Processing)
	enqueues := len(q.States) == 0 || slices.Contains(q.States, store.Created) || slices.Contains(q.States, store.Scheduled)
	if len(q.States) > 0 {
		// A row holding a Created record (migration 0007) matches when
		// either of its records does.
		v := arg(states16(q.States))
		own = append(own, "(state = ANY("+v+"::int2[]) OR created AND 1 = ANY("+v+"::int2[]))")
		enq = append(enq, "(2 = ANY("+v+"::int2[]) OR 2 * r.o - 2 >= e.cut AND 1 = ANY("+v+"::int2[]))")
		fin = append(fin, "state = ANY("+v+"::int2[])")
	}
	if !q.Since.IsZero() {
		v := arg(nanos(q.Since))
		own, done, running, enq = append(own, "t >= "+v), append(done, "proc_t >= "+v), append(running, "proc_t >= "+v), append(enq, "e.t >= "+v)
		fin, finProc = append(fin, "finished_at >= "+v), append(finProc, "proc_t >= "+v)
	}
	if !q.Until.IsZero() {
		v := arg(nanos(q.Until))
		own, done, running, enq = append(own, "t < "+v), append(done, "proc_t < "+v), append(running, "proc_t < "+v), append(enq, "e.t < "+v)
		fin, finProc = append(fin, "finished_at < "+v), append(finProc, "proc_t < "+v)
	}
	// LIMIT counts rows; each holds at least one matching record, so the
	// rows read hold at least the records asked for.
	lim := limitClause(q.Limit)
	sql := `(SELECT pos, created, instance_id, kind, state, attempt, t, node, error, result FROM ` + s.t("history") +
		` WHERE ` + strings.Join(own, " AND ") + ` ORDER BY t, pos` + lim + `)`
	if procs {
		sql += ` UNION ALL (SELECT proc_pos, false, instance_id, kind, 3::int2, attempt, proc_t, coalesce(proc_node, node), '', NULL::bytea FROM ` +
			s.t("history") + ` WHERE ` + strings.Join(done, " AND ") + ` ORDER BY proc_t, proc_pos` + lim + `)
		UNION ALL (SELECT proc_pos, false, id, kind, 3::int2, attempt, proc_t, coalesce(lease_owner, ''), '', NULL::bytea FROM ` +
			s.t("instances") + ` WHERE ` + strings.Join(running, " AND ") + ` ORDER BY proc_t, proc_pos` + lim + `)
		UNION ALL (SELECT proc_pos, false, id, kind, 3::int2, attempt, proc_t, coalesce(fin_node, ''), '', NULL::bytea FROM ` +
			s.t("instances") + ` WHERE ` + strings.Join(finProc, " AND ") + ` ORDER BY proc_t, proc_pos` + lim + `)`
	}
	sql += ` UNION ALL (SELECT fin_pos, false, id, kind, state, attempt, finished_at, coalesce(fin_node, ''), error, result FROM ` +
		s.t("instances") + ` WHERE ` + strings.Join(fin, " AND ") + ` ORDER BY finished_at, fin_pos` + lim + `)`
	if enqueues {
		sql += ` UNION ALL (SELECT r.seq, 2 * r.o - 2 >= e.cut, r.id, r.kind, 2::int2, 0, e.t, e.node, '', NULL::bytea FROM ` +
			enqFrom + ` WHERE ` + strings.Join(enq, " AND ") + ` ORDER BY e.t, r.seq` + lim + `)`
	}
	rows, err := s.q(ctx).Query(ctx, `SELECT * FROM (`+sql+`) AS r ORDER BY t, pos`+lim, args...)
	if err != nil {
		return nil, s.wrap(ctx, "lookup history", err)
	}
	out := []*store.HistoryRecord{}
	var bad []string
	defer rows.Close()
	want := func(st store.State) bool { return len(q.States) == 0 || slices.Contains(q.States, st) }
	for rows.Next() {
		var h store.HistoryRecord
		var pos, t int64
		var created bool
		var st int16
		var attempt int32
		if err := rows.Scan(&pos, &created, &h.InstanceID, &h.Kind, &st, &attempt, &t, &h.Node, &h.Error, &h.Result); err != nil {
			return nil, s.wrap(ctx, "lookup history", err)
		}
		h.State, h.Attempt, h.Time, h.Seq = store.State(st), int(attempt), fromNanos(t), uint64(recNum(pos, false))
		if created && want(store.Created) {
			out = append(out, &store.HistoryRecord{InstanceID: h.InstanceID, Kind: h.Kind, State: store.Created,
				Time: h.Time, Node: h.Node, Seq: uint64(recNum(pos, true))})
		}
		if !h.State.Valid() {
			bad = append(bad, fmt.Sprintf("%s#%d", h.InstanceID, pos))
			continue
		}
		if want(h.State) {
			out = append(out, &h)
		}
	}
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "lookup history", err)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("pgstore: lookup history: records %s have no valid state, left out: %w", strings.Join(bad, ", "), store.ErrCorrupt)
	}
	return out, nil
}

// AppendLogs implements store.Logs in one statement.
func (s *Store) AppendLogs(ctx context.Context, recs []*store.LogRecord) error {
	if len(recs) == 0 {
		return nil
	}
	n := len(recs)
	id, kind, node, msg := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	att := make([]int32, n)
	lvl := make([]int16, n)
	t := make([]int64, n)
	for i, l := range recs {
		if err := l.Validate(); err != nil {
			return err
		}
		id[i], kind[i], node[i], msg[i] = l.InstanceID, l.Kind, l.Node, l.Message
		att[i], lvl[i], t[i] = clamp32(l.Attempt), int16(l.Level), nanos(l.Time)
	}
	_, err := s.q(ctx).Exec(ctx, `INSERT INTO `+s.t("logs")+` (ns, instance_id, kind, attempt, level, t, node, message)
		SELECT $1, x.id, x.kind, x.attempt, x.level, x.t, x.node, x.msg
		FROM unnest($2::text[], $3::text[], $4::int4[], $5::int2[], $6::int8[], $7::text[], $8::text[])
			WITH ORDINALITY AS x(id, kind, attempt, level, t, node, msg, o)
		ORDER BY x.o`, s.cfg.ns, id, kind, att, lvl, t, node, msg)
	return s.wrap(ctx, "append logs", err)
}

// LookupLogs implements store.Logs.
func (s *Store) LookupLogs(ctx context.Context, q *store.Query) ([]*store.LogRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: lookup logs: %w", err)
	}
	w := &where{}
	w.add("ns = ?", s.cfg.ns)
	if q.InstanceID != "" {
		w.add("instance_id = ?", q.InstanceID)
	}
	if q.Kind != "" {
		w.add("kind = ?", q.Kind)
	}
	if len(q.Levels) > 0 {
		lv := make([]int16, len(q.Levels))
		for i, l := range q.Levels {
			lv[i] = int16(l)
		}
		w.add("level = ANY(?::int2[])", lv)
	}
	if !q.Since.IsZero() {
		w.add("t >= ?", nanos(q.Since))
	}
	if !q.Until.IsZero() {
		w.add("t < ?", nanos(q.Until))
	}
	rows, err := s.q(ctx).Query(ctx, `SELECT pos, instance_id, kind, attempt, level, t, node, message FROM `+s.t("logs")+
		` WHERE `+w.String()+` ORDER BY t, pos`+limitClause(q.Limit), w.args...)
	if err != nil {
		return nil, s.wrap(ctx, "lookup logs", err)
	}
	defer rows.Close()
	out := []*store.LogRecord{}
	for rows.Next() {
		var l store.LogRecord
		var pos, t int64
		var att int32
		var lvl int16
		if err := rows.Scan(&pos, &l.InstanceID, &l.Kind, &att, &lvl, &t, &l.Node, &l.Message); err != nil {
			return nil, s.wrap(ctx, "lookup logs", err)
		}
		l.Attempt, l.Level, l.Time, l.Seq = int(att), store.LogLevel(lvl), fromNanos(t), uint64(pos)
		out = append(out, &l)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "lookup logs", err)
	}
	return out, nil
}

// DefaultPruneLimit is how many records one Prune removes per rule when
// PruneParams.Limit is 0.
const DefaultPruneLimit = 1000

// Prune implements store.Pruner. Each rule removes at most Limit records
// in one short transaction, oldest first, taking rows other calls hold
// with SKIP LOCKED out of the batch.
func (s *Store) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = DefaultPruneLimit
	}
	res := &store.PruneResult{}
	inst := s.t("instances")
	if !p.FinishedBefore.IsZero() {
		err := s.write(ctx, "prune", func(tx pgx.Tx) error {
			return s.removeWhere(ctx, tx, `SELECT id FROM `+inst+` WHERE ns = $1 AND state >= 4 AND finished_at < $2
				ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED`, []any{s.cfg.ns, nanos(p.FinishedBefore), limit}, res, nil)
		})
		if err != nil {
			return nil, err
		}
	}
	if p.KeepFinished > 0 {
		err := s.write(ctx, "prune", func(tx pgx.Tx) error {
			return s.removeWhere(ctx, tx, `SELECT id FROM `+inst+` WHERE ns = $1 AND state >= 4
				ORDER BY finished_at DESC, seq DESC OFFSET $2 LIMIT $3 FOR UPDATE SKIP LOCKED`, []any{s.cfg.ns, p.KeepFinished, limit}, res, nil)
		})
		if err != nil {
			return nil, err
		}
	}
	if !p.HistoryBefore.IsZero() {
		err := s.write(ctx, "prune", func(tx pgx.Tx) error {
			var n, top int64
			var topHx string
			// Limit counts records, and a row holds two when it holds a
			// Created record (migration 0007) or its attempt's Processing
			// record (0008), the older of the two: the oldest rows whose
			// records fit are deleted; when the limit ends inside such a
			// row, its older record alone is removed (created or proc_pos
			// cleared). Rows go by their own record's time, so a
			// Processing record stays as long as its attempt's outcome,
			// and a running attempt's record (on its instance row) until
			// the attempt ends. The floor is the newest row touched in the
			// feed's order (hx, pos).
			// The pairs of enqueued rows (migration 0012) go the same
			// way, by (time, Seq): a pair is read as a row holding two
			// records, and removing records from the front of a row's
			// pairs raises its cut; a row none of whose pairs is left
			// goes. So do the records a finished instance row holds
			// (migration 0013): by its outcome's time, both cleared, or
			// its Processing record alone.
			h, en := s.t("history"), s.t("enqueued")
			err := tx.QueryRow(ctx, `WITH c AS (SELECT src, hx, pos, last, o, id, two, sum(CASE WHEN two THEN 2 ELSE 1 END) OVER (ORDER BY t, pos) AS acc
					FROM ((SELECT 0 AS src, hx, pos, t, 0::int8 AS last, 0::int8 AS o, NULL::text AS id, created OR coalesce(proc_pos, 0) > 0 AS two FROM `+h+`
							WHERE ns = $1 AND t < $2 ORDER BY t, pos LIMIT $3)
						UNION ALL
						(SELECT 1, e.hx, r.seq, e.t, e.last, r.o, NULL, 2 * r.o - 2 >= e.cut
							FROM `+en+` e, LATERAL unnest(e.seqs, e.ids) WITH ORDINALITY AS r(seq, id, o)
							WHERE e.ns = $1 AND e.t < $2 AND r.id IS NOT NULL AND 2 * r.o - 1 >= e.cut ORDER BY e.t, r.seq LIMIT $3)
						UNION ALL
						(SELECT 2, hx, fin_pos, finished_at, 0, 0, id, coalesce(proc_pos, 0) > 0 FROM `+s.t("instances")+`
							WHERE ns = $1 AND state >= 4 AND fin_pos > 0 AND finished_at < $2 ORDER BY finished_at, fin_pos LIMIT $3)) AS o),
				d AS (DELETE FROM `+h+` WHERE ns = $1 AND (hx, pos) IN (SELECT hx, pos FROM c WHERE src = 0 AND acc <= $3)
					RETURNING hx, pos, created OR coalesce(proc_pos, 0) > 0 AS two),
				u AS (UPDATE `+h+` SET created = false, proc_pos = NULL, proc_t = NULL, proc_node = NULL, proc_hx = NULL
					WHERE ns = $1 AND (hx, pos) IN (SELECT hx, pos FROM c WHERE src = 0 AND two AND acc = $3 + 1) RETURNING hx, pos),
				p AS (SELECT hx, pos, last, CASE WHEN acc <= $3 THEN 2 * o ELSE 2 * o - 1 END AS cut,
						CASE WHEN acc <= $3 AND two THEN 2 ELSE 1 END AS n
					FROM c WHERE src = 1 AND (acc <= $3 OR two AND acc = $3 + 1)),
				ec AS (UPDATE `+en+` e SET cut = g.cut FROM (SELECT last, max(cut) AS cut FROM p GROUP BY last) AS g
					WHERE e.ns = $1 AND e.last = g.last RETURNING 1),
				f AS (SELECT hx, pos, id, acc <= $3 AS whole, CASE WHEN acc <= $3 AND two THEN 2 ELSE 1 END AS n
					FROM c WHERE src = 2 AND (acc <= $3 OR two AND acc = $3 + 1)),
				fu AS (UPDATE `+s.t("instances")+` i SET fin_pos = CASE WHEN f.whole THEN NULL ELSE i.fin_pos END,
						fin_node = CASE WHEN f.whole THEN NULL ELSE i.fin_node END, proc_pos = NULL, proc_t = NULL, proc_hx = NULL
					FROM f WHERE i.ns = $1 AND i.id = f.id RETURNING 1),
				z AS (SELECT hx, pos FROM d UNION ALL SELECT hx, pos FROM u UNION ALL SELECT hx, pos FROM p UNION ALL SELECT hx, pos FROM f
					ORDER BY hx DESC, pos DESC LIMIT 1)
				SELECT (SELECT count(*) + count(*) FILTER (WHERE two) FROM d) + (SELECT count(*) FROM u) + (SELECT coalesce(sum(n), 0) FROM p)
						+ (SELECT coalesce(sum(n), 0) FROM f) + 0 * (SELECT count(*) FROM ec) + 0 * (SELECT count(*) FROM fu),
					coalesce((SELECT hx FROM z), '0')::text, coalesce((SELECT pos FROM z), 0)`,
				s.cfg.ns, nanos(p.HistoryBefore), limit).Scan(&n, &topHx, &top)
			if err != nil {
				return err
			}
			// The rows whose pairs are all gone (pruned, or removed with
			// their instances).
			if _, err := tx.Exec(ctx, `DELETE FROM `+en+` e WHERE ns = $1 AND t < $2 AND NOT EXISTS (
				SELECT 1 FROM unnest(e.ids) WITH ORDINALITY AS r(id, o) WHERE r.id IS NOT NULL AND 2 * r.o - 1 >= e.cut)`,
				s.cfg.ns, nanos(p.HistoryBefore)); err != nil {
				return err
			}
			res.History += int(n)
			return s.raiseFloor(ctx, tx, topHx, top)
		})
		if err != nil {
			return nil, err
		}
	}
	if !p.LogsBefore.IsZero() {
		var n int64
		err := s.q(ctx).QueryRow(ctx, `WITH d AS (DELETE FROM `+s.t("logs")+` WHERE ns = $1 AND pos IN (
				SELECT pos FROM `+s.t("logs")+` WHERE ns = $1 AND t < $2 ORDER BY t, pos LIMIT $3) RETURNING 1)
			SELECT count(*) FROM d`, s.cfg.ns, nanos(p.LogsBefore), limit).Scan(&n)
		if err != nil {
			return nil, s.wrap(ctx, "prune", err)
		}
		res.Logs += int(n)
	}
	return res, nil
}

// raiseFloor records that history up to the row at (hx, pos), in the
// feed's order, was removed: event cursors before it have expired.
func (s *Store) raiseFloor(ctx context.Context, tx pgx.Tx, hx string, pos int64) error {
	if pos == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+s.t("meta")+` AS m (ns, events_floor_hx, events_floor) VALUES ($1, $2::text::xid8, $3)
		ON CONFLICT (ns) DO UPDATE SET events_floor_hx = excluded.events_floor_hx, events_floor = excluded.events_floor
		WHERE (excluded.events_floor_hx, excluded.events_floor) > (m.events_floor_hx, m.events_floor)`, s.cfg.ns, hx, pos)
	return err
}

// removeWhere deletes the instances whose IDs sel selects (locking
// them), with their history (their pairs in enqueued rows cleared,
// migration 0012; the records a finished row holds, 0013, counted), logs
// and unique keys, moving their counters.
// found, when not nil, receives the state each removed instance was in;
// when nil (a prune), the removed history expires the event cursors
// before it. The rows are locked by a statement of their own, so the
// delete's snapshot, taken after, sees every history record written
// before the lock.
func (s *Store) removeWhere(ctx context.Context, tx pgx.Tx, sel string, args []any, res *store.PruneResult, found map[string]store.State) error {
	rows, err := tx.Query(ctx, sel, args...)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		return err
	}
	q := `WITH d AS (DELETE FROM ` + s.t("instances") + ` WHERE ns = $1 AND id = ANY($2::text[])
			RETURNING id, seq, queue, kind, state, unique_key, enq_last, hx, fin_pos, state >= 4 AND fin_pos > 0 AS fin, proc_pos > 0 AS two),
		ep AS (SELECT e.last, e.hx, r.seq AS pos, r.o, 2 * r.o - 2 >= e.cut AS two
			FROM ` + s.t("enqueued") + ` e JOIN d ON e.ns = $1 AND e.last = d.enq_last,
				LATERAL unnest(e.seqs, e.ids) WITH ORDINALITY AS r(seq, id, o)
			WHERE r.seq = d.seq AND r.id IS NOT NULL AND 2 * r.o - 1 >= e.cut),
		eu AS (UPDATE ` + s.t("enqueued") + ` e SET ids = ARRAY(SELECT CASE WHEN x.o = ANY(g.os) THEN NULL ELSE x.id END
				FROM unnest(e.ids) WITH ORDINALITY AS x(id, o) ORDER BY x.o)
			FROM (SELECT last, array_agg(o) AS os FROM ep GROUP BY last) AS g WHERE e.ns = $1 AND e.last = g.last RETURNING 1),
		k AS (DELETE FROM ` + s.t("unique_keys") + ` u WHERE u.ns = $1
			AND u.key = ANY(ARRAY(SELECT unique_key FROM d WHERE unique_key IS NOT NULL)) AND u.id = ANY($2::text[]) RETURNING 1),
		h AS (DELETE FROM ` + s.t("history") + ` h WHERE h.ns = $1 AND h.instance_id = ANY($2::text[])
			RETURNING h.hx, h.pos, h.created OR coalesce(h.proc_pos, 0) > 0 AS two),
		top AS (SELECT hx, pos FROM h UNION ALL SELECT hx, pos FROM ep UNION ALL SELECT hx, fin_pos FROM d WHERE fin
			ORDER BY hx DESC, pos DESC LIMIT 1),
		lg AS (DELETE FROM ` + s.t("logs") + ` l WHERE l.ns = $1 AND l.instance_id = ANY($2::text[]) RETURNING 1)
		SELECT id, queue, kind, state, (SELECT count(*) + count(*) FILTER (WHERE two) FROM h)
				+ (SELECT count(*) + count(*) FILTER (WHERE two) FROM ep) + 0 * (SELECT count(*) FROM eu)
				+ (SELECT count(*) + count(*) FILTER (WHERE two) FROM d WHERE fin),
			coalesce((SELECT hx FROM top), '0')::text, coalesce((SELECT pos FROM top), 0),
			(SELECT count(*) FROM lg), (SELECT count(*) FROM k) FROM d`
	rows, err = tx.Query(ctx, q, s.cfg.ns, ids)
	if err != nil {
		return err
	}
	f := &final{}
	var hist, top, logs int64
	var topHx string
	for rows.Next() {
		var id, queue, kind string
		var st int16
		var k int64
		if err := rows.Scan(&id, &queue, &kind, &st, &hist, &topHx, &top, &logs, &k); err != nil {
			rows.Close()
			return err
		}
		res.Instances++
		f.move(queue, kind, store.State(st), 0)
		if found != nil {
			found[id] = store.State(st)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	res.History += int(hist)
	res.Logs += int(logs)
	if found == nil {
		if err := s.raiseFloor(ctx, tx, topHx, top); err != nil {
			return err
		}
	}
	return s.apply(ctx, tx, f)
}

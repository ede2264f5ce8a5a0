package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// stmts caches the statements of a schema, built once.
type stmts struct {
	enqueue, claim, next, finish, finishTID, update, renew, lockRows string
}

var stmtCache sync.Map // quoted schema -> *stmts

func (s *Store) stmt() *stmts {
	if v, ok := stmtCache.Load(s.cfg.quoted); ok {
		return v.(*stmts)
	}
	inst := s.t("instances")
	st := &stmts{}
	// The enqueue: one statement inserts the instances (their unique
	// keys taken before), skipping IDs stored already, registers their queues,
	// appends their Created and Scheduled records (one row of enqueued for
	// the statement, migration 0012: the Seqs are taken first, in batch
	// order, so the instance rows can name that row by its key, the
	// greatest of them; the instance rows and that row take the
	// transaction's id as hx by default, migration 0010), adds
	// their counter changes and notifies their queues. It locks nothing
	// but its own new rows (and a queue row when it brings the queue or a
	// priority the queue has not had).
	st.enqueue = `WITH x AS MATERIALIZED (SELECT o.*, nextval('` + strings.ReplaceAll(s.t("seq"), "'", "''") + `') AS seq FROM (
		SELECT * FROM unnest($3::text[], $4::text[], $5::text[], $6::bytea[], $7::int8[], $8::int8[], $9::int4[],
		$10::int8[], $11::int8[], $12::text[], $16::text[], $17::text[], $18::int8[], $19::text[], $20::int4[], $21::int4[], $22::text[])
		WITH ORDINALITY AS x(id, kind, queue, args, priority, run_at, max_retries, timeout, created, labels, md, ukey, uuntil,
			parent, shard_index, shard_count, task, o) ORDER BY x.o) AS o),
lk AS MATERIALIZED (SELECT max(seq) AS last FROM x),
ins AS (INSERT INTO ` + inst + ` (ns, id, seq, kind, queue, args, priority, run_at, state, max_retries, timeout,
		unique_key, unique_until, created_at, updated_at, labels, metadata, parent, shard_index, shard_count, label_expr, enq_last, task)
	SELECT $1, x.id, x.seq, x.kind, x.queue, x.args, x.priority, x.run_at, 2, x.max_retries, x.timeout,
		nullif(x.ukey, ''), x.uuntil, x.created, $2,
		CASE WHEN x.labels = '' THEN NULL ELSE string_to_array(x.labels, ',') END, nullif(x.md, '')::json,
		nullif(x.parent, ''), x.shard_index, x.shard_count,
		strpos(x.labels, '!') > 0 OR strpos(x.labels, '|') > 0, (SELECT last FROM lk), nullif(x.task, '')
	FROM x ORDER BY x.o
	ON CONFLICT (ns, id) DO NOTHING
	RETURNING id, seq, kind, queue, priority),
q AS (` + s.addQueues("ins") + `),
h AS (INSERT INTO ` + s.t("enqueued") + ` (ns, last, t, node, seqs, ids, kinds, queues)
	SELECT $1, (SELECT last FROM lk), $2, $13, array_agg(ins.seq ORDER BY ins.seq), array_agg(ins.id ORDER BY ins.seq),
		array_agg(ins.kind ORDER BY ins.seq), array_agg(ins.queue ORDER BY ins.seq)
	FROM ins HAVING count(*) > 0 RETURNING 1),
c AS (INSERT INTO ` + s.t("count_deltas") + ` (ns, queue, kind, state, n)
	SELECT $1, ins.queue, ins.kind, 2, count(*) FROM ins GROUP BY ins.queue, ins.kind RETURNING 1),
w AS (SELECT pg_notify($14, $15::text || d.queue) FROM (SELECT DISTINCT queue FROM ins) AS d WHERE d.queue <> ALL($23::text[]))
SELECT id, seq, (SELECT count(*) FROM q), (SELECT count(*) FROM h), (SELECT count(*) FROM c), (SELECT count(*) FROM w) FROM ins`
	// The claim: one statement picks the first ready instances the
	// claimer may take, in claim order, skipping rows other claims hold,
	// numbers their Processing records in claim order (positions from the
	// history's sequence, taken once the rows are locked), leases them
	// keeping each record on its row (proc_pos, proc_t, and proc_hx, the
	// record's place in the feed's order: migrations 0008 and 0010; no
	// history row), found again by the tuple IDs the pick locked (a TID
	// scan, no walk down the primary key; a locked row's version cannot
	// move until the transaction ends) and records the claim of a
	// ClaimSeq. It moves no counter: Processing instances are counted
	// with the Scheduled ones (migration 0011). It locks nothing but the
	// rows it takes (and the claimer's claim record).
	filterOf := func(kinds, labels, keys, both string) string {
		return `AND (cardinality(` + kinds + `::text[]) = 0 OR kind = ANY(` + kinds + `::text[]))
		AND (labels IS NULL OR labels <@ ` + both + `::text[] OR label_expr AND NOT EXISTS (
			SELECT 1 FROM unnest(labels) AS r(req) WHERE NOT ` + labelHolds("r.req", labels, keys) + `))
		AND NOT EXISTS (SELECT 1 FROM ` + s.t("queues") + ` WHERE ns = $1 AND name = $2 AND paused)`
	}
	// The pick reads the ready entries of each priority the queue row
	// lists (highest first; migration 0009), priority = p AND run_at <=
	// now, so it never reads the entries scheduled for later. The list
	// holds every priority the queue's instances have: both ways of
	// storing instances (this statement and COPY) add theirs, an
	// instance's queue and priority never change, and nothing removes
	// from the list. The LATERAL reference makes the join a nested loop
	// over the list in its order, each priority's rows in (run_at, seq)
	// order: claim order, with no sort, and the outer LIMIT stops the
	// loop (and the locking) as soon as it has enough. A queue that had
	// more than maxPrios priorities has no list (NULL): its claims read
	// the index in claim order as before (the second branch, which runs
	// only then), so a queue using the priority as a fine-grained order
	// does not pay a probe per priority.
	filter := filterOf("$5", "$6", "$10", "$11")
	noPause := `AND NOT EXISTS (SELECT 1 FROM ` + s.t("queues") + ` WHERE ns = $1 AND name = $2 AND paused)`
	// The claim record of a ClaimSeq (store.ClaimParams) is locked first
	// (lk, FOR UPDATE: a repeat of a claim still running waits for it and
	// then reads what it recorded), in the claim statement itself: the pick
	// takes nothing when it says the call is a repeat or late.
	claimed := `NOT EXISTS (SELECT 1 FROM lk WHERE lk.until >= $3 AND lk.seq >= $9::int8)`
	// The pick's LIMIT and readiness time are scalar subqueries, which the
	// planner prices as unknown in every plan: the custom plans of the
	// first five calls on a connection then cost what the generic plan
	// does (plus their planning), and PostgreSQL keeps the generic plan
	// from the sixth call on. As plain parameters, the generic plan was
	// priced for a tenth of the ready rows and each custom plan for the
	// rows asked, which looked cheaper: every claim was planned anew, some
	// 1.3 ms of server CPU with 100,000 ready rows on a quiet machine and
	// 8 ms under load, more than running it (TestClaimKeepsItsGenericPlan;
	// the plan is the same either way).
	limit, readyBy := `(SELECT $4::int8)`, `(SELECT $3::int8)`
	st.claim = `WITH lk AS MATERIALIZED (SELECT seq, until, ids, attempts FROM ` + s.t("claims") + `
	WHERE $9::int8 <> 0 AND ns = $1 AND owner = $7 FOR UPDATE),
picked AS MATERIALIZED ((
	SELECT c.ctid, c.priority, c.run_at, c.seq
	FROM ` + s.t("queues") + ` AS qq, unnest(qq.prios) AS pr(p),
		LATERAL (SELECT ctid, priority, run_at, seq FROM ` + inst + `
			WHERE ns = $1 AND queue = $2 AND state = 2 AND priority = pr.p AND run_at <= ` + readyBy + ` ` + strings.Replace(filter, noPause, "", 1) + `
			ORDER BY run_at, seq
			LIMIT ` + limit + `
			FOR UPDATE SKIP LOCKED) AS c
	WHERE qq.ns = $1 AND qq.name = $2 AND NOT qq.paused AND ` + claimed + `
	LIMIT ` + limit + `)
	UNION ALL
	SELECT * FROM (SELECT ctid, priority, run_at, seq FROM ` + inst + `
		WHERE ns = $1 AND queue = $2 AND state = 2 AND run_at <= ` + readyBy + ` ` + filter + ` AND ` + claimed + `
			AND EXISTS (SELECT 1 FROM ` + s.t("queues") + ` WHERE ns = $1 AND name = $2 AND prios IS NULL)
		ORDER BY priority DESC, run_at, seq
		LIMIT ` + limit + `
		FOR UPDATE SKIP LOCKED) AS wide),
p AS MATERIALIZED (SELECT o.ctid, nextval('` + strings.ReplaceAll(s.t("seq"), "'", "''") + `') AS pos
	FROM (SELECT picked.ctid FROM picked ORDER BY picked.priority DESC, picked.run_at, picked.seq) AS o),
u AS (UPDATE ` + inst + ` i SET state = 3, attempt = i.attempt + 1, lease_owner = $7, lease_until = $8, updated_at = $3,
		proc_pos = p.pos, proc_t = $3,
		hx = greatest(pg_current_xact_id(), i.hx), proc_hx = greatest(pg_current_xact_id(), i.hx)
	FROM p WHERE i.ctid = ANY(ARRAY(SELECT ctid FROM p)) AND i.ctid = p.ctid AND i.ns = $1
	RETURNING ` + instColsOf("i") + `, i.ctid AS tid),
cl AS (UPDATE ` + s.t("claims") + ` SET seq = $9::int8, until = $8,
		ids = coalesce((SELECT array_agg(id ORDER BY priority DESC, run_at, seq) FROM u), '{}'),
		attempts = coalesce((SELECT array_agg(attempt ORDER BY priority DESC, run_at, seq) FROM u), '{}')
	WHERE $9::int8 <> 0 AND ns = $1 AND owner = $7 AND NOT (until >= $3 AND seq >= $9::int8)
	RETURNING 1),
n AS (SELECT count(*) AS n FROM p),
-- NextRunAt of a claim that took less than it asked, in the same statement:
-- the first waiting instance of each priority the queue lists, those this
-- claim took left out.
nx AS (SELECT coalesce(min(f.run_at), 0) AS t, bool_or(qq.prios IS NULL) AS wide
	FROM ` + s.t("queues") + ` AS qq LEFT JOIN LATERAL unnest(qq.prios) AS pr(p) ON true
		LEFT JOIN LATERAL (SELECT run_at FROM ` + inst + `
			WHERE ns = $1 AND queue = $2 AND state = 2 AND priority = pr.p ` + strings.Replace(filter, noPause, "", 1) + `
				AND ctid <> ALL(ARRAY(SELECT ctid FROM picked))
			ORDER BY run_at, seq
			LIMIT 1) AS f ON true
	WHERE qq.ns = $1 AND qq.name = $2 AND NOT qq.paused)
SELECT ` + instColsOf("u") + `,
	CASE WHEN (SELECT n FROM n) < $4 AND NOT EXISTS (SELECT 1 FROM lk WHERE lk.until >= $3 AND lk.seq >= $9::int8)
		THEN (SELECT coalesce(t, 0) FROM nx) END,
	CASE WHEN (SELECT n FROM n) < $4 THEN coalesce((SELECT wide FROM nx), false) END,
	CASE WHEN u.id IS NULL THEN (SELECT seq FROM lk) END, CASE WHEN u.id IS NULL THEN (SELECT until FROM lk) END,
	CASE WHEN u.id IS NULL THEN (SELECT ids FROM lk) END, CASE WHEN u.id IS NULL THEN (SELECT attempts FROM lk) END,
	(SELECT count(*) FROM cl), u.tid::text
FROM (VALUES (1)) AS one LEFT JOIN u ON true ORDER BY u.priority DESC, u.run_at, u.seq`
	// The finish of attempts the owner holds: one statement applies the
	// outcomes (a retry or release of an attempt whose cancel was
	// requested ends Canceled, its RunAt and attempt kept), records them
	// (positions taken in outcome order; an outcome that ends the
	// instance stays on its row with the attempt's Processing record,
	// fin_pos and fin_node, migration 0013; a retry is a history row
	// holding the Processing record, which the row kept since the claim),
	// adds their counter changes and notifies the queues of retries.
	// An outcome whose row does not match (lease lost, or applied before)
	// is not returned; Finish looks at those in a transaction of their own.
	// The state and owner are compared with IS NOT DISTINCT FROM, which no
	// index serves: the rows are found through the primary key, never
	// through the owner's or the leases' index (a generic plan made while
	// the table looked empty took those and walked every running row).
	st.finish = `WITH x AS MATERIALIZED (SELECT o.*, nextval('` + strings.ReplaceAll(s.t("seq"), "'", "''") + `') AS pos FROM (
		SELECT * FROM unnest($2::text[], $3::int4[], $4::int2[], $5::int8[], $6::bool[], $7::bytea[], $8::text[])
		WITH ORDINALITY AS x(id, attempt, state, run_at, release, result, error, o) ORDER BY x.o) AS o),
u AS (UPDATE ` + inst + ` i SET
		state = CASE WHEN x.state = 2 AND i.cancel_req THEN 6 ELSE x.state END,
		attempt = CASE WHEN x.state = 2 AND x.release AND NOT i.cancel_req THEN i.attempt - 1 ELSE i.attempt END,
		run_at = CASE WHEN x.state = 2 AND NOT i.cancel_req THEN x.run_at ELSE i.run_at END,
		finished_at = CASE WHEN x.state = 2 AND NOT i.cancel_req THEN 0 ELSE $10::int8 END,
		fin_pos = CASE WHEN x.state = 2 AND NOT i.cancel_req THEN NULL ELSE x.pos END,
		fin_node = CASE WHEN x.state = 2 AND NOT i.cancel_req THEN NULL ELSE $9::text END,
		lease_owner = NULL, lease_until = 0, cancel_req = false, result = x.result, error = x.error, updated_at = $10::int8,
		hx = greatest(pg_current_xact_id(), i.hx)
	FROM x WHERE i.ns = $1 AND i.id = ANY($2::text[]) AND i.id = x.id
		AND i.state IS NOT DISTINCT FROM 3::int2 AND i.lease_owner IS NOT DISTINCT FROM $9::text AND i.attempt = x.attempt
	RETURNING i.id, i.kind, i.queue, i.state, x.attempt AS oattempt, x.o, x.pos, x.result, x.error, i.proc_pos, i.proc_t, i.hx, i.proc_hx),
h AS (INSERT INTO ` + s.t("history") + ` (ns, pos, instance_id, kind, queue, state, attempt, t, node, error, result, proc_pos, proc_t, hx, proc_hx)
	SELECT $1, u.pos, u.id, u.kind, u.queue, u.state, u.oattempt, $10, $9, u.error, u.result, u.proc_pos, u.proc_t,
		u.hx, CASE WHEN u.proc_pos > 0 THEN u.proc_hx END
	FROM u WHERE u.state = 2 ORDER BY u.o RETURNING 1),
c AS (INSERT INTO ` + s.t("count_deltas") + ` (ns, queue, kind, state, n)
	SELECT $1, d.queue, d.kind, d.state, sum(d.n) FROM (
		SELECT queue, kind, 2::int2 AS state, -1 AS n FROM u
		UNION ALL SELECT queue, kind, state, 1 FROM u) AS d
	GROUP BY d.queue, d.kind, d.state HAVING sum(d.n) <> 0 RETURNING 1),
w AS (SELECT pg_notify($11, $12::text || d.queue) FROM (SELECT DISTINCT queue FROM u WHERE state = 2) AS d)
SELECT u.o, u.state, (SELECT count(*) FROM h), (SELECT count(*) FROM c), (SELECT count(*) FROM w) FROM u`
	// The same finish for attempts whose row versions this Store knows
	// (tids: the claim's, or the last renewal's): the rows are found by
	// their tuple IDs (a TID scan, as the claim does), so no plan can
	// scan the namespace's primary-key entries for them. A planner whose
	// statistics predate the namespace's rows (a fresh table, before
	// autoanalyze) did so with the IDs as an array: some 500 buffers per
	// statement at 150 jobs/s. A version that changed since (a cancel
	// request, a renewal by another Store) fails the TID and lands in the
	// checked transaction, as a lost lease would. The namespace is
	// compared as an expression (i.ns || ''), which no index serves: every
	// index of instances leads with ns, and given ns = $1 that planner
	// took an index of the namespace's rows over the TID scan.
	st.finishTID = strings.Replace(strings.Replace(st.finish,
		`$8::text[])
		WITH ORDINALITY AS x(id, attempt, state, run_at, release, result, error, o)`,
		`$8::text[], $13::text[])
		WITH ORDINALITY AS x(id, attempt, state, run_at, release, result, error, tid, o)`, 1),
		`FROM x WHERE i.ns = $1 AND i.id = ANY($2::text[]) AND i.id = x.id`,
		`FROM x WHERE i.ctid = ANY($13::text[]::tid[]) AND i.ctid = x.tid::tid AND i.ns || '' = $1 AND i.id = x.id`, 1)
	if !strings.Contains(st.finishTID, "i.ns || '' = $1") || !strings.Contains(st.finishTID, "error, tid, o)") {
		panic("pgstore: the finish statement changed: stmts.finishTID no longer applies to it")
	}
	// NextRunAt: the first waiting instance of each priority the queue
	// holds (a skip over the claim index, one probe per priority), the
	// earliest of them.
	st.next = `WITH RECURSIVE p(prio) AS (
	(SELECT priority FROM ` + inst + ` WHERE ns = $1 AND queue = $2 AND state = 2 ORDER BY priority DESC LIMIT 1)
	UNION ALL
	SELECT (SELECT priority FROM ` + inst + ` WHERE ns = $1 AND queue = $2 AND state = 2 AND priority < p.prio ORDER BY priority DESC LIMIT 1)
	FROM p WHERE p.prio IS NOT NULL)
SELECT coalesce(min((SELECT run_at FROM ` + inst + ` WHERE ns = $1 AND queue = $2 AND state = 2 AND priority = p.prio ` + filterOf("$3", "$4", "$5", "$6") + `
	ORDER BY priority DESC, run_at, seq LIMIT 1)), 0)
FROM p WHERE p.prio IS NOT NULL`
	// The update of rows a transaction locked (saveRows). A finished row
	// that holds its last attempt's records (migration 0013) and leaves
	// the final states (Admin.Retry) first writes them into a history row,
	// at their places, as a finish of before would have.
	st.update = `WITH m AS (INSERT INTO ` + s.t("history") + ` (ns, pos, instance_id, kind, queue, state, attempt, t, node, error, result,
		proc_pos, proc_t, hx, proc_hx)
	SELECT $1, i.fin_pos, i.id, i.kind, i.queue, i.state, i.attempt, i.finished_at, coalesce(i.fin_node, ''), i.error, i.result,
		i.proc_pos, i.proc_t, i.hx, CASE WHEN i.proc_pos > 0 THEN i.proc_hx END
	FROM ` + inst + ` i JOIN unnest($2::text[], $3::int2[]) AS y(id, state) ON i.id = y.id
	WHERE i.ns = $1 AND i.id = ANY($2::text[]) AND i.state >= 4 AND i.fin_pos > 0 AND y.state < 4
	RETURNING 1)
UPDATE ` + inst + ` i SET state = x.state, attempt = x.attempt, run_at = x.run_at,
		lease_owner = nullif(x.owner, ''), lease_until = x.lease_until, cancel_req = x.cancel_req,
		finished_at = x.finished, result = x.result, error = x.error, updated_at = x.updated,
		fin_pos = CASE WHEN x.state < 4 THEN NULL ELSE i.fin_pos END, fin_node = CASE WHEN x.state < 4 THEN NULL ELSE i.fin_node END,
		hx = greatest(pg_current_xact_id(), i.hx)
	FROM unnest($2::text[], $3::int2[], $4::int4[], $5::int8[], $6::text[], $7::int8[], $8::bool[], $9::int8[],
		$10::bytea[], $11::text[], $12::int8[])
		AS x(id, state, attempt, run_at, owner, lease_until, cancel_req, finished, result, error, updated)
	WHERE i.ns = $1 AND i.id = ANY($2::text[]) AND i.id = x.id`
	st.renew = `UPDATE ` + inst + ` i SET lease_until = $5, updated_at = $6
	FROM (SELECT DISTINCT * FROM unnest($2::text[], $3::int4[]) AS y(id, attempt)) AS x
	WHERE i.ns = $1 AND i.id = ANY($2::text[]) AND i.id = x.id
		AND i.state IS NOT DISTINCT FROM 3::int2 AND i.lease_owner IS NOT DISTINCT FROM $4::text AND i.attempt = x.attempt
	RETURNING i.id, i.attempt, i.cancel_req, i.ctid::text`
	st.lockRows = `SELECT ` + instCols + ` FROM ` + inst + ` WHERE ns = $1 AND id = ANY($2::text[]) ORDER BY id FOR UPDATE`
	stmtCache.Store(s.cfg.quoted, st)
	return st
}

// addQueues is the statement that registers the queues of the rows of
// src (a relation with queue and priority columns, in the same WITH) and
// adds to each queue's priority list the priorities it lacks (migration
// 0009), or drops the list (NULL) when it would hold more than maxPrios.
// A queue whose list holds them all, or that has none, is neither written
// nor locked: the upsert sees only the pairs the list lacks.
func (s *Store) addQueues(src string) string {
	capped := func(list string) string {
		return `CASE WHEN cardinality(` + list + `) > ` + strconv.Itoa(maxPrios) + ` THEN NULL ELSE ` + list + ` END`
	}
	return `INSERT INTO ` + s.t("queues") + ` AS qq (ns, name, prios)
	SELECT $1, n.queue, ` + capped("array_agg(DISTINCT n.priority ORDER BY n.priority DESC)") + `
	FROM (SELECT DISTINCT queue, priority FROM ` + src + `) AS n
	WHERE NOT EXISTS (SELECT 1 FROM ` + s.t("queues") + ` e WHERE e.ns = $1 AND e.name = n.queue AND (e.prios IS NULL OR n.priority = ANY(e.prios)))
	GROUP BY n.queue ORDER BY 2
	ON CONFLICT (ns, name) DO UPDATE SET prios = CASE WHEN qq.prios IS NULL OR excluded.prios IS NULL THEN NULL
		ELSE ` + capped("ARRAY(SELECT DISTINCT v FROM unnest(qq.prios || excluded.prios) AS v ORDER BY v DESC)") + ` END
	RETURNING 1`
}

// maxPrios is how many priorities a queue's list holds (migration 0009);
// a queue that had more has none, and its claims read the claim index in
// claim order.
const maxPrios = 16

// labelHolds is the SQL condition that the node labels (a text[]
// parameter) with their keys (another, each label up to its "=")
// satisfy the label requirement req, in the compact form stores keep, as
// store.LabelRequirementHolds decides: "!key", "key", "key=v1|v2",
// "key!=v1|v2". A requirement the node has as a label, such as
// "region=eu", holds at once.
//
// The claim's filter runs it only for rows that need it. Requirements of
// the forms of before ("key=value", "key") hold exactly when they are
// among the claimer's labels and keys (one array parameter, both), so
// labels <@ both decides every row without an expression, as cheaply as
// the filter of before did; a row that fails it is checked requirement by
// requirement only when enqueue flagged it label_expr (a requirement
// holds "!" or "|"; migration 0006): the check unnests its labels, which
// costs some 5-10 µs a row (against under one for <@) on the loaded test
// machine, and a claim may skip many rows it may not take.
func labelHolds(req, labels, keys string) string {
	eq := `strpos(` + req + `, '=')`
	// The labels a set names, "key=v1|v2" -> {key=v1,key=v2}, for an
	// overlap with the claimer's (&&): no set-returning call per row.
	named := func(key string) string {
		return `string_to_array(` + key + ` || '=' || replace(substr(` + req + `, ` + eq + ` + 1), '|', '|' || ` + key + ` || '='), '|')`
	}
	return `(CASE
		WHEN ` + req + ` = ANY(` + labels + `::text[]) THEN true
		WHEN left(` + req + `, 1) = '!' THEN NOT (substr(` + req + `, 2) = ANY(` + keys + `::text[]))
		WHEN ` + eq + ` = 0 THEN ` + req + ` = ANY(` + keys + `::text[])
		WHEN substr(` + req + `, ` + eq + ` - 1, 1) = '!' THEN NOT (` + named(`left(`+req+`, `+eq+` - 2)`) + ` && ` + labels + `::text[])
		ELSE ` + named(`left(`+req+`, `+eq+` - 1)`) + ` && ` + labels + `::text[]
		END)`
}

func clamp32(n int) int32 {
	return int32(max(min(n, math.MaxInt32), math.MinInt32))
}

// Enqueue implements store.Queue. New instances are inserted with one
// statement (stmts.enqueue) that also appends their history and moves
// their counters; an ID stored already is reported Existed (the insert
// skips it on its primary key). The unique keys of a batch are taken
// first, all in one upsert on the keys' primary key that replaces only an
// expired holder, so the database decides which of two racing schedules
// holds a key; the whole batch is one transaction.
func (s *Store) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: enqueue: %w", err)
	}
	if len(p.Instances) == 0 {
		return []store.EnqueueResult{}, nil
	}
	if !slices.ContainsFunc(p.Instances, func(in *store.Instance) bool { return in.UniqueKey != "" }) {
		return s.enqueuePlain(ctx, p)
	}
	var res []store.EnqueueResult
	err := s.write(ctx, "enqueue", func(tx pgx.Tx) error {
		res = make([]store.EnqueueResult, len(p.Instances))
		ids := make([]string, len(p.Instances))
		for i, in := range p.Instances {
			ids[i] = in.ID
		}
		existing, err := s.seqs(ctx, tx, ids)
		if err != nil {
			return err
		}
		// The candidates: instances not stored yet. A batch that repeats
		// an ID or a unique key among them takes its keys one at a time,
		// in batch order (a later repeat sees what an earlier one took);
		// any other takes them all with one statement.
		var cand []int
		seenID, seenKey, repeat := map[string]bool{}, map[string]bool{}, false
		for i, in := range p.Instances {
			if _, ok := existing[in.ID]; ok {
				continue
			}
			repeat = repeat || seenID[in.ID] || in.UniqueKey != "" && seenKey[in.UniqueKey]
			seenID[in.ID] = true
			if in.UniqueKey != "" {
				seenKey[in.UniqueKey] = true
			}
			cand = append(cand, i)
		}
		var add []int // indexes of p.Instances to insert
		if repeat {
			add, err = s.takeKeysEach(ctx, tx, p, existing, res)
		} else {
			add, err = s.takeKeys(ctx, tx, p, cand, res)
		}
		if err != nil {
			return err
		}
		if len(add) > 0 {
			got, err := s.insert(ctx, tx, p, add, false)
			if err != nil {
				return err
			}
			for _, i := range add {
				if seq, ok := got[p.Instances[i].ID]; ok {
					res[i] = store.EnqueueResult{ID: p.Instances[i].ID, Seq: uint64(seq)}
				} // else stored meanwhile by a racing Enqueue: reported below
			}
		}
		// Instances stored before (or by a racing call, or earlier in
		// this batch) are reported with their stored Seq.
		var missing []string
		for i, in := range p.Instances {
			if res[i].ID == "" && res[i].Err == nil {
				missing = append(missing, in.ID)
			}
		}
		if len(missing) > 0 {
			stored, err := s.seqs(ctx, tx, missing)
			if err != nil {
				return err
			}
			for i, in := range p.Instances {
				if res[i].ID == "" && res[i].Err == nil {
					res[i] = store.EnqueueResult{ID: in.ID, Seq: uint64(stored[in.ID]), Existed: true}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// seqs returns the Seq of each of ids that is stored.
func (s *Store) seqs(ctx context.Context, q querier, ids []string) (map[string]int64, error) {
	rows, err := q.Query(ctx, `SELECT id, seq FROM `+s.t("instances")+` WHERE ns = $1 AND id = ANY($2::text[])`, s.cfg.ns, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := make(map[string]int64, len(ids))
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			return nil, err
		}
		got[id] = seq
	}
	return got, rows.Err()
}

// takeKeys takes the unique keys of the instances p.Instances[cand] (no
// ID and no key repeated among them) with one upsert, in key order, and
// returns the indexes of the instances to insert: those without a key and
// those whose key they took. An instance whose key is held by another
// (unexpired) instance gets its ErrDuplicate in res.
func (s *Store) takeKeys(ctx context.Context, tx pgx.Tx, p *store.EnqueueParams, cand []int, res []store.EnqueueResult) ([]int, error) {
	var keys, ids []string
	var until []int64
	for _, i := range cand {
		if in := p.Instances[i]; in.UniqueKey != "" {
			keys, ids, until = append(keys, in.UniqueKey), append(ids, in.ID), append(until, nanos(in.UniqueUntil))
		}
	}
	won := make(map[string]bool, len(keys))
	if len(keys) > 0 {
		// The conflicting rows are locked even where the WHERE refuses
		// the update, so the holders read next cannot change before the
		// commit.
		rows, err := tx.Query(ctx, `INSERT INTO `+s.t("unique_keys")+` AS k (ns, key, id, until)
			SELECT $1, u.key, u.id, u.until FROM unnest($2::text[], $3::text[], $4::int8[]) AS u(key, id, until) ORDER BY u.key
			ON CONFLICT (ns, key) DO UPDATE SET id = excluded.id, until = excluded.until WHERE k.until <= $5
			RETURNING key`, s.cfg.ns, keys, ids, until, nanos(p.Now))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return nil, err
			}
			won[k] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	type holder struct {
		id    string
		until int64
	}
	held := map[string]holder{}
	if len(won) < len(keys) {
		var lost []string
		for _, k := range keys {
			if !won[k] {
				lost = append(lost, k)
			}
		}
		rows, err := tx.Query(ctx, `SELECT key, id, until FROM `+s.t("unique_keys")+` WHERE ns = $1 AND key = ANY($2::text[])`, s.cfg.ns, lost)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var k string
			var h holder
			if err := rows.Scan(&k, &h.id, &h.until); err != nil {
				rows.Close()
				return nil, err
			}
			held[k] = h
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	add := make([]int, 0, len(cand))
	for _, i := range cand {
		in := p.Instances[i]
		if in.UniqueKey != "" && !won[in.UniqueKey] {
			h, ok := held[in.UniqueKey]
			if !ok {
				return nil, fmt.Errorf("unique key %q of instance %s was neither taken nor held", in.UniqueKey, in.ID)
			}
			res[i] = store.EnqueueResult{ID: h.id, Err: fmt.Errorf("pgstore: instance %s: unique key %q is held by %s until %v: %w",
				in.ID, in.UniqueKey, h.id, fromNanos(h.until), store.ErrDuplicate)}
			continue
		}
		add = append(add, i)
	}
	return add, nil
}

// takeKeysEach is takeKeys for a batch that repeats an ID or a unique key:
// one upsert per instance, in batch order, skipping the IDs in existing and
// those taken earlier in the batch.
func (s *Store) takeKeysEach(ctx context.Context, tx pgx.Tx, p *store.EnqueueParams, existing map[string]int64, res []store.EnqueueResult) ([]int, error) {
	var add []int
	taken := map[string]bool{}
	for i, in := range p.Instances {
		if _, ok := existing[in.ID]; ok || taken[in.ID] {
			continue // reported by Enqueue
		}
		if in.UniqueKey != "" {
			var holder string
			err := tx.QueryRow(ctx, `INSERT INTO `+s.t("unique_keys")+` AS k (ns, key, id, until) VALUES ($1, $2, $3, $4)
				ON CONFLICT (ns, key) DO UPDATE SET id = excluded.id, until = excluded.until WHERE k.until <= $5
				RETURNING id`, s.cfg.ns, in.UniqueKey, in.ID, nanos(in.UniqueUntil), nanos(p.Now)).Scan(&holder)
			if errors.Is(err, pgx.ErrNoRows) {
				var until int64
				if err := tx.QueryRow(ctx, `SELECT id, until FROM `+s.t("unique_keys")+` WHERE ns = $1 AND key = $2`, s.cfg.ns, in.UniqueKey).Scan(&holder, &until); err != nil {
					return nil, err
				}
				res[i] = store.EnqueueResult{ID: holder, Err: fmt.Errorf("pgstore: instance %s: unique key %q is held by %s until %v: %w",
					in.ID, in.UniqueKey, holder, fromNanos(until), store.ErrDuplicate)}
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		taken[in.ID] = true
		add = append(add, i)
	}
	return add, nil
}

// insert runs stmts.enqueue for the instances p.Instances[idx] (all of
// them when idx is nil) and returns the Seq of each it inserted; an ID
// stored already is skipped.
//
// With coalesce (a statement that commits on its own: no caller's or
// store's transaction around it), the queues WithNotifyWindow holds back
// are left out of its notifications and owed once it has committed.
func (s *Store) insert(ctx context.Context, q querier, p *store.EnqueueParams, idx []int, coalesce bool) (map[string]int64, error) {
	n := len(p.Instances)
	if idx != nil {
		n = len(idx)
	}
	id, kind, queue, labels, md, ukey := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	args := make([][]byte, n)
	prio, runAt, timeout, created, uuntil := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	retries := make([]int32, n)
	parent, shardIndex, shardCount, task := make([]string, n), make([]int32, n), make([]int32, n), make([]string, n)
	for j := range n {
		in := p.Instances[j]
		if idx != nil {
			in = p.Instances[idx[j]]
		}
		id[j], kind[j], queue[j] = in.ID, in.Kind, in.Queue
		labels[j] = strings.Join(store.NormLabels(in.Labels), ",")
		md[j] = encodeMetadata(in.Metadata)
		args[j], prio[j], runAt[j] = in.Args, int64(in.Priority), nanos(in.RunAt)
		timeout[j], created[j], retries[j] = int64(in.Timeout), nanos(in.CreatedAt), clamp32(in.MaxRetries)
		ukey[j], uuntil[j] = in.UniqueKey, nanos(in.UniqueUntil)
		parent[j], shardIndex[j], shardCount[j] = in.Parent, clamp32(in.ShardIndex), clamp32(in.ShardCount)
		task[j] = string(store.MarshalTask(in.Task))
	}
	if txFrom(ctx) != nil {
		// In the caller's transaction, the statement would hold a new
		// queue row (or one it adds a priority to) until the caller's
		// commit, and every other enqueue into that queue would wait for
		// it: the queues are registered first, in a transaction of the
		// store's own. One that the caller then rolls back stays
		// registered, as a queue whose instances are gone does.
		if err := s.registerQueues(ctx, queue, prio); err != nil {
			return nil, err
		}
	}
	held := []string{}
	if coalesce {
		if h := s.hold(queue, time.Now()); h != nil {
			held = h
			// Owed once the statement has ended (committed: it runs on
			// its own), and after a failure too, which may have stored.
			defer s.owe(held)
		}
	}
	rows, err := q.Query(ctx, s.stmt().enqueue, s.cfg.ns, nanos(p.Now), id, kind, queue, args, prio, runAt, retries, timeout, created, labels,
		p.Node, s.channel, strconv.Itoa(len(s.cfg.ns))+":"+s.cfg.ns, md, ukey, uuntil, parent, shardIndex, shardCount, task, held)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := make(map[string]int64, n)
	for rows.Next() {
		var sid string
		var seq, a, b, c, d int64
		if err := rows.Scan(&sid, &seq, &a, &b, &c, &d); err != nil {
			return nil, err
		}
		got[sid] = seq
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(got) > 0 {
		s.wroteCounts()
	}
	return got, nil
}

// registerQueues adds the queues and priorities of a batch (pairs of
// queue[i], prio[i]) to the queue rows, in a transaction of its own.
func (s *Store) registerQueues(ctx context.Context, queue []string, prio []int64) error {
	var n int64
	return s.pool.QueryRow(ctx, `WITH x AS (SELECT * FROM unnest($2::text[], $3::int8[]) AS x(queue, priority)),
q AS (`+s.addQueues("x")+`)
SELECT count(*) FROM q`, s.cfg.ns, queue, prio).Scan(&n)
}

// enqueuePlain enqueues instances without unique keys: a large batch of
// its own with COPY (enqueueCopy), else in one statement (stmts.enqueue),
// then reads the Seq of those stored before.
func (s *Store) enqueuePlain(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	if canCopy(ctx, p) {
		res, err := s.enqueueCopy(ctx, p)
		if !errors.Is(err, errCopyConflict) {
			return res, s.wrap(ctx, "enqueue", err)
		}
	}
	q := s.q(ctx)
	got, err := s.insert(ctx, q, p, nil, txFrom(ctx) == nil)
	if err != nil {
		return nil, s.wrap(ctx, "enqueue", err)
	}
	res := make([]store.EnqueueResult, len(p.Instances))
	var missing []string
	for i, in := range p.Instances {
		if seq, ok := got[in.ID]; ok {
			res[i] = store.EnqueueResult{ID: in.ID, Seq: uint64(seq)}
			delete(got, in.ID) // the same ID later in the batch is a repeat
			continue
		}
		missing = append(missing, in.ID)
	}
	if len(missing) == 0 {
		return res, nil
	}
	// Stored before (or earlier in this batch): report the stored Seq.
	stored, err := s.seqs(ctx, q, missing)
	if err != nil {
		return nil, s.wrap(ctx, "enqueue", err)
	}
	for i, in := range p.Instances {
		if res[i].ID == "" {
			res[i] = store.EnqueueResult{ID: in.ID, Seq: uint64(stored[in.ID]), Existed: true}
		}
	}
	return res, nil
}

// Claim implements store.Queue in one statement (see stmts.claim), which
// locks the owner's claim record when p.ClaimSeq is set and reads
// NextRunAt when it took less than p.Limit.
func (s *Store) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	if ls, rls := limitsOf(p), rateLimitsOf(p); len(ls)+len(rls) > 0 {
		return s.claimLimited(ctx, p, ls, rls) // limits.go, ratelimit.go
	}
	res := &store.ClaimResult{}
	now := nanos(p.Now)
	kinds := p.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	labels := store.NormLabels(p.Labels)
	if labels == nil {
		labels = []string{}
	}
	keys := make([]string, len(labels))
	for i, l := range labels {
		keys[i], _, _ = strings.Cut(l, "=")
	}
	both := store.NormLabels(append(slices.Clone(labels), keys...))
	if both == nil {
		both = []string{}
	}
	st := s.stmt()
	// One statement: the claim record of a ClaimSeq is locked in it, and
	// NextRunAt read in it when it took less than it asked (see
	// stmts.claim). It returns one row per instance taken, or a single row
	// of NULL instance columns when it took none, which carries the claim
	// record as it found it.
	if p.ClaimSeq != 0 {
		if err := s.ensureClaimRecord(ctx, p.Owner); err != nil {
			return nil, s.wrap(ctx, "claim", err)
		}
	}
	var seq, until *int64
	var ids []string
	var attempts []int32
	var next *int64
	var wide *bool
	scan := func(rows pgx.Rows) error {
		for rows.Next() {
			r := &row{}
			var cl int64
			var tid *string
			tail := []any{&next, &wide, &seq, &until, &ids, &attempts, &cl, &tid}
			if rows.RawValues()[0] == nil { // took none
				dest := make([]any, len(r.dest()), len(r.dest())+len(tail))
				if err := rows.Scan(append(dest, tail...)...); err != nil {
					return err
				}
				continue
			}
			if err := rows.Scan(append(r.dest(), tail...)...); err != nil {
				return err
			}
			in, err := r.instance()
			if err != nil {
				res.Undecodable = append(res.Undecodable, store.UndecodableRecord{LeaseRef: store.LeaseRef{ID: r.id, Attempt: int(r.attempt)}, Err: err})
				continue
			}
			res.Instances = append(res.Instances, in)
			if tid != nil {
				s.tids.remember(in.ID, r.attempt, *tid)
			}
		}
		return rows.Err()
	}
	args := []any{s.cfg.ns, p.Queue, now, p.Limit, kinds, labels, p.Owner, nanos(p.LeaseUntil), int64(p.ClaimSeq), keys, both}
	rows, err := s.q(ctx).Query(ctx, st.claim, args...)
	if err == nil {
		err = scan(rows)
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		return nil, s.wrap(ctx, "claim", err)
	}
	if p.ClaimSeq != 0 && seq != nil && until != nil && *until >= now && uint64(*seq) >= p.ClaimSeq {
		res.Instances, res.Undecodable = nil, nil
		if uint64(*seq) > p.ClaimSeq {
			return res, nil // a call that arrived late, after a newer claim
		}
		// The repeat of the last claim: what it took and still holds.
		err := s.write(ctx, "claim", func(tx pgx.Tx) error { return s.repeatClaim(ctx, tx, p, ids, attempts, res) })
		if err != nil {
			return nil, err
		}
		return res, nil
	}
	if len(res.Instances)+len(res.Undecodable) < p.Limit {
		if wide != nil && *wide {
			// A queue with no priority list (more than maxPrios): the
			// probe over the claim index, after the claim's commit.
			var t int64
			if err := s.q(ctx).QueryRow(ctx, st.next, s.cfg.ns, p.Queue, kinds, labels, keys, both).Scan(&t); err != nil {
				return nil, s.wrap(ctx, "claim", err)
			}
			next = &t
		}
		if next != nil {
			res.NextRunAt = fromNanos(*next)
		}
	}
	return res, nil
}

// ensureClaimRecord makes sure owner has a claim record (store.ClaimParams'
// ClaimSeq), which the claim statement locks: once per owner and Store,
// as a record is never deleted.
func (s *Store) ensureClaimRecord(ctx context.Context, owner string) error {
	if _, ok := s.claimRecords.Load(owner); ok {
		return nil
	}
	_, err := s.q(ctx).Exec(ctx, `INSERT INTO `+s.t("claims")+` (ns, owner, seq, until, ids, attempts) VALUES ($1, $2, 0, 0, '{}', '{}')
		ON CONFLICT (ns, owner) DO NOTHING`, s.cfg.ns, owner)
	if err != nil {
		return err
	}
	s.claimRecords.Store(owner, true)
	return nil
}

// repeatClaim answers the repeat of the owner's last claim: the attempts it
// took that are still Processing under the owner.
func (s *Store) repeatClaim(ctx context.Context, tx pgx.Tx, p *store.ClaimParams, ids []string, attempts []int32, res *store.ClaimResult) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT `+instCols+` FROM `+s.t("instances")+` WHERE ns = $1 AND id = ANY($2::text[]) AND state = 3 AND lease_owner = $3`,
		s.cfg.ns, ids, p.Owner)
	if err != nil {
		return err
	}
	ins, bad, _ := scanInstances(rows)
	if ins == nil && bad == nil {
		if err := rows.Err(); err != nil {
			return err
		}
	}
	byID := map[string]*store.Instance{}
	for _, in := range ins {
		byID[in.ID] = in
	}
	badID := map[string]*row{}
	for _, r := range bad {
		badID[r.id] = r
	}
	for i, id := range ids {
		if in := byID[id]; in != nil && in.Attempt == int(attempts[i]) {
			res.Instances = append(res.Instances, in)
		} else if r := badID[id]; r != nil && r.attempt == attempts[i] {
			_, err := r.instance()
			res.Undecodable = append(res.Undecodable, store.UndecodableRecord{LeaseRef: store.LeaseRef{ID: id, Attempt: int(r.attempt)}, Err: err})
		}
	}
	return nil
}

// Renew implements store.Queue in one statement.
func (s *Store) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ids := make([]string, len(p.Leases))
	atts := make([]int32, len(p.Leases))
	for i, l := range p.Leases {
		ids[i], atts[i] = l.ID, clamp32(l.Attempt)
	}
	res := &store.RenewResult{}
	if len(ids) == 0 {
		return res, s.wrap(ctx, "renew", ctx.Err())
	}
	type ref struct {
		id string
		a  int32
	}
	held := map[ref]bool{}
	err := hashJoined(ctx, s.b(ctx), s.stmt().renew, len(ids), []any{s.cfg.ns, ids, atts, p.Owner, nanos(p.Until), nanos(p.Now)}, func(rows pgx.Rows) error {
		for rows.Next() {
			var r ref
			var cancel bool
			var tid string
			if err := rows.Scan(&r.id, &r.a, &cancel, &tid); err != nil {
				return err
			}
			held[r] = cancel
			s.tids.remember(r.id, r.a, tid)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.wrap(ctx, "renew", err)
	}
	for i, l := range p.Leases {
		cancel, ok := held[ref{ids[i], atts[i]}]
		switch {
		case !ok:
			res.Lost = append(res.Lost, l)
		case cancel:
			res.CancelRequested = append(res.CancelRequested, l)
		}
	}
	return res, nil
}

// lockRows locks and returns the instances ids names (those that exist),
// in ID order so concurrent batches never deadlock. Undecodable rows come
// back in bad.
func (s *Store) lockRows(ctx context.Context, tx pgx.Tx, ids []string) (map[string]*store.Instance, map[string]*row, error) {
	rows, err := tx.Query(ctx, s.stmt().lockRows, s.cfg.ns, ids)
	if err != nil {
		return nil, nil, err
	}
	ins, bad, err := scanInstances(rows)
	if ins == nil && bad == nil && err != nil {
		return nil, nil, err
	}
	out := make(map[string]*store.Instance, len(ins))
	for _, in := range ins {
		out[in.ID] = in
	}
	badm := map[string]*row{}
	for _, r := range bad {
		badm[r.id] = r
	}
	return out, badm, nil
}

// saveRows writes the changed fields of ins (state, attempt, run time,
// lease, cancel flag, outcome) in one statement, and raises each row's hx
// to the transaction's id: the place in the event feed's order of the
// records the transaction then writes for it (final; migration 0010).
func (s *Store) saveRows(ctx context.Context, tx pgx.Tx, ins []*store.Instance) error {
	if len(ins) == 0 {
		return nil
	}
	n := len(ins)
	id, owner, errs := make([]string, n), make([]string, n), make([]string, n)
	state := make([]int16, n)
	att := make([]int32, n)
	runAt, lease, fin, upd := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	cancel := make([]bool, n)
	result := make([][]byte, n)
	for i, in := range ins {
		id[i], owner[i], errs[i] = in.ID, in.LeaseOwner, in.Error
		state[i], att[i] = int16(in.State), clamp32(in.Attempt)
		runAt[i], lease[i], fin[i], upd[i] = nanos(in.RunAt), nanos(in.LeaseUntil), nanos(in.FinishedAt), nanos(in.UpdatedAt)
		cancel[i], result[i] = in.CancelRequested, in.Result
	}
	return hashJoined(ctx, tx, s.stmt().update, len(id), []any{s.cfg.ns, id, state, att, runAt, owner, lease, cancel, fin, result, errs, upd}, nil)
}

// Finish implements store.Queue: the attempts' rows are locked, each
// outcome is checked against its row, and the changes, history and
// counters are written in two statements.
func (s *Store) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	for i := range p.Outcomes {
		if err := p.Outcomes[i].Validate(); err != nil {
			return nil, fmt.Errorf("pgstore: finish: %w", err)
		}
	}
	res := make([]store.FinishResult, len(p.Outcomes))
	// The fast path, one statement, when no ID is given twice.
	seen := make(map[string]bool, len(p.Outcomes))
	for _, o := range p.Outcomes {
		seen[o.ID] = true
	}
	var rest []int // outcomes the fast path did not apply
	if len(seen) == len(p.Outcomes) && len(p.Outcomes) > 0 {
		done, err := s.finishFast(ctx, p, res)
		if err != nil {
			return nil, err
		}
		for i := range p.Outcomes {
			if !done[i] {
				rest = append(rest, i)
			}
		}
	} else {
		for i := range p.Outcomes {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		return res, nil
	}
	err := s.write(ctx, "finish", func(tx pgx.Tx) error {
		for _, i := range rest {
			res[i] = store.FinishResult{}
		}
		ids := make([]string, len(rest))
		for k, i := range rest {
			ids[k] = p.Outcomes[i].ID
		}
		cur, bad, err := s.lockRows(ctx, tx, ids)
		if err != nil {
			return err
		}
		var lastNode map[string]lastHist
		changed := map[string]*store.Instance{}
		var order []string
		f := &final{}
		for _, i := range rest {
			o := &p.Outcomes[i]
			in := cur[o.ID]
			if r := bad[o.ID]; r != nil {
				_, derr := r.instance()
				res[i].Err = fmt.Errorf("pgstore: finish %s attempt %d: %w", o.ID, o.Attempt, derr)
				continue
			}
			if in == nil || in.State != store.Processing || in.LeaseOwner != p.Owner || in.Attempt != o.Attempt {
				if in != nil {
					if lastNode == nil {
						if lastNode, err = s.lastHistory(ctx, tx, ids); err != nil {
							return err
						}
					}
					if _, seen := changed[o.ID]; !seen && applied(in, o, p.Owner, lastNode[o.ID]) {
						res[i].State = in.State
						continue
					}
				}
				res[i].Err = fmt.Errorf("pgstore: finish %s attempt %d as %v: the attempt is no longer owned by %s: %w", o.ID, o.Attempt, o.State, p.Owner, store.ErrLeaseLost)
				continue
			}
			state := o.State
			if state == store.Scheduled && in.CancelRequested {
				state = store.Canceled // the cancel wins over another attempt
			}
			old := in.State
			in.State = state
			in.LeaseOwner, in.LeaseUntil, in.CancelRequested = "", time.Time{}, false
			in.UpdatedAt = p.Now
			in.Error, in.Result = o.Error, bytes.Clone(o.Result)
			if state == store.Scheduled {
				in.RunAt = o.RunAt
				if o.Release {
					in.Attempt--
				}
				in.FinishedAt = time.Time{}
				f.wakeQueue(in.Queue)
			} else {
				in.FinishedAt = p.Now
			}
			f.hist(in.ID, in.Kind, in.Queue, state, o.Attempt, p.Now, p.Owner, o.Error, in.Result)
			f.endsAttempt(p.Owner)
			f.move(in.Queue, in.Kind, old, state)
			if _, ok := changed[in.ID]; !ok {
				order = append(order, in.ID)
			}
			changed[in.ID] = in
			res[i].State = state
		}
		save := make([]*store.Instance, len(order))
		for i, id := range order {
			save[i] = changed[id]
		}
		if err := s.saveRows(ctx, tx, save); err != nil {
			return err
		}
		return s.apply(ctx, tx, f)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// finishFast applies, in one statement, the outcomes whose attempts the
// owner holds, sets their results in res, and reports which it applied.
func (s *Store) finishFast(ctx context.Context, p *store.FinishParams, res []store.FinishResult) ([]bool, error) {
	n := len(p.Outcomes)
	ids, errs := make([]string, n), make([]string, n)
	atts := make([]int32, n)
	states := make([]int16, n)
	runAt := make([]int64, n)
	release := make([]bool, n)
	results := make([][]byte, n)
	for i, o := range p.Outcomes {
		ids[i], errs[i], atts[i], states[i] = o.ID, o.Error, clamp32(o.Attempt), int16(o.State)
		runAt[i], release[i], results[i] = nanos(o.RunAt), o.Release, o.Result
	}
	done := make([]bool, n)
	sql := s.stmt().finish
	args := []any{s.cfg.ns, ids, atts, states, runAt, release, results, errs,
		p.Owner, nanos(p.Now), s.channel, strconv.Itoa(len(s.cfg.ns)) + ":" + s.cfg.ns}
	if tids := s.tids.take(ids, atts); tids != nil {
		sql, args = s.stmt().finishTID, append(args, tids)
	}
	err := hashJoined(ctx, s.b(ctx), sql, n, args, func(rows pgx.Rows) error {
		for rows.Next() {
			var o int64
			var st int16
			var a, b, c int64
			if err := rows.Scan(&o, &st, &a, &b, &c); err != nil {
				return err
			}
			done[o-1] = true
			res[o-1].State = store.State(st)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.wrap(ctx, "finish", err)
	}
	if slices.Contains(done, true) {
		s.wroteCounts()
	}
	return done, nil
}

// lastHist is an instance's newest history record, as far as Finish
// needs it.
type lastHist struct {
	state   store.State
	attempt int
	node    string
}

func (s *Store) lastHistory(ctx context.Context, tx pgx.Tx, ids []string) (map[string]lastHist, error) {
	// A finished row may hold its outcome (migration 0013), the newest
	// record.
	rows, err := tx.Query(ctx, `SELECT DISTINCT ON (id) id, state, attempt, node FROM (
			SELECT instance_id AS id, pos, state, attempt, node FROM `+s.t("history")+` WHERE ns = $1 AND instance_id = ANY($2::text[])
			UNION ALL
			SELECT id, fin_pos, state, attempt, coalesce(fin_node, '') FROM `+s.t("instances")+`
				WHERE ns = $1 AND id = ANY($2::text[]) AND state >= 4 AND fin_pos > 0) AS r
		ORDER BY id, pos DESC`, s.cfg.ns, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]lastHist{}
	for rows.Next() {
		var id string
		var st int16
		var h lastHist
		if err := rows.Scan(&id, &st, &h.attempt, &h.node); err != nil {
			return nil, err
		}
		h.state = store.State(st)
		out[id] = h
	}
	return out, rows.Err()
}

// applied reports whether in is where outcome o of owner left it (see
// store.Queue.Finish): a repeated Finish.
func applied(in *store.Instance, o *store.Outcome, owner string, h lastHist) bool {
	state := o.State
	if state == store.Scheduled && in.State == store.Canceled {
		state = store.Canceled
	}
	if h.state != state || h.node != owner || h.attempt != o.Attempt || in.State != state {
		return false
	}
	if in.Error != o.Error || !bytes.Equal(in.Result, o.Result) {
		return false
	}
	if state == store.Scheduled {
		want := o.Attempt
		if o.Release {
			want--
		}
		return in.Attempt == want && in.RunAt.Equal(o.RunAt)
	}
	return in.Attempt == o.Attempt
}

// rescueMove takes back in, a Processing attempt whose owner is gone, at
// at: Canceled when a cancel was requested, Scheduled keeping RunAt while
// retries are left, else Terminated; msg is the history record's error.
func rescueMove(f *final, in *store.Instance, msg string, at time.Time, node string) {
	old, owner := in.State, in.LeaseOwner
	in.LeaseOwner, in.LeaseUntil = "", time.Time{}
	in.UpdatedAt = at
	in.Error, in.Result = msg, nil
	switch {
	case in.CancelRequested:
		in.CancelRequested = false
		in.State = store.Canceled
		in.FinishedAt = at
	case in.RetriesLeft():
		in.State = store.Scheduled
		in.FinishedAt = time.Time{}
		f.wakeQueue(in.Queue)
	default:
		in.State = store.Terminated
		in.FinishedAt = at
	}
	f.hist(in.ID, in.Kind, in.Queue, in.State, in.Attempt, at, node, msg, nil)
	f.endsAttempt(owner)
	f.move(in.Queue, in.Kind, old, in.State)
}

// Rescue implements store.Queue: expired leases are taken with SKIP
// LOCKED, so concurrent rescuers split them.
func (s *Store) Rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []*store.Instance
	err := s.write(ctx, "rescue", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+instCols+` FROM `+s.t("instances")+`
			WHERE ns = $1 AND state = 3 AND lease_until < $2 ORDER BY lease_until LIMIT $3 FOR UPDATE SKIP LOCKED`,
			s.cfg.ns, nanos(p.Now), p.Limit)
		if err != nil {
			return err
		}
		ins, _, err := scanInstances(rows)
		if ins == nil && err != nil && !errors.Is(err, store.ErrCorrupt) {
			return err
		}
		f := &final{}
		for _, in := range ins {
			msg := fmt.Sprintf("lease of %s expired at %s", in.LeaseOwner, in.LeaseUntil.Format(time.RFC3339Nano))
			rescueMove(f, in, msg, p.Now, p.Node)
		}
		if err := s.saveRows(ctx, tx, ins); err != nil {
			return err
		}
		out = ins
		return s.apply(ctx, tx, f)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Cancel implements store.Queue.
func (s *Store) Cancel(ctx context.Context, p *store.CancelParams) (*store.Instance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out *store.Instance
	err := s.write(ctx, "cancel", func(tx pgx.Tx) error {
		cur, bad, err := s.lockRows(ctx, tx, []string{p.ID})
		if err != nil {
			return err
		}
		if r := bad[p.ID]; r != nil {
			_, derr := r.instance()
			return errStop{fmt.Errorf("pgstore: cancel %s: %w", p.ID, derr)}
		}
		in := cur[p.ID]
		switch {
		case in == nil:
			return errStop{fmt.Errorf("pgstore: cancel %s: %w", p.ID, store.ErrNotFound)}
		case in.State.Final():
			return errStop{fmt.Errorf("pgstore: cancel %s: it is %v: %w", p.ID, in.State, store.ErrFinished)}
		}
		in.UpdatedAt = p.Now
		f := &final{}
		if in.State == store.Processing {
			in.CancelRequested = true
		} else {
			f.move(in.Queue, in.Kind, in.State, store.Canceled)
			in.State = store.Canceled
			in.FinishedAt = p.Now
			f.hist(in.ID, in.Kind, in.Queue, store.Canceled, in.Attempt, p.Now, p.Node, "", nil)
		}
		if err := s.saveRows(ctx, tx, []*store.Instance{in}); err != nil {
			return err
		}
		if in.State == store.Processing {
			// Delivered at commit: SubscribeCancels.
			if err := s.notifyCancel(ctx, tx, in.Attempt, in.ID); err != nil {
				return err
			}
		}
		out = in
		return s.apply(ctx, tx, f)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

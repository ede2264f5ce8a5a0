package pgstore

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// oldSchema is a schema migrated to an old version, for the upgrade
// tests to fill as that version's code would have.
type oldSchema struct {
	t    *testing.T
	pool *pgxpool.Pool
	name string // unquoted
	q    string // quoted
}

// newOldSchema returns a fresh schema (prefix names it) migrated to
// version.
func newOldSchema(t *testing.T, prefix string, version int) *oldSchema {
	t.Helper()
	pool, schema := internalPool(t, prefix)
	migrateToVersion(t, pool, schema, version)
	return &oldSchema{t: t, pool: pool, name: schema, q: pgx.Identifier{schema}.Sanitize()}
}

// exec runs one statement, failing the test on an error.
func (o *oldSchema) exec(sql string, args ...any) {
	o.t.Helper()
	if _, err := o.pool.Exec(o.t.Context(), sql, args...); err != nil {
		o.t.Fatalf("%s: %v", sql, err)
	}
}

// oldJobs are the positions of the records writeJobs wrote.
type oldJobs struct {
	pos                        [3]int64 // the enqueue rows of pend, run and done
	procRun, procDone, outDone int64    // the Processing records of run and done, done's outcome row
}

// writeJobs writes, in namespace "up" (kind "k", queue "q"), what
// versions 9 to 11 left for three instances enqueued by node n0 at now:
// "pend", waiting; "run", claimed by w1 (its lease an hour on, its
// Processing record on its row); "done", claimed and completed by w1 (its
// outcome row holding its Processing record). Each enqueue is a history
// row holding the Created record (migration 0007). With hx (versions 10
// and 11) the Processing records carry their proc_hx; version 9 had none,
// and kept done's Processing record on its row as well. The counters and
// the queue row, which differ between versions, are the caller's.
func (o *oldSchema) writeJobs(now time.Time, hx bool) oldJobs {
	o.t.Helper()
	ctx, q := o.t.Context(), o.q
	ns := nanos(now)
	var j oldJobs
	for i, id := range []string{"pend", "run", "done"} {
		if err := o.pool.QueryRow(ctx, `INSERT INTO `+q+`.history (ns, instance_id, kind, queue, state, attempt, t, node, created)
			VALUES ('up', $1, 'k', 'q', 2, 0, $2, 'n0', true) RETURNING pos`, id, ns).Scan(&j.pos[i]); err != nil {
			o.t.Fatal(err)
		}
	}
	seq := "'" + q + ".seq'"
	if err := o.pool.QueryRow(ctx, "SELECT nextval("+seq+"), nextval("+seq+")").Scan(&j.procRun, &j.procDone); err != nil {
		o.t.Fatal(err)
	}
	// Version 9 has no proc_hx columns (migration 0010 adds them).
	hxCol, hxVal := "", ""
	if hx {
		hxCol, hxVal = ", proc_hx", ", pg_current_xact_id()"
	}
	o.exec(`INSERT INTO `+q+`.instances (ns, id, kind, queue, run_at, state, attempt, created_at, updated_at)
		VALUES ('up', 'pend', 'k', 'q', $1, 2, 0, $1, $1)`, ns)
	o.exec(`INSERT INTO `+q+`.instances (ns, id, kind, queue, run_at, state, attempt, lease_owner, lease_until, created_at, updated_at,
			proc_pos, proc_t`+hxCol+`)
		VALUES ('up', 'run', 'k', 'q', $1, 3, 1, 'w1', $2, $1, $1, $3, $1`+hxVal+`)`, ns, nanos(now.Add(time.Hour)), j.procRun)
	if hx {
		o.exec(`INSERT INTO `+q+`.instances (ns, id, kind, queue, run_at, state, attempt, created_at, updated_at, finished_at)
			VALUES ('up', 'done', 'k', 'q', $1, 4, 1, $1, $1, $1)`, ns)
	} else {
		o.exec(`INSERT INTO `+q+`.instances (ns, id, kind, queue, run_at, state, attempt, created_at, updated_at, finished_at, proc_pos, proc_t)
			VALUES ('up', 'done', 'k', 'q', $1, 4, 1, $1, $1, $1, $2, $1)`, ns, j.procDone)
	}
	if err := o.pool.QueryRow(ctx, `INSERT INTO `+q+`.history (ns, instance_id, kind, queue, state, attempt, t, node, proc_pos, proc_t`+hxCol+`)
		VALUES ('up', 'done', 'k', 'q', 4, 1, $1, 'w1', $2, $1`+hxVal+`) RETURNING pos`, ns, j.procDone).Scan(&j.outDone); err != nil {
		o.t.Fatal(err)
	}
	return j
}

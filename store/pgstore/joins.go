package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// batcher is what sends a pipelined batch: the pool (the batch is then
// one implicit transaction) or a transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// b returns the batcher of ctx: the caller's transaction or the pool.
func (s *Store) b(ctx context.Context) batcher {
	if tx := txFrom(ctx); tx != nil {
		return tx
	}
	return s.pool
}

// Statements that update instances from parallel arrays (Finish, Renew,
// the rows a transaction saves) join the rows found through the primary
// key (id = ANY) with the unnested arrays. The planner estimates one row
// for the instances side (the state and owner are compared with IS NOT
// DISTINCT FROM, whose selectivity it guesses), so it picks a nested loop
// with the unnest inside, and PostgreSQL unnests every array again for
// each row: quadratic in the batch (75 of the 101 ms of a finish of 192
// instances in the benchmark). With nested loops off for that one
// statement it hashes one side instead: linear. JIT goes off with them:
// a disabled join method adds 10^10 to a plan's cost, far above
// jit_above_cost, and compiling the statement took seconds.
const (
	nestLoopOff = `SELECT set_config('jobkit.enable_nestloop', current_setting('enable_nestloop'), true),
		set_config('jobkit.jit', current_setting('jit'), true),
		set_config('enable_nestloop', 'off', true), set_config('jit', 'off', true)`
	nestLoopOn = `SELECT set_config('enable_nestloop', current_setting('jobkit.enable_nestloop'), true),
		set_config('jit', current_setting('jobkit.jit'), true)`
)

// hashJoined runs sql with args in one round trip with nested-loop joins
// and JIT disabled for that statement only (the settings are put back
// after it, so a caller's transaction keeps its own), handing its rows to
// scan when scan is not nil. n is how many rows the arrays hold: up to
// fewRows the statement runs alone, as the nested loop costs nothing at
// that size, so a finish or renewal of a few attempts (the rule at low
// rates) is one statement, not three. That form is a statement text of
// its own (fewSuffix), so neither form's cached plan is ever used for the
// other's sizes (a plan is not made again when a setting changes).
func hashJoined(ctx context.Context, q batcher, sql string, n int, args []any, scan func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	if n <= fewRows {
		qq := b.Queue(sql+fewSuffix, args...)
		if scan != nil {
			qq.Query(scan)
		}
		return q.SendBatch(ctx, b).Close()
	}
	b.Queue(nestLoopOff)
	qq := b.Queue(sql, args...)
	if scan != nil {
		qq.Query(scan)
	}
	b.Queue(nestLoopOn)
	return q.SendBatch(ctx, b).Close()
}

// fewRows is the largest batch hashJoined runs with the planner's own
// settings; fewSuffix marks that statement's text.
const (
	fewRows   = 16
	fewSuffix = "\n-- few rows: planner settings as they are"
)

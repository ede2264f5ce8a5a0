// Package pgstore is a jobkit store (store.Store) on PostgreSQL, through
// github.com/jackc/pgx/v5 and a *pgxpool.Pool the caller owns.
//
//	pool, err := pgxpool.New(ctx, "postgres://...")
//	err = pgstore.Migrate(ctx, pool)              // once per release, from any process
//	st, err := pgstore.New(ctx, pool)             // refuses a missing, older or newer schema
//	mgr, err := job.NewManager(job.WithStore(st))
//
// Tables live in one PostgreSQL schema (WithSchema, "jobkit" by default),
// created and upgraded by Migrate from migrations embedded in the package:
// versioned, idempotent, and safe to run from several processes at once.
// Namespaces (WithNamespace) share a schema's tables.
//
// Claims are one statement: the first ready instances in claim order
// (priority, then RunAt, then Seq), taken with FOR UPDATE SKIP LOCKED from
// a partial index of what is Scheduled, leased and counted; the claim's
// Processing record stays on the instance row until the attempt ends, and
// goes into the outcome's history row then (one history row per attempt). Unique keys are the primary key of a table of their own, taken
// with one upsert. Wake-ups go out with pg_notify inside the writing
// transaction, so PostgreSQL delivers them at the commit, once per queue;
// each Store listens on one connection of its own (Subscribe), reconnecting
// when it is lost.
//
// Every write transaction ends by taking the namespace's
// transaction-scoped advisory lock, numbering the history records (an
// enqueue's Created and Scheduled records are one row) and moving the
// per-group counters (Inspector.Counts reads them, never walking the
// instances); a large batch is stored with COPY. History positions are therefore taken in
// commit order, which is what lets an event feed (Follow) read them in
// order without missing a record that commits late.
//
// An Enqueue whose insert statement (outside a transaction) or COMMIT
// went out and got no answer (the ctx's deadline, a broken connection, a
// stalled server) may have stored its instances: its error wraps
// store.ErrOutcomeUnknown as well as the cause, and ScheduleJob's names
// WithIdempotencyKey as the safe retry. PostgreSQL's own errors, a failure
// before the COMMIT, what pgx reports as not sent (pgconn.SafeToRetry), a
// connection that could not be made and any call in the caller's
// transaction (WithTx: its COMMIT decides) are certain and do not wrap it.
// A ctx that ends while pgxpool waits for a free connection counts as
// unknown, as pgxpool returns the bare ctx error then.
//
// WithTx runs a ScheduleJob inside the caller's pgx.Tx: the job exists if
// and only if that transaction commits.
package pgstore

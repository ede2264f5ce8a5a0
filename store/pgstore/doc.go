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
// a partial index of what is Scheduled, and leased; the same statement
// locks and writes the owner's claim record (ClaimSeq) and, when it took
// less than asked, reads NextRunAt. A claim moves no counter: Processing
// instances are counted with the Scheduled ones, and Counts tells them
// apart by counting the running rows (migration 0011). The claim's
// Processing record stays on the instance row (see below for where it
// goes when the attempt ends). Unique keys are the primary key of a table
// of their own, taken with one upsert. Wake-ups go out with pg_notify inside the writing
// transaction, so PostgreSQL delivers them at the commit, once per queue;
// each Store listens on one connection of its own (Subscribe), reconnecting
// when it is lost. PostgreSQL delivers each notification to every
// listening connection as a transaction there; WithNotifyWindow coalesces
// a steady stream's notifications per queue, trading pick-up latency for
// that cost (see its doc).
//
// No write takes a namespace-wide or store-wide lock: a write locks only
// the rows it writes. The event feed (Follow) orders records without one:
// each history record carries the id of the transaction that wrote it
// (pg_current_xact_id, raised to its instance's previous record's so one
// instance's records keep their order) and a position from a sequence,
// and a feed delivers only the records whose transaction id is below the
// xmin of its snapshot, so no record ever commits behind it. The
// trade-off: a writing transaction left open anywhere in the PostgreSQL
// cluster delays every feed (and EventCursor) until it ends, never the
// writers. The per-group counters (Inspector.Counts) are insert-only
// changes folded by a compaction the stores run as they write; Counts
// and Lag read both in one snapshot, so they stay exact. An enqueue
// writes no history row: the Created and Scheduled records of every
// instance one statement (or one COPY of a large batch) stores are one
// row of the enqueued table, which the instance row names (migration
// 0012), so its index entries are paid once per batch, not per job. A
// finish that ends an instance writes none either: the outcome and the
// attempt's Processing record stay on the instance row (migration 0013),
// read through partial indexes of the finished rows. The history rows
// left are those of retries (the next claim takes the row's Processing
// record's place) and of the changes written by transactions of several
// statements: rescues, cancels, Admin changes and finishes the fast
// statement did not apply. So a job that runs once is one row, written at
// enqueue and updated at claim and finish, plus its share of its
// enqueue's row. Event cursors are "pg3-..."; those of before (pg1-, pg2-)
// still follow on.
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
// and only if that transaction commits, and while the transaction is open
// it holds nothing other writers wait for.
package pgstore

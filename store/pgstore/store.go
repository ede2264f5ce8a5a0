package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobkit/job/store"
)

// DefaultSchema is the PostgreSQL schema the store's tables live in when
// no WithSchema is given.
const DefaultSchema = "jobkit"

// Store is a store.Store on PostgreSQL. It is safe for concurrent use;
// several Stores (in one process or many) on one database and namespace
// act as one store.
type Store struct {
	pool    *pgxpool.Pool
	cfg     *config
	channel string
	cancels string // the schema's cancel channel (SubscribeCancels)

	lmu      sync.Mutex
	listener *listener // started by the first Subscribe or Follow

	// The compaction of the counter changes (counters.go).
	// claimRecords holds the owners whose claim record (the claims table)
	// this Store made sure of (ensureClaimRecord).
	claimRecords sync.Map
	// quiet holds, per node, what its last heartbeat found about the
	// dead-node rescue that follows it (nodes.go: rescueMemo).
	quiet sync.Map
	// tids holds the row versions of the attempts this Store claimed, for
	// their finish (stmts.finishTID).
	tids        tidMemo
	cmu         sync.Mutex
	compacting  bool
	stopped     bool // Close was called: start no compaction
	lastCompact time.Time

	// gate holds back enqueue notifications (WithNotifyWindow).
	gate notifyGate

	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Notifier = (*Store)(nil)
	_ store.Closer   = (*Store)(nil)
)

type config struct {
	schema   string
	quoted   string
	ns       string
	debounce time.Duration
	poll     time.Duration
	window   time.Duration // WithNotifyWindow
}

// Option configures New and Migrate.
type Option func(*config) error

// WithSchema sets the PostgreSQL schema of the store's tables (default
// DefaultSchema), so several applications share one database each in a
// schema of its own. Migrate and New must be given the same schema. Any
// name of 1 to 50 bytes without a single quote or a NUL byte will do: the
// store quotes it.
func WithSchema(name string) Option {
	return func(c *config) error {
		if name == "" || len(name) > 50 {
			return fmt.Errorf("%w: pgstore.WithSchema(%q): want a schema name of 1 to 50 bytes", store.ErrInvalid, name)
		}
		// The migrations name the schema inside string literals
		// (nextval('schema.seq')), and PostgreSQL's text holds no NUL.
		if strings.ContainsAny(name, "'\x00") {
			return fmt.Errorf("%w: pgstore.WithSchema(%q): a schema name cannot hold a single quote or a NUL byte", store.ErrInvalid, name)
		}
		c.schema = name
		return nil
	}
}

// WithNamespace sets the namespace inside the schema (default ""):
// handles of different namespaces share the tables but never see each
// other's rows.
func WithNamespace(ns string) Option {
	return func(c *config) error { c.ns = ns; return nil }
}

// WithNotifyDebounce sets how long a Subscribe channel's wake-ups are
// coalesced by the listener (default 0: a wake-up goes out as soon as a
// notification arrives; the channel holds one pending value, so a burst
// still costs one wake-up per read). Negative is invalid.
func WithNotifyDebounce(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: pgstore.WithNotifyDebounce(%v); want 0 or more", store.ErrInvalid, d)
		}
		c.debounce = d
		return nil
	}
}

// WithPollInterval sets how often an event feed (Follow) reads the
// history when no notification woke it (default 250 ms): notifications
// make delivery prompt, the poll bounds it when one is lost (a reconnect
// of the listening connection).
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: pgstore.WithPollInterval(%v); want more than 0", store.ErrInvalid, d)
		}
		c.poll = d
		return nil
	}
}

func newConfig(opts []Option) (*config, error) {
	c := &config{schema: DefaultSchema, poll: 250 * time.Millisecond}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	c.quoted = pgx.Identifier{c.schema}.Sanitize()
	return c, nil
}

// New returns a store on pool's database, in the schema and namespace the
// options choose. The schema must have been migrated to SchemaVersion
// (Migrate): a missing or older schema, or one migrated by a newer
// release, is an error wrapping ErrSchema that names the versions and the
// fix. The caller owns pool: the store never closes it; Close stops only
// the store's own listening connection and goroutines.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pgstore.New with a nil pool; pass the *pgxpool.Pool of your database", store.ErrInvalid)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := checkSchema(ctx, pool, cfg); err != nil {
		return nil, err
	}
	ch := "jobkit_" + cfg.schema
	if len(ch) > 63 {
		ch = ch[:63]
	}
	return &Store{pool: pool, cfg: cfg, channel: ch, cancels: cancelChannel(cfg.schema), closed: make(chan struct{})}, nil
}

// Namespace returns the store's namespace.
func (s *Store) Namespace() string { return s.cfg.ns }

// Schema returns the PostgreSQL schema of the store's tables.
func (s *Store) Schema() string { return s.cfg.schema }

// Close stops the store's listening connection and feeds. It does not
// close the pool, which the caller owns.
func (s *Store) Close() error {
	s.cmu.Lock()
	s.stopped = true
	s.cmu.Unlock()
	s.stopGate()
	s.closeOnce.Do(func() { close(s.closed) })
	s.wg.Wait()
	return nil
}

// t returns the qualified name of table name.
func (s *Store) t(name string) string { return s.cfg.quoted + "." + name }

type txKey struct{}

// WithTx returns a context that makes the store's calls made with it run
// inside tx, the caller's transaction, instead of transactions of their
// own: a job scheduled with it (Manager.ScheduleJob(WithTx(ctx, tx), ...))
// exists if and only if tx commits, and no worker sees it before. Its
// wake-up notification is sent by PostgreSQL at the commit. The context is
// marked store.Unshared, so the engine never batches such a call with
// other callers' schedules.
//
// The open transaction holds only the rows it wrote (its instances, and
// their unique keys): other schedules, claims and finishes of the
// namespace never wait for it. Event feeds (Follow) do: they deliver
// records in commit order by waiting for every writing transaction that
// could still commit a record before them, so a transaction left open
// delays the feed (never the writers) until it ends; see the package doc.
func WithTx(ctx context.Context, tx pgx.Tx) context.Context {
	return store.Unshared(context.WithValue(ctx, txKey{}, tx))
}

func txFrom(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txKey{}).(pgx.Tx)
	return tx
}

// write runs fn in a transaction: the caller's (WithTx) or one of its own,
// committed when fn returns nil.
func (s *Store) write(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	if tx := txFrom(ctx); tx != nil {
		return s.wrap(ctx, op, fn(tx))
	}
	began := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		began = true
		if err := fn(tx); err != nil {
			return uncommitted{err} // rolled back, or its connection closed: never committed
		}
		return nil
	})
	if err != nil && !began {
		err = uncommitted{err}
	}
	return s.wrap(ctx, op, err)
}

// uncommitted marks an error of a transaction that never reached its
// COMMIT, so changed nothing; wrap tells it from a COMMIT that failed.
type uncommitted struct{ err error }

func (e uncommitted) Error() string { return e.err.Error() }
func (e uncommitted) Unwrap() error { return e.err }

// querier is what reads need: the pool, or the caller's transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// q returns the querier of ctx: the caller's transaction or the pool.
func (s *Store) q(ctx context.Context) querier {
	if tx := txFrom(ctx); tx != nil {
		return tx
	}
	return s.pool
}

// errStop carries an error that fn returns on purpose (a contract error
// such as ErrNotFound) out of a transaction, so wrap leaves it as it is.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }
func (e errStop) Unwrap() error { return e.err }

// wrap names the operation in err, keeps contract errors as they are, and
// says what to check when the database cannot be reached. An enqueue that
// may have been applied is marked store.ErrOutcomeUnknown (see
// maybeApplied).
func (s *Store) wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var stop errStop
	if errors.As(err, &stop) {
		return stop.err
	}
	if op == "enqueue" && maybeApplied(ctx, err) {
		return store.OutcomeUnknown(s.wrapErr(ctx, op, err))
	}
	return s.wrapErr(ctx, op, err)
}

// maybeApplied reports whether an enqueue that failed with err may still
// have stored its instances (issue 39): its statement or its COMMIT was
// sent and no answer came (the ctx ended, the connection broke, the
// server stalled), or it stored them and a read after failed. It did not
// when err is PostgreSQL's own error (the statement failed, the
// transaction rolled back), when pgx says nothing was sent
// (pgconn.SafeToRetry: the ctx ended before, the connection was busy),
// when no connection could be made (a refused connection), when the
// transaction failed before its COMMIT (write), or when the write runs in
// the caller's transaction (WithTx), whose COMMIT decides. A ctx that
// ends while the pool waits for a free connection is reported as unknown
// too, since pgxpool returns the bare ctx error then.
func maybeApplied(ctx context.Context, err error) bool {
	var (
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
		unc     uncommitted
	)
	switch {
	case txFrom(ctx) != nil, errors.As(err, &unc), errors.As(err, &pgErr), errors.As(err, &connErr), pgconn.SafeToRetry(err):
		return false
	}
	return true
}

// wrapErr is wrap without the outcome check.
func (s *Store) wrapErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)) {
		return fmt.Errorf("pgstore: %s: %w", op, ctx.Err())
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "53100": // disk_full
			return fmt.Errorf("pgstore: %s: %w: %v", op, store.ErrFull, err)
		case "54000": // program_limit_exceeded (a row too large)
			return fmt.Errorf("pgstore: %s: %w: %v", op, store.ErrTooLarge, err)
		}
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	if errors.As(err, &netErr) || errors.As(err, &connErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("pgstore: %s: %w (is PostgreSQL reachable? the next call tries again)", op, err)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// nanos returns t as Unix nanoseconds, 0 for the zero time, clamped to
// the range int64 holds.
func nanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.Before(minTime):
		return math.MinInt64
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// fromNanos is the inverse of nanos.
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

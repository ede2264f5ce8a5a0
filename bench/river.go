package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/jobkit/job/bench/internal/benchkit"
)

// riverConfig says how the River clients are set up; zero keeps River's
// defaults.
type riverConfig struct {
	name                 string
	fetchCooldown        time.Duration // River default 100 ms
	fetchPollInterval    time.Duration // River default 1 s
	jobTimeout           time.Duration // River default 1 min
	rescueStuckJobsAfter time.Duration // River default 1 h
}

// riverSystem is River on one PostgreSQL database. Each queue is a River
// queue of its own name; all share the river_job table.
type riverSystem struct {
	cfg    riverConfig
	pool   *pgxpool.Pool
	insert *river.Client[pgx.Tx] // insert-only client
	quiet  *slog.Logger
}

type benchArgs struct {
	T int64 `json:"t"`
}

func (benchArgs) Kind() string { return "bench" }

// migrateRiver applies River's migrations to the database at url.
func migrateRiver(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

func newRiver(ctx context.Context, url string, cfg riverConfig) (*riverSystem, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	r := &riverSystem{cfg: cfg, pool: pool, quiet: slog.New(slog.NewTextHandler(io.Discard, nil))}
	r.insert, err = river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: r.quiet})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return r, nil
}

func (r *riverSystem) Name() string { return r.cfg.name }
func (r *riverSystem) Close()       { r.pool.Close() }

func (r *riverSystem) Open(ctx context.Context) (benchkit.Queue, error) {
	return r.Attach(ctx, benchkit.NewNamespace("river"))
}

func (r *riverSystem) Attach(_ context.Context, id string) (benchkit.Queue, error) {
	return &riverQueue{sys: r, name: id}, nil
}

func (r *riverSystem) ServerMemoryName() string {
	return "PostgreSQL river_job size (table + indexes)"
}

func (r *riverSystem) Memory(ctx context.Context) (benchkit.Memory, error) {
	m := benchkit.Memory{Heap: benchkit.Heap()}
	err := r.pool.QueryRow(ctx, "SELECT pg_total_relation_size('river_job')").Scan(&m.Server)
	return m, err
}

type riverQueue struct {
	sys    *riverSystem
	name   string
	client *river.Client[pgx.Tx]
}

func (q *riverQueue) ID() string { return q.name }

// Fill inserts with InsertManyFast (COPY), 1,000 jobs per call.
func (q *riverQueue) Fill(ctx context.Context, n int, due time.Time) error {
	const batch = 1000
	for done := 0; done < n; done += batch {
		ps := make([]river.InsertManyParams, min(batch, n-done))
		for i := range ps {
			ps[i] = river.InsertManyParams{Args: benchArgs{T: due.UnixNano()}, InsertOpts: &river.InsertOpts{Queue: q.name}}
		}
		if _, err := q.sys.insert.InsertManyFast(ctx, ps); err != nil {
			return err
		}
	}
	return nil
}

func (q *riverQueue) Insert(ctx context.Context, stamp int64, due time.Time) error {
	c := q.sys.insert
	if q.client != nil {
		c = q.client
	}
	_, err := c.Insert(ctx, benchArgs{T: stamp}, &river.InsertOpts{Queue: q.name, ScheduledAt: due})
	return err
}

// Run starts a River client working the queue. Completed is called when
// the worker returns, before River's completer records it; Drained waits
// for that.
func (q *riverQueue) Run(ctx context.Context, workers int, h benchkit.Hooks) error {
	if q.client != nil {
		return fmt.Errorf("river: Run while running")
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, j *river.Job[benchArgs]) error {
		if h.Started != nil {
			h.Started(j.Args.T)
		}
		if h.Hold != nil {
			h.Hold(ctx)
		}
		if h.Completed != nil {
			h.Completed(j.Args.T)
		}
		return nil
	}))
	c := q.sys.cfg
	cl, err := river.NewClient(riverpgxv5.New(q.sys.pool), &river.Config{
		Logger:               q.sys.quiet,
		Queues:               map[string]river.QueueConfig{q.name: {MaxWorkers: workers}},
		Workers:              ws,
		FetchCooldown:        c.fetchCooldown,
		FetchPollInterval:    c.fetchPollInterval,
		JobTimeout:           c.jobTimeout,
		RescueStuckJobsAfter: c.rescueStuckJobsAfter,
	})
	if err != nil {
		return err
	}
	if err := cl.Start(ctx); err != nil {
		return err
	}
	q.client = cl
	return nil
}

// Drained waits until no job of the queue is left unfinished in
// river_job.
func (q *riverQueue) Drained(ctx context.Context) error {
	for {
		var n int
		err := q.sys.pool.QueryRow(ctx,
			"SELECT count(*) FROM river_job WHERE queue = $1 AND state NOT IN ('completed', 'discarded', 'cancelled')", q.name).Scan(&n)
		if err == nil && n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return err
			}
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (q *riverQueue) Stop(ctx context.Context) error {
	if q.client == nil {
		return nil
	}
	err := q.client.Stop(ctx)
	q.client = nil
	return err
}

// Close deletes the queue's jobs and rewrites river_job, so the table's
// size is back to what other queues hold (the memory figure is its
// growth).
func (q *riverQueue) Close(ctx context.Context) error {
	if _, err := q.sys.pool.Exec(ctx, "DELETE FROM river_job WHERE queue = $1", q.name); err != nil {
		return err
	}
	_, err := q.sys.pool.Exec(ctx, "VACUUM FULL river_job")
	return err
}

// InsertBatch stores the jobs with one InsertMany.
func (q *riverQueue) InsertBatch(ctx context.Context, stamps []int64) error {
	ps := make([]river.InsertManyParams, len(stamps))
	for i, s := range stamps {
		ps[i] = river.InsertManyParams{Args: benchArgs{T: s}, InsertOpts: &river.InsertOpts{Queue: q.name}}
	}
	_, err := q.sys.insert.InsertMany(ctx, ps)
	return err
}

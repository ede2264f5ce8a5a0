package benchkit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/valkey-io/valkey-go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/store/pgstore"
	"github.com/jobkit/job/store/redisstore"
	"github.com/jobkit/job/store/valkeystore"
)

// Stores lists the stores a Jobkit system can run on.
var Stores = []string{"memdb", "redis", "valkey", "etcd", "pg"}

// JobkitConfig says which store a Jobkit system measures and how its
// managers are set up. Zero durations keep jobkit's defaults.
type JobkitConfig struct {
	// Name is the column name; defaults to "jobkit-" + Store.
	Name string
	// Store is one of Stores.
	Store string
	// RedisAddr is the redis-server of the redis and valkey stores.
	RedisAddr string
	// EtcdEndpoints are the etcd servers of the etcd store.
	EtcdEndpoints []string
	// PGURL is the PostgreSQL of the pg store (pgstore, schema PGSchema).
	PGURL string
	// Lease, RescueInterval and PollInterval set the managers' options of
	// those names; Backoff, when set, replaces the default retry backoff.
	Lease, RescueInterval, PollInterval time.Duration
	Backoff                             job.Backoff
	// EtcdLeaseTTL sets etcdstore.WithLeaseTTL (the etcd store's crash
	// rescue horizon); zero keeps its default.
	EtcdLeaseTTL time.Duration
	// PGNotifyWindow sets pgstore.WithNotifyWindow.
	PGNotifyWindow time.Duration
	// FinishLinger, when > 0, sets job.WithFinishLinger (issue 17: how
	// many outcomes one Finish call writes); zero keeps the manager's.
	FinishLinger time.Duration
	// KindLimit, when > 0, sets a cluster-wide concurrency limit of that
	// many running on the bench kind (Admin.SetConcurrencyLimit) when a
	// queue is opened.
	KindLimit int
}

// Jobkit is jobkit on one store, as a System.
type Jobkit struct {
	cfg   JobkitConfig
	rdb   *redis.Client
	vk    valkey.Client
	etcd  *clientv3.Client
	pg    *pgxpool.Pool
	quiet *slog.Logger
}

// PGSchema is the PostgreSQL schema of the pg store's tables.
const PGSchema = "jobkit_bench"

// NewJobkit connects the clients cfg's store needs.
func NewJobkit(cfg JobkitConfig) (*Jobkit, error) {
	if cfg.Name == "" {
		cfg.Name = "jobkit-" + cfg.Store
	}
	j := &Jobkit{cfg: cfg, quiet: slog.New(slog.NewTextHandler(io.Discard, nil))}
	switch cfg.Store {
	case "memdb":
	case "redis":
		// ContextTimeoutEnabled, as redisstore's documentation recommends:
		// without it the store waits for each call in a goroutine of its
		// own, to return when ctx ends (see redisstore, "Timeouts").
		j.rdb = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, PoolSize: 64, ContextTimeoutEnabled: true})
	case "valkey":
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{cfg.RedisAddr}, DisableCache: true})
		if err != nil {
			return nil, fmt.Errorf("valkey client: %w", err)
		}
		j.vk = c
		// used_memory is read with go-redis, which speaks to the same server.
		j.rdb = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	case "etcd":
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("etcd client: %w", err)
		}
		j.etcd = c
	case "pg":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cfgp, err := pgxpool.ParseConfig(cfg.PGURL)
		if err != nil {
			return nil, fmt.Errorf("pgx: %w", err)
		}
		cfgp.MaxConns = 32
		p, err := pgxpool.NewWithConfig(ctx, cfgp)
		if err != nil {
			return nil, fmt.Errorf("pgx: %w", err)
		}
		if err := pgstore.Migrate(ctx, p, pgstore.WithSchema(PGSchema)); err != nil {
			p.Close()
			return nil, err
		}
		j.pg = p
	default:
		return nil, fmt.Errorf("unknown store %q; want one of %s", cfg.Store, strings.Join(Stores, ", "))
	}
	return j, nil
}

// Name implements System.
func (j *Jobkit) Name() string { return j.cfg.Name }

// Close implements System.
func (j *Jobkit) Close() {
	if j.rdb != nil {
		j.rdb.Close()
	}
	if j.vk != nil {
		j.vk.Close()
	}
	if j.etcd != nil {
		j.etcd.Close()
	}
	if j.pg != nil {
		j.pg.Close()
	}
}

// OpenStore returns a store handle on namespace ns (a fresh store for
// memdb, which has no namespaces).
func (j *Jobkit) OpenStore(ns string) (store.Store, error) {
	switch j.cfg.Store {
	case "memdb":
		return opened(memdbstore.New())
	case "redis":
		return opened(redisstore.New(j.rdb, redisstore.WithNamespace(ns)))
	case "valkey":
		return opened(valkeystore.New(j.vk, valkeystore.WithNamespace(ns)))
	case "etcd":
		opts := []etcdstore.Option{etcdstore.WithNamespace(ns)}
		if j.cfg.EtcdLeaseTTL > 0 {
			opts = append(opts, etcdstore.WithLeaseTTL(j.cfg.EtcdLeaseTTL))
		}
		return opened(etcdstore.New(j.etcd, opts...))
	case "pg":
		return opened(pgstore.New(context.Background(), j.pg, pgstore.WithSchema(PGSchema), pgstore.WithNamespace(ns),
			pgstore.WithNotifyWindow(j.cfg.PGNotifyWindow)))
	}
	return nil, fmt.Errorf("unknown store %q", j.cfg.Store)
}

// opened returns a plugin's New results as a store.Store, nil on error
// (not an interface holding a nil pointer).
func opened[S store.Store](s S, err error) (store.Store, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// DropNamespace deletes what namespace ns left on the server.
func (j *Jobkit) DropNamespace(ctx context.Context, ns string) {
	switch {
	case j.rdb != nil:
		unlinkMatching(ctx, j.rdb, "jobkit:{"+ns+"}:*")
	case j.pg != nil:
		// Every table of the schema with a namespace column, read from the
		// catalog so a table a migration adds is not left behind.
		var tables []string
		if rows, err := j.pg.Query(ctx, `SELECT table_name FROM information_schema.columns
			WHERE table_schema = $1 AND column_name = 'ns' ORDER BY table_name`, PGSchema); err == nil {
			for rows.Next() {
				var t string
				if rows.Scan(&t) == nil {
					tables = append(tables, t)
				}
			}
			rows.Close()
		}
		for _, t := range tables {
			_, _ = j.pg.Exec(ctx, "DELETE FROM "+PGSchema+"."+pgx.Identifier{t}.Sanitize()+" WHERE ns = $1", ns)
		}
	case j.etcd != nil:
		// A handle does no I/O until used; it only names the namespace's
		// key prefix.
		if s, err := etcdstore.New(j.etcd, etcdstore.WithNamespace(ns)); err == nil {
			_, _ = j.etcd.Delete(ctx, s.Prefix(), clientv3.WithPrefix())
			_ = s.Close()
		}
	}
}

// unlinkMatching deletes the keys matching pattern, in batches.
func unlinkMatching(ctx context.Context, rdb *redis.Client, pattern string) {
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...) // DEL, not UNLINK: memory figures must not see a lazy free still running
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// NewNamespace returns a fresh namespace name.
func NewNamespace(prefix string) string { return fmt.Sprintf("%s_%08x", prefix, rand.Uint32()) }

// Open implements System.
func (j *Jobkit) Open(ctx context.Context) (Queue, error) {
	return j.Attach(ctx, NewNamespace("bench"))
}

// Attach implements System. memdb has no cross-process queue: a fresh
// store is returned.
func (j *Jobkit) Attach(ctx context.Context, id string) (Queue, error) {
	s, err := j.OpenStore(id)
	if err != nil {
		return nil, err
	}
	q := &jobkitQueue{sys: j, id: id, s: s}
	q.hooks.Store(&Hooks{})
	if q.sched, err = q.manager(1); err != nil {
		return nil, err
	}
	if j.cfg.KindLimit > 0 {
		if err := q.sched.Admin().SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: benchKind, Max: j.cfg.KindLimit}); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// ServerMemoryName implements MemoryMeter.
func (j *Jobkit) ServerMemoryName() string {
	switch {
	case j.rdb != nil:
		return "Redis used_memory"
	case j.etcd != nil:
		return "etcd dbSizeInUse"
	case j.pg != nil:
		return "PostgreSQL schema size"
	}
	return ""
}

// Memory implements MemoryMeter.
func (j *Jobkit) Memory(ctx context.Context) (Memory, error) {
	m := Memory{Heap: Heap()}
	var err error
	switch {
	case j.rdb != nil:
		m.Server, err = RedisUsedMemory(ctx, j.rdb)
	case j.pg != nil:
		_, _ = j.pg.Exec(ctx, "VACUUM "+PGSchema+".instances")
		err = j.pg.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8 FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')`, PGSchema).Scan(&m.Server)
	case j.etcd != nil:
		var st *clientv3.StatusResponse
		if st, err = j.etcd.Status(ctx, j.etcd.Endpoints()[0]); err == nil {
			m.Server = st.DbSizeInUse
		}
	}
	return m, err
}

// Heap returns the Go heap in use after two collections.
func Heap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// RedisUsedMemory returns INFO memory's used_memory.
func RedisUsedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}

type jobkitQueue struct {
	sys   *Jobkit
	id    string
	s     store.Store
	sched *job.Manager // never started: schedules before Run
	run   *job.Manager // the running one, if any
	hooks atomic.Pointer[Hooks]
}

const benchKind = "bench"

func (q *jobkitQueue) manager(workers int) (*job.Manager, error) {
	c := q.sys.cfg
	opts := []job.ManagerOption{job.WithStore(q.s), job.WithWorkers(workers), job.WithLogger(q.sys.quiet),
		job.WithClaimBatch(max(workers, job.DefaultClaimBatch))}
	if c.Lease > 0 {
		opts = append(opts, job.WithLease(c.Lease))
	}
	if c.RescueInterval > 0 {
		opts = append(opts, job.WithRescueInterval(c.RescueInterval))
	}
	if c.PollInterval > 0 {
		opts = append(opts, job.WithPollInterval(c.PollInterval))
	}
	if c.FinishLinger > 0 {
		opts = append(opts, job.WithFinishLinger(c.FinishLinger))
	}
	m, err := job.NewManager(opts...)
	if err != nil {
		return nil, err
	}
	jopts := []job.JobOption{job.WithKind(benchKind),
		job.WithExecutor(func(ctx context.Context, stamp int64) {
			h := q.hooks.Load()
			if h.Started != nil {
				h.Started(stamp)
			}
			if h.Hold != nil {
				h.Hold(ctx)
			}
		}),
		job.WithCompleteProcessor(func(job.Instance, []any) {
			if h := q.hooks.Load(); h.Completed != nil {
				h.Completed(0)
			}
		}),
	}
	if c.Backoff != nil {
		jopts = append(jopts, job.WithBackoff(c.Backoff))
	}
	jb, err := job.NewJob(jopts...)
	if err != nil {
		return nil, err
	}
	if err := m.RegisterJob(jb); err != nil {
		return nil, err
	}
	return m, nil
}

func (q *jobkitQueue) ID() string { return q.id }

// Store returns the queue's store handle.
func (q *jobkitQueue) Store() store.Store { return q.s }

func (q *jobkitQueue) Fill(ctx context.Context, n int, due time.Time) error {
	return FillStore(ctx, q.s, n, due)
}

// FillStore enqueues n instances of the bench kind due at due, 1,000 per
// call, as ScheduleJob would store them.
func FillStore(ctx context.Context, s store.Store, n int, due time.Time) error {
	const batch = 1000
	args := []byte("[" + strconv.FormatInt(due.UnixNano(), 10) + "]")
	for done := 0; done < n; done += batch {
		now := time.Now()
		recs := make([]*store.Instance, min(batch, n-done))
		for i := range recs {
			recs[i] = &store.Instance{
				ID: uuid.Must(uuid.NewV7()).String(), Kind: benchKind, Queue: job.DefaultQueue,
				Args: args, RunAt: due, CreatedAt: now, MaxRetries: job.DefaultMaxRetries,
			}
		}
		res, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: recs, Node: "bench", Now: now})
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
		}
	}
	return nil
}

func (q *jobkitQueue) Insert(ctx context.Context, stamp int64, due time.Time) error {
	m := q.sched
	if q.run != nil {
		m = q.run
	}
	opts := []job.ScheduleOption{job.WithArguments(stamp)}
	if !due.IsZero() {
		opts = append(opts, job.WithScheduleAt(due))
	}
	_, err := m.ScheduleJob(ctx, benchKind, opts...)
	return err
}

// InsertBatch stores the jobs with one Manager.ScheduleJobs.
func (q *jobkitQueue) InsertBatch(ctx context.Context, stamps []int64) error {
	m := q.sched
	if q.run != nil {
		m = q.run
	}
	items := make([]job.BatchItem, len(stamps))
	for i, s := range stamps {
		items[i] = job.BatchItem{Kind: benchKind, Options: []job.ScheduleOption{job.WithArguments(s)}}
	}
	res, err := m.ScheduleJobs(ctx, items...)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

func (q *jobkitQueue) Run(ctx context.Context, workers int, h Hooks) error {
	if q.run != nil {
		return fmt.Errorf("benchkit: Run while running")
	}
	q.hooks.Store(&h)
	m, err := q.manager(workers)
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	q.run = m
	return nil
}

func (q *jobkitQueue) Stop(ctx context.Context) error {
	if q.run == nil {
		return nil
	}
	err := q.run.Stop(ctx)
	q.run = nil
	return err
}

func (q *jobkitQueue) Close(ctx context.Context) error {
	if c, ok := q.s.(store.Closer); ok {
		_ = c.Close()
	}
	q.sys.DropNamespace(ctx, q.id)
	return nil
}

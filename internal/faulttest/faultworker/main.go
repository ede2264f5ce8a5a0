// Command faultworker is a jobkit manager process for fault tests: it runs
// the "fault" job (log a start line, sleep, log an end line) and optionally
// a recurring "tick" job, on a shared Redis, Valkey, etcd or PostgreSQL store
// (or, with -store remote, through jobd: a remote executor), until it
// gets SIGTERM (stop cleanly) or SIGKILL (a crash). Every line it logs is
// one write(2) to an O_APPEND file, so a SIGKILL loses none that were
// written.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/valkey-io/valkey-go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
	"github.com/jobkit/job/store/pgstore"
	"github.com/jobkit/job/store/redisstore"
	"github.com/jobkit/job/store/valkeystore"
)

func main() {
	storeName := flag.String("store", "redis", "redis, valkey, etcd, pg or remote")
	redisAddr := flag.String("redis-addr", "", "redis-server address")
	etcdEndpoints := flag.String("etcd", "", "etcd endpoints, comma-separated")
	pgURL := flag.String("pg", "", "PostgreSQL URL (store pg)")
	jobd := flag.String("jobd", "", "jobd's base URL (store remote: a remote executor through jobd)")
	ns := flag.String("ns", "", "namespace / key prefix")
	node := flag.String("node", "", "node ID")
	lease := flag.Duration("lease", 0, "lease (0: the library's default)")
	rescue := flag.Duration("rescue", 0, "rescue interval (0: the library's default)")
	offset := flag.Duration("clock-offset", 0, "run the manager on a clock this far ahead (negative: behind)")
	workers := flag.Int("workers", 8, "workers")
	runlog := flag.String("runlog", "", "file to append run lines to")
	tick := flag.Duration("tick", 0, "interval of the recurring tick job (0: none)")
	holdRelease := flag.Bool("hold-release", false, "never return from a Wake (log \"release-held\" first): killed then, the process dies between a workflow task's stored end and its dependents' release")
	flag.Parse()

	f, err := os.OpenFile(*runlog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	var mu sync.Mutex
	line := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(f, format+"\n", args...); err != nil {
			log.Fatalf("runlog: %v", err)
		}
	}

	s, closeStore, err := open(*storeName, *redisAddr, *etcdEndpoints, *pgURL, *jobd, *ns, *node)
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()
	if *holdRelease {
		s = &heldRelease{Store: s, line: line}
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := []job.ManagerOption{job.WithStore(s), job.WithNodeID(*node), job.WithWorkers(*workers), job.WithLogger(logger)}
	if *lease > 0 {
		opts = append(opts, job.WithLease(*lease))
	}
	if *rescue > 0 {
		opts = append(opts, job.WithRescueInterval(*rescue))
	}
	if *offset != 0 {
		opts = append(opts, job.WithClock(offsetClock(*offset)))
	}
	mgr, err := job.NewManager(opts...)
	if err != nil {
		log.Fatal(err)
	}
	fault, err := job.NewJob(job.WithKind("fault"), job.WithMaxRetries(job.RetryForever),
		job.WithBackoff(job.ConstantBackoff(10*time.Millisecond)),
		job.WithExecutor(func(ctx context.Context, ji job.Instance, sleepMS int) error {
			line("start %s %d %d", ji.Info().ID, ji.Info().Attempt, time.Now().UnixNano())
			select {
			case <-time.After(time.Duration(sleepMS) * time.Millisecond):
			case <-ctx.Done():
				line("cancel %s %d %d", ji.Info().ID, ji.Info().Attempt, time.Now().UnixNano())
				return ctx.Err()
			}
			line("end %s %d %d", ji.Info().ID, ji.Info().Attempt, time.Now().UnixNano())
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.RegisterJob(fault); err != nil {
		log.Fatal(err)
	}
	// A workflow task: logs its run like "fault" and returns its name.
	wfstep, err := job.NewJob(job.WithKind("wfstep"), job.WithExecutor(func(ji job.Instance) string {
		line("start %s %d %d", ji.Info().ID, ji.Info().Attempt, time.Now().UnixNano())
		line("end %s %d %d", ji.Info().ID, ji.Info().Attempt, time.Now().UnixNano())
		return ji.Info().Task
	}))
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.RegisterJob(wfstep); err != nil {
		log.Fatal(err)
	}
	if *tick > 0 {
		t, err := job.NewJob(job.WithKind("tick"), job.WithInterval(*tick),
			job.WithExecutor(func(ji job.Instance) {
				line("tick %d %d", ji.Info().RunAt.UnixNano(), time.Now().UnixNano())
			}))
		if err != nil {
			log.Fatal(err)
		}
		if err := mgr.RegisterJob(t); err != nil {
			log.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := mgr.Stop(stopCtx); err != nil {
		log.Printf("stop: %v", err)
	}
}

// PGSchema is the PostgreSQL schema the fault tests use.
const PGSchema = "jobkit_fault"

// heldRelease is a store whose Wake never returns (-hold-release): the
// process is to be killed there, after a workflow task's end is stored
// and before its dependents are released.
type heldRelease struct {
	store.Store
	line func(format string, args ...any)
}

func (h *heldRelease) Wake(ctx context.Context, p *store.WakeParams) error {
	h.line("release-held %s", strings.Join(p.IDs, ","))
	select {}
}

// offsetClock is the system clock moved by its value: a host whose clock
// runs ahead (or behind).
type offsetClock time.Duration

func (c offsetClock) Now() time.Time                     { return time.Now().Add(time.Duration(c)) }
func (c offsetClock) NewTimer(d time.Duration) job.Timer { return job.SystemClock{}.NewTimer(d) }

func open(name, redisAddr, etcdEndpoints, pgURL, jobd, ns, node string) (store.Store, func(), error) {
	switch name {
	case "remote":
		// An ordinary manager whose store is jobd (issue 21): its claims,
		// renewals and heartbeats go over one stream to jobd, which
		// holds the real store.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := remote.Dial(ctx, remote.Options{Address: jobd, Namespace: ns, NodeID: node,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	case "redis":
		// As redisstore's docs ask: a call's ctx bounds it even while Redis
		// does not answer, not only go-redis's own read timeout.
		c := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		s, err := redisstore.New(c, redisstore.WithNamespace(ns))
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return s, func() { c.Close() }, nil
	case "valkey":
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
		if err != nil {
			return nil, nil, err
		}
		s, err := valkeystore.New(c, valkeystore.WithNamespace(ns))
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return s, c.Close, nil
	case "etcd":
		c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(etcdEndpoints, ","), DialTimeout: 5 * time.Second})
		if err != nil {
			return nil, nil, err
		}
		s, err := etcdstore.New(c, etcdstore.WithNamespace(ns))
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return s, func() { s.Close(); c.Close() }, nil
	case "pg":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, pgURL)
		if err != nil {
			return nil, nil, err
		}
		// Every process migrates: Migrate is idempotent and safe to run
		// from several at once.
		if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(PGSchema)); err != nil {
			pool.Close()
			return nil, nil, err
		}
		s, err := pgstore.New(ctx, pool, pgstore.WithSchema(PGSchema), pgstore.WithNamespace(ns))
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return s, func() { s.Close(); pool.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown store %q", name)
}

package faulttest_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/valkey-io/valkey-go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/internal/faulttest"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
	"github.com/jobkit/job/store/pgstore"
	"github.com/jobkit/job/store/redisstore"
	"github.com/jobkit/job/store/valkeystore"
)

func TestMain(m *testing.M) {
	code := m.Run()
	faulttest.Cleanup()
	testserver.StopAll()
	os.Exit(code)
}

// cronSpan is how long the recurring-tick test runs; the issue asks for a
// minute. JOBKIT_FAULT_CRON_SPAN shortens it for a quick local run.
func cronSpan(t *testing.T) time.Duration {
	if v := os.Getenv("JOBKIT_FAULT_CRON_SPAN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("JOBKIT_FAULT_CRON_SPAN: %v", err)
		}
		return d
	}
	return time.Minute
}

func redisSpec(t *testing.T) faulttest.Spec { return redisSpecAt(testserver.Redis(t)) }

func redisSpecAt(addr string) faulttest.Spec {
	return faulttest.Spec{Store: "redis", Args: []string{"-redis-addr", addr}, Open: func(t testing.TB, ns string) store.Store {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.WithNamespace(ns))
		if err != nil {
			t.Fatalf("redisstore: %v", err)
		}
		return s
	}}
}

func valkeySpec(t *testing.T) faulttest.Spec {
	addr := testserver.Redis(t)
	return faulttest.Spec{Store: "valkey", Args: []string{"-redis-addr", addr}, Open: func(t testing.TB, ns string) store.Store {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatalf("valkey client: %v", err)
		}
		t.Cleanup(c.Close)
		s, err := valkeystore.New(c, valkeystore.WithNamespace(ns))
		if err != nil {
			t.Fatalf("valkeystore: %v", err)
		}
		return s
	}}
}

func etcdSpec(t *testing.T) faulttest.Spec { return etcdSpecAt(testserver.Etcd(t)) }

func etcdSpecAt(eps []string) faulttest.Spec {
	return faulttest.Spec{Store: "etcd", Args: []string{"-etcd", strings.Join(eps, ",")}, Open: func(t testing.TB, ns string) store.Store {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("etcd client: %v", err)
		}
		s, err := etcdstore.New(c, etcdstore.WithNamespace(ns))
		if err != nil {
			t.Fatalf("etcdstore: %v", err)
		}
		t.Cleanup(func() { s.Close(); c.Close() })
		return s
	}}
}

func pgSpec(t *testing.T) faulttest.Spec { return pgSpecAt(testserver.Postgres(t)) }

// pgSchema is the schema of the fault tests (the faultworker's).
const pgSchema = "jobkit_fault"

func pgSpecAt(url string) faulttest.Spec {
	return faulttest.Spec{Store: "pg", Args: []string{"-pg", url}, Open: func(t testing.TB, ns string) store.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatalf("pgxpool: %v", err)
		}
		if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(pgSchema)); err != nil {
			pool.Close()
			t.Fatalf("PostgreSQL at %s: %v; is it running? (make test starts one and sets JOBKIT_PG_URL)", url, err)
		}
		s, err := pgstore.New(ctx, pool, pgstore.WithSchema(pgSchema), pgstore.WithNamespace(ns))
		if err != nil {
			pool.Close()
			t.Fatalf("pgstore: %v", err)
		}
		t.Cleanup(func() { s.Close(); pool.Close() })
		return s
	}}
}

var specs = map[string]func(t *testing.T) faulttest.Spec{
	"redis":  redisSpec,
	"valkey": valkeySpec,
	"etcd":   etcdSpec,
	"pg":     pgSpec,
}

// TestKillOne runs its stores one after another, not in parallel: it
// bounds how long crashed work takes to run again (1.5 s with default
// settings), and nine worker processes on two cores would measure CPU
// starvation instead.
func TestKillOne(t *testing.T) {
	for _, name := range []string{"redis", "valkey", "etcd", "pg"} {
		t.Run(name, func(t *testing.T) {
			faulttest.KillOne(t, specs[name](t), 3000, 40*time.Millisecond)
		})
	}
}

// TestKillOneRemote is TestKillOne with the workers as remote executors
// (issue 21): managers on remote.Dial to a jobd process on Redis. A
// SIGKILLed worker's stream breaks; its jobs run again elsewhere within
// 2 s, every job completes exactly once in the store, and no two runs of
// one job overlap.
func TestKillOneRemote(t *testing.T) {
	addr := testserver.Redis(t)
	faulttest.KillOne(t, faulttest.RemoteSpec(addr, redisSpecAt(addr).Open), 1500, 40*time.Millisecond)
}

// TestClockSkew runs three workers, one 5 s ahead and one 5 s behind, on
// each store in turn: no job runs twice, nothing is rescued, and the
// skewed workers claim nothing.
func TestClockSkew(t *testing.T) {
	for _, name := range []string{"redis", "valkey", "etcd", "pg"} {
		t.Run(name, func(t *testing.T) {
			faulttest.Skew(t, specs[name](t), 600, 20*time.Millisecond)
		})
	}
}

func TestCronOncePerCluster(t *testing.T) {
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			faulttest.CronOnce(t, spec(t), time.Second, cronSpan(t))
		})
	}
}

// TestServerRestart kills the store's server with SIGKILL mid-run and
// starts it again on the same address and data: Redis with
// --appendonly yes --appendfsync always, etcd as it is (it fsyncs its
// log). Every job completes exactly once and the workers reconnect.
func TestServerRestart(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
		faulttest.ServerRestart(t, redisSpecAt(srv.Addr), 3000, 20*time.Millisecond, func() {
			srv.Kill()
			srv = testserver.RestartRedis(t, srv)
		})
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartEtcd(t)
		faulttest.ServerRestart(t, etcdSpecAt([]string{srv.Addr}), 1500, 20*time.Millisecond, func() {
			srv.Kill()
			srv = testserver.RestartEtcd(t, srv)
		})
	})
	t.Run("pg", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartPostgres(t)
		faulttest.ServerRestart(t, pgSpecAt(testserver.PostgresURL(srv)), 1500, 20*time.Millisecond, func() {
			srv.Kill()
			srv = testserver.RestartPostgres(t, srv)
		})
	})
}

// TestServerFrozen stops etcd with SIGSTOP for longer than both the
// workers' lease (5 s here) and the store handles' etcd lease TTL (10 s),
// then resumes it with SIGCONT. Workers fence what they cannot renew and the
// rescued attempts run again: every job completes exactly once in the
// store, duplicate executions are reported, none is lost.
func TestServerFrozen(t *testing.T) {
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartEtcd(t)
		faulttest.Freeze(t, etcdSpecAt([]string{srv.Addr}), 600, 20*time.Millisecond, []string{"-lease", "5s"}, 12*time.Second,
			func() {
				if err := syscall.Kill(srv.PID(), syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
			},
			func() {
				if err := syscall.Kill(srv.PID(), syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			})
	})
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/store/redisstore"
)

// Tokens of the test servers that turn authentication on.
const (
	adminSecret  = "admin-secret"
	viewerSecret = "viewer-secret"
)

// testServer is a real jobkit server: server.New on an httptest listener
// (HTTP/1.1 and h2c), in front of two started managers on in-memory
// stores (newTestServerOn: another store) (namespaces "default" and "other") that run real executors:
//
//	sum(a, b int) int      logs "adding a and b", completes with a+b
//	block()                runs until canceled
type testServer struct {
	url string
	mgr *job.Manager // the default namespace's
}

func newTestServer(t *testing.T, auth bool) *testServer {
	t.Helper()
	return newTestServerOn(t, auth, memdb)
}

// storeKind makes the store of one namespace of a test server.
type storeKind struct {
	name string
	open func(t *testing.T, ns string) store.Store
}

var (
	memdb = storeKind{"memdb", func(t *testing.T, _ string) store.Store {
		s, err := memdbstore.New()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}}
	redisKind = storeKind{"redis", func(t *testing.T, ns string) store.Store {
		c := redis.NewClient(&redis.Options{Addr: testserver.Redis(t), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.WithNamespace(fmt.Sprintf("jobctl-%d-%d-%s", os.Getpid(), nsSeq.Add(1), ns)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}}
	// nsSeq keeps the Redis namespaces of one test run apart.
	nsSeq atomic.Int64
)

// eachStore runs f as a subtest on the in-memory store and on Redis (the
// test binary's own redis-server, or $JOBKIT_REDIS_ADDR's).
func eachStore(t *testing.T, f func(t *testing.T, sk storeKind)) {
	for _, sk := range []storeKind{memdb, redisKind} {
		t.Run(sk.name, func(t *testing.T) {
			t.Parallel()
			f(t, sk)
		})
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// newTestServerOn is newTestServer on the stores sk makes.
func newTestServerOn(t *testing.T, auth bool, sk storeKind) *testServer {
	t.Helper()
	mgrs, stores := map[string]*job.Manager{}, map[string]store.Store{}
	for _, ns := range []string{"default", "other"} {
		stores[ns] = sk.open(t, ns)
		mgrs[ns] = newTestManager(t, stores[ns])
	}
	cfg := server.Config{Namespaces: mgrs, Logger: slog.New(slog.DiscardHandler)}
	if auth {
		cfg.Tokens = []server.Token{
			{Name: "admin", SHA256: server.HashToken(adminSecret), Role: server.RoleAdmin, Namespaces: []string{"*"}},
			{Name: "viewer", SHA256: server.HashToken(viewerSecret), Role: server.RoleViewer, Namespaces: []string{"default"}},
		}
	}
	cfg.Alerts = alertServices(t, mgrs, stores)
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// POST /hook is the receiver of doc/api.md's alert channels.
	mux := http.NewServeMux()
	mux.Handle("/", srv)
	mux.HandleFunc("POST /hook", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	hs := httptest.NewUnstartedServer(mux)
	hs.Config.Protocols = server.Protocols()
	hs.Start()
	t.Cleanup(hs.Close)
	return &testServer{url: hs.URL, mgr: mgrs["default"]}
}

func newTestManager(t *testing.T, st store.Store) *job.Manager {
	t.Helper()
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(4), job.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]job.JobOption{
		{job.WithKind("sum"), job.WithExecutor(func(ji job.Instance, a, b int) int {
			ji.Infof("adding %d and %d", a, b)
			return a + b
		})},
		{job.WithKind("block"), job.WithExecutor(func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})},
		// needs-gpu requires a label no test node has: it waits.
		{job.WithKind("needs-gpu"), job.WithExecutor(func() {}), job.WithRequiredLabels("gpu")},
		// halves reports half its progress, waits for progressGate(key),
		// then reports it all done.
		{job.WithKind("halves"), job.WithExecutor(func(ctx context.Context, ji job.Instance, key string) error {
			ji.SetProgress(0.5, "half way")
			select {
			case <-progressGate(key):
			case <-ctx.Done():
				return ctx.Err()
			}
			ji.SetProgress(1, "all done")
			return nil
		})},
	} {
		j, err := job.NewJob(opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = m.Stop(sctx)
	})
	return m
}

// waitFor polls cond every 20 ms until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

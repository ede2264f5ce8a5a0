package pgstore_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/pgstore"
	"github.com/jobkit/job/store/storetest"
)

// testSchema is the schema the tests share; namespaces keep them apart.
const testSchema = "jobkit_test"

var (
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

// dbURL returns the URL of the PostgreSQL the tests run against: the one
// JOBKIT_PG_URL names (make test starts a private one), else one started
// for this test binary (testserver.Postgres), stopped by TestMain.
func dbURL(t testing.TB) string {
	t.Helper()
	return testserver.Postgres(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	os.Exit(code)
}

// testPool returns the package's pool on JOBKIT_PG_URL with the test
// schema migrated.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := dbURL(t)
	poolOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			poolErr = err
			return
		}
		cfg.MaxConns = 64
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, poolErr = pgxpool.NewWithConfig(ctx, cfg)
		if poolErr == nil {
			poolErr = pool.Ping(ctx)
		}
		if poolErr == nil {
			poolErr = pgstore.Migrate(ctx, pool, pgstore.WithSchema(testSchema))
		}
	})
	if poolErr != nil {
		t.Fatalf("PostgreSQL at JOBKIT_PG_URL (%s) is unreachable or unusable: %v; start it (make test does) or fix the URL", u, poolErr)
	}
	return pool
}

// open returns a store in namespace ns of the test schema, closed when t
// ends.
func open(t testing.TB, ns string, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	p := testPool(t)
	s, err := pgstore.New(t.Context(), p, append([]pgstore.Option{pgstore.WithSchema(testSchema), pgstore.WithNamespace(ns)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		CancelNotifier: true,
		Limits:         true,
		RateLimits:     true,
		RateLimitRate:  50, // a limited claim serialises on the namespace's lock: too slow for 200 a second on a loaded machine
		Open: func(t testing.TB, ns string) store.Store {
			return open(t, "conformance-"+ns, pgstore.WithPollInterval(20*time.Millisecond))
		},
		ExpireEvents: func(t testing.TB, s store.Store) {
			// Prune every history record: cursors before expire.
			_, err := s.Prune(t.Context(), &store.PruneParams{Now: time.Now(), HistoryBefore: time.Unix(1<<40, 0), Limit: 1 << 30})
			if err != nil {
				t.Fatalf("prune history: %v", err)
			}
		},
	})
}

// TestManagerSuite runs the manager-level scenarios on PostgreSQL.
func TestManagerSuite(t *testing.T) {
	jobtest.Run(t, jobtest.Harness{
		Open: func(t testing.TB, ns string) store.Store {
			return open(t, "manager-"+ns)
		},
	})
}

// TestManagerSuiteNotifyWindow runs the manager-level scenarios with
// coalesced notifications (WithNotifyWindow): jobs held back by the
// window still run, woken by the notification owed at its end.
func TestManagerSuiteNotifyWindow(t *testing.T) {
	jobtest.Run(t, jobtest.Harness{
		Open: func(t testing.TB, ns string) store.Store {
			return open(t, "window-"+ns, pgstore.WithNotifyWindow(20*time.Millisecond))
		},
	})
}

package redisstore_test

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript/scripttest"
	"github.com/jobkit/job/store/redisstore"
	"github.com/jobkit/job/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// client returns a client on the test binary's redis-server, closed when t
// ends.
func client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testserver.Redis(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	c := client(t)
	storetest.Run(t, storetest.Harness{
		CancelNotifier: true,
		Limits:         true,
		RateLimits:     true,
		Open: func(t testing.TB, ns string) store.Store {
			return newStore(t, c, ns)
		},
		ExpireEvents: scripttest.ExpireEvents,
	})
}

func TestRedisSpecific(t *testing.T) {
	open := func(t testing.TB, addr, ns string) store.Store {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		return newStore(t, c, ns)
	}
	// go-redis connects on first use, so a client made before its server
	// is an ordinary one.
	scripttest.Run(t, scripttest.Harness{Open: open, OpenDown: open})
}

func TestManagerSuite(t *testing.T) {
	jobtest.Run(t, jobtest.Harness{Open: harnessOpen(t)})
}

func harnessOpen(t *testing.T) func(testing.TB, string) store.Store {
	c := client(t)
	return func(t testing.TB, ns string) store.Store { return newStore(t, c, ns) }
}

// newStore returns a store on c in namespace ns, failing tb if New does.
func newStore(tb testing.TB, c redis.UniversalClient, ns string) *redisstore.Store {
	tb.Helper()
	s, err := redisstore.New(c, redisstore.WithNamespace(ns))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

package valkeystore_test

import (
	"os"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript/scripttest"
	"github.com/jobkit/job/store/storetest"
	"github.com/jobkit/job/store/valkeystore"
)

// These tests run against redis-server: Valkey is not packaged for the
// Debian release CI uses, and the scripts use nothing Redis 7 and Valkey
// do not share.

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	if code == 0 {
		// valkey-go may keep the background reader and writer of a closed
		// client's connection running for a while, and now and then past
		// the test binary's end, when an event feed's blocking read (XREAD
		// BLOCK) held it at Close: look again for a few seconds, and leave
		// out those two goroutines of valkey-go's own if they stay. Every
		// other goroutine still fails the run.
		opts := []goleak.Option{
			goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*pipe)._backgroundRead"),
			goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*pipe)._backgroundWrite"),
		}
		err := goleak.Find(opts...)
		for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); {
			err = goleak.Find(opts...)
		}
		if err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

func newClient(t testing.TB, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey client for %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestConformance(t *testing.T) {
	c := newClient(t, testserver.Redis(t))
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

func TestValkeySpecific(t *testing.T) {
	scripttest.Run(t, scripttest.Harness{
		Open: func(t testing.TB, addr, ns string) store.Store {
			return newStore(t, newClient(t, addr), ns)
		},
		// valkey.NewClient dials at once and fails with no server; with
		// ForceSingleClient it also returns a client that connects later.
		OpenDown: func(t testing.TB, addr, ns string) store.Store {
			c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
			if err == nil || c == nil {
				t.Fatalf("valkey.NewClient with no server at %s: client %v, err %v; want a client and the dial error", addr, c, err)
			}
			t.Cleanup(c.Close)
			return newStore(t, c, ns)
		},
	})
}

func TestManagerSuite(t *testing.T) {
	jobtest.Run(t, jobtest.Harness{Open: harnessOpen(t)})
}

func harnessOpen(t *testing.T) func(testing.TB, string) store.Store {
	c := newClient(t, testserver.Redis(t))
	return func(t testing.TB, ns string) store.Store { return newStore(t, c, ns) }
}

// newStore returns a store on c in namespace ns, failing tb if New does.
func newStore(tb testing.TB, c valkey.Client, ns string) *valkeystore.Store {
	tb.Helper()
	s, err := valkeystore.New(c, valkeystore.WithNamespace(ns))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

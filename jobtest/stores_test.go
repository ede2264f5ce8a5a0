package jobtest_test

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valkey-io/valkey-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/store/redisstore"
	"github.com/jobkit/job/store/valkeystore"
)

// The manager-level scenarios on every bundled store, against real
// servers (see internal/testserver).

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent(),
			// Client libraries keep background goroutines until closed; the
			// tests close every client they open.
			goleak.IgnoreTopFunction("github.com/valkey-io/valkey-go.(*mux).pipe"),
		); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

func TestMemdb(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	stores := map[string]*memdbstore.Store{}
	jobtest.Run(t, jobtest.Harness{Open: func(t testing.TB, ns string) store.Store {
		mu.Lock()
		defer mu.Unlock()
		if stores[ns] == nil {
			stores[ns] = memdbstore.New()
		}
		return stores[ns]
	}})
}

func TestRedis(t *testing.T) {
	t.Parallel()
	addr := testserver.Redis(t)
	jobtest.Run(t, jobtest.Harness{Open: func(t testing.TB, ns string) store.Store {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		return redisstore.New(c, redisstore.WithNamespace(ns))
	}})
}

func TestValkey(t *testing.T) {
	t.Parallel()
	addr := testserver.Redis(t)
	jobtest.Run(t, jobtest.Harness{Open: func(t testing.TB, ns string) store.Store {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatalf("valkey client: %v", err)
		}
		t.Cleanup(c.Close)
		return valkeystore.New(c, valkeystore.WithNamespace(ns))
	}})
}

func TestEtcd(t *testing.T) {
	t.Parallel()
	eps := testserver.Etcd(t)
	jobtest.Run(t, jobtest.Harness{Open: func(t testing.TB, ns string) store.Store {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("etcd client: %v", err)
		}
		s, err := etcdstore.New(c, etcdstore.WithPrefix(ns+"/"))
		if err != nil {
			t.Fatalf("etcdstore: %v", err)
		}
		t.Cleanup(func() { s.Close(); c.Close() })
		return s
	}})
}

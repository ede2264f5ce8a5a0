package redistest_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/metrics/internal/collectortest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/redisstore"
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

// redisStore opens a store on the test binary's redis-server
// ($JOBKIT_REDIS_ADDR, or one started for the run) in a namespace of the
// test's own.
func redisStore(t *testing.T) store.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testserver.Redis(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ns := fmt.Sprintf("metrics-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	s, err := redisstore.New(c, redisstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCollectorRedis runs work of every outcome on a real Manager on
// Redis ($JOBKIT_REDIS_ADDR, or a redis-server the test starts) and checks
// every metric a scrape returns against it, as TestCollectorMemdb does on
// memdb in the metrics module.
func TestCollectorRedis(t *testing.T) {
	t.Parallel()
	collectortest.Run(t, redisStore(t))
}

package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript/scripttest"
	"github.com/jobkit/job/store/storetest"
)

// clusterClient returns a cluster client on the test binary's Redis
// Cluster (3 primaries, 3 replicas), closed when t ends.
func clusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testserver.RedisClusterAddrs(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConformanceOnCluster runs the store contract against a real Redis
// Cluster through go-redis's ClusterClient: every script's keys must hash
// to one slot (a CROSSSLOT reply fails the call), functions must be loaded
// on every primary, and cancel notices must cross nodes.
func TestConformanceOnCluster(t *testing.T) {
	c := clusterClient(t)
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

// TestManagerSuiteOnCluster runs the manager scenarios on a Redis Cluster.
func TestManagerSuiteOnCluster(t *testing.T) {
	c := clusterClient(t)
	jobtest.Run(t, jobtest.Harness{Open: func(t testing.TB, ns string) store.Store { return newStore(t, c, ns) }})
}

// TestClusterFaults runs scripttest's Redis Cluster scenarios (a primary
// SIGKILLed and its replica promoted) through go-redis's ClusterClient.
func TestClusterFaults(t *testing.T) {
	scripttest.RunCluster(t, scripttest.ClusterHarness{Open: func(t testing.TB, addrs []string, ns string) store.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return newStore(t, c, ns)
	}})
}

package valkeystore_test

import (
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript/scripttest"
	"github.com/jobkit/job/store/storetest"
)

// clusterClient returns a valkey-go client in cluster mode on the test
// binary's Redis Cluster (3 primaries, 3 replicas), closed when t ends.
func clusterClient(t testing.TB) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: testserver.RedisClusterAddrs(t), DisableCache: true})
	if err != nil {
		t.Fatalf("valkey cluster client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestConformanceOnCluster runs the store contract against a real Redis
// Cluster through valkey-go in cluster mode: every script's keys must hash
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
// SIGKILLed and its replica promoted) through valkey-go in cluster mode.
func TestClusterFaults(t *testing.T) {
	scripttest.RunCluster(t, scripttest.ClusterHarness{Open: func(t testing.TB, addrs []string, ns string) store.Store {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatalf("valkey cluster client: %v", err)
		}
		t.Cleanup(c.Close)
		return newStore(t, c, ns)
	}})
}

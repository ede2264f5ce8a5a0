package valkeystore_test

import (
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript/scripttest"
	"github.com/jobkit/job/store/storetest"
	"github.com/jobkit/job/store/valkeystore"
)

// testPartitions is how many partitions the partitioned tests use: more
// than the cluster's primaries, so every primary holds several.
const testPartitions = 5

// newPartitioned returns a store of n partitions on c in namespace ns.
func newPartitioned(tb testing.TB, c valkey.Client, ns string, n int, opts ...valkeystore.Option) *valkeystore.PartitionedStore {
	tb.Helper()
	s, err := valkeystore.NewPartitioned(tb.Context(), c, n, append([]valkeystore.Option{valkeystore.WithNamespace(ns)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// byQueue places instances by queue, as in redisstore's partitioned
// conformance test: the contract's order checks speak of one queue's
// instances, which then share a partition.
var byQueue = valkeystore.WithPartitionKey(func(in *store.Instance) string { return in.Queue })

// TestPartitionedConformance runs the store contract on one redis-server
// with a namespace of several partitions.
func TestPartitionedConformance(t *testing.T) {
	c := newClient(t, testserver.Redis(t))
	storetest.Run(t, storetest.Harness{
		CancelNotifier: true,
		Open: func(t testing.TB, ns string) store.Store {
			return newPartitioned(t, c, ns, testPartitions, byQueue)
		},
		ExpireEvents: scripttest.ExpireEvents,
	})
}

// TestPartitionedConformanceOnCluster runs the store contract on a real
// Redis Cluster through valkey-go in cluster mode, with a namespace of
// several partitions spread over the three primaries: a CROSSSLOT reply
// fails the call that got it.
func TestPartitionedConformanceOnCluster(t *testing.T) {
	c := clusterClient(t)
	storetest.Run(t, storetest.Harness{
		CancelNotifier: true,
		Open: func(t testing.TB, ns string) store.Store {
			return newPartitioned(t, c, ns, testPartitions, byQueue)
		},
		ExpireEvents: scripttest.ExpireEvents,
	})
}

// TestPartitionedManagerSuiteOnCluster runs the manager scenarios on a
// Redis Cluster with a namespace of several partitions (the default
// placement: an even spread).
func TestPartitionedManagerSuiteOnCluster(t *testing.T) {
	c := clusterClient(t)
	jobtest.Run(t, jobtest.Harness{Open: func(t testing.TB, ns string) store.Store {
		return newPartitioned(t, c, ns, testPartitions)
	}, PartitionOf: func(t testing.TB, ns, id string) int {
		t.Helper()
		part, ok, err := newPartitioned(t, c, ns, testPartitions).PartitionOf(t.Context(), id)
		if err != nil || !ok {
			t.Fatalf("partition of %s: %v (found: %v)", id, err, ok)
		}
		return part
	}})
}

// TestPartitionedClusterFaults runs scripttest's Redis Cluster scenarios
// (a primary SIGKILLed and its replica promoted) on a namespace of
// several partitions, through valkey-go in cluster mode.
func TestPartitionedClusterFaults(t *testing.T) {
	scripttest.RunCluster(t, scripttest.ClusterHarness{Open: func(t testing.TB, addrs []string, ns string) store.Store {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatalf("valkey cluster client: %v", err)
		}
		t.Cleanup(c.Close)
		return newPartitioned(t, c, ns, testPartitions)
	}})
}

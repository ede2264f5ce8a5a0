package redisstore_test

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/redisstore"
)

// TestReplicaAcksSurviveFailover runs a primary and its replica, then
// fails over to the replica (the primary SIGKILLed, the replica made a
// primary). Schedules acknowledged with WithReplicaAcks are all there.
// Then the replica is cut off from its primary first (REPLICAOF NO ONE:
// what a network partition does; a SIGSTOPped replica still finds the
// stream in its socket when it resumes): a schedule acknowledged without
// WithReplicaAcks is lost, which is Redis's asynchronous replication, and
// the same schedule with it was reported, not acknowledged.
func TestReplicaAcksSurviveFailover(t *testing.T) {
	t.Parallel()
	primary := testserver.StartRedis(t)
	host, port, _ := net.SplitHostPort(primary.Addr)
	replica := testserver.StartRedis(t, "--replicaof", host, port)
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	t.Cleanup(func() { rc.Close() })
	testserver.WaitReplicaLinkUp(t, replica.Addr)

	pc := redis.NewClient(&redis.Options{Addr: primary.Addr, MaxRetries: -1})
	t.Cleanup(func() { pc.Close() })
	const ns = "acks"
	acked, err := redisstore.New(pc, redisstore.WithNamespace(ns), redisstore.WithReplicaAcks(1, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	plain := newStore(t, pc, ns)
	ctx := t.Context()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	enqueue := func(s store.Store, id string) error {
		_, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{{ID: id, Kind: "k", Queue: "q", RunAt: now, CreatedAt: now}}, Now: now, Node: "n"})
		return err
	}
	var want []string
	for i := range 20 {
		id := fmt.Sprintf("a-%02d", i)
		if err := enqueue(acked, id); err != nil {
			t.Fatalf("acknowledged schedule %s with the replica up: %v", id, err)
		}
		want = append(want, id)
	}
	if err := rc.Do(ctx, "replicaof", "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	if err := enqueue(plain, "b-plain"); err != nil {
		t.Fatalf("schedule without WithReplicaAcks, replica cut off: %v", err)
	}
	start := time.Now()
	err = enqueue(acked, "b-acked")
	if !errors.Is(err, store.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "acknowledged by 0 of 1 replicas") {
		t.Fatalf("schedule with WithReplicaAcks(1), replica cut off: %v; want ErrOutcomeUnknown saying 0 of 1 replicas acknowledged", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("schedule with a 500ms replica timeout took %v", took)
	}
	// The primary dies; the replica, a primary already, takes over.
	primary.Kill()
	ins, err := newStore(t, rc, ns).LookupInstances(ctx, &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range ins {
		got = append(got, in.ID)
	}
	slices.Sort(got)
	// b-plain was acknowledged and is lost; b-acked was reported.
	if !slices.Equal(got, want) {
		t.Fatalf("instances after the failover: %v; want the 20 acknowledged with WithReplicaAcks (a-00..a-19) and neither b-plain nor b-acked, scheduled while the replica was cut off", got)
	}
}

// TestReplicaAcksOnCluster: on a cluster client the WAIT goes, on the
// connection of the script, to the primary of the namespace's slot: with
// that primary's replica stopped the schedule is not acknowledged (a WAIT
// on another connection or node would return at once with 1).
func TestReplicaAcksOnCluster(t *testing.T) {
	t.Parallel()
	cl := testserver.StartRedisCluster(t, 3, 1)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { c.Close() })
	const ns = "acks-cluster"
	s, err := redisstore.New(c, redisstore.WithNamespace(ns), redisstore.WithReplicaAcks(1, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	enqueue := func(id string) error {
		_, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{{ID: id, Kind: "k", Queue: "q", RunAt: now, CreatedAt: now}}, Now: now, Node: "n"})
		return err
	}
	if err := enqueue("up"); err != nil {
		t.Fatalf("schedule with the replica up: %v", err)
	}
	replica := replicaOf(t, cl, c, "jobkit:{"+ns+"}:x")
	if err := syscall.Kill(replica.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	err = enqueue("stopped")
	syscall.Kill(replica.PID(), syscall.SIGCONT)
	if !errors.Is(err, store.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "acknowledged by 0 of 1 replicas") {
		t.Fatalf("schedule with the replica stopped: %v; want ErrOutcomeUnknown saying 0 of 1 replicas acknowledged", err)
	}
}

func TestReplicaAcksInvalid(t *testing.T) {
	c := client(t)
	for _, o := range []redisstore.Option{redisstore.WithReplicaAcks(-1, time.Second), redisstore.WithReplicaAcks(1, 0)} {
		if _, err := redisstore.New(c, o); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "WithReplicaAcks") {
			t.Errorf("New with a bad WithReplicaAcks: %v; want ErrInvalid naming the option", err)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": testserver.Redis(t)}})
	t.Cleanup(func() { ring.Close() })
	if _, err := redisstore.New(ring, redisstore.WithReplicaAcks(1, time.Second)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("New on a Ring with WithReplicaAcks: %v; want ErrInvalid", err)
	}
}

// replicaOf returns the replica of the primary that serves key (the
// cluster client c's primary for it), once the primary lists it online.
func replicaOf(t *testing.T, cl *testserver.RedisCluster, c *redis.ClusterClient, key string) *testserver.Process {
	t.Helper()
	var info string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		primary, err := c.MasterForKey(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if info, err = primary.Info(t.Context(), "replication").Result(); err != nil {
			t.Fatal(err)
		}
		if n := cl.OnlineReplicaIn(info); n != nil {
			return n
		}
	}
	t.Fatalf("no online replica of the primary serving %s: %s", key, info)
	return nil
}

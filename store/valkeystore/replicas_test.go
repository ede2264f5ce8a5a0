package valkeystore_test

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/valkeystore"
)

// TestReplicaAcksSurviveFailover is redisstore's test of the same name
// with valkey-go: schedules acknowledged with WithReplicaAcks survive the
// failover to the replica; with the replica cut off, one acknowledged
// without it is lost and one with it was reported.
func TestReplicaAcksSurviveFailover(t *testing.T) {
	t.Parallel()
	primary := testserver.StartRedis(t)
	host, port, _ := net.SplitHostPort(primary.Addr)
	replica := testserver.StartRedis(t, "--replicaof", host, port)
	rc := newClient(t, replica.Addr)
	testserver.WaitReplicaLinkUp(t, replica.Addr)

	pc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{primary.Addr}, DisableCache: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Close)
	const ns = "acks"
	acked, err := valkeystore.New(pc, valkeystore.WithNamespace(ns), valkeystore.WithReplicaAcks(1, 500*time.Millisecond))
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
	if err := rc.Do(ctx, rc.B().Replicaof().No().One().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := enqueue(plain, "b-plain"); err != nil {
		t.Fatalf("schedule without WithReplicaAcks, replica cut off: %v", err)
	}
	err = enqueue(acked, "b-acked")
	if !errors.Is(err, store.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "acknowledged by 0 of 1 replicas") {
		t.Fatalf("schedule with WithReplicaAcks(1), replica cut off: %v; want ErrOutcomeUnknown saying 0 of 1 replicas acknowledged", err)
	}
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
	if !slices.Equal(got, want) {
		t.Fatalf("instances after the failover: %v; want the 20 acknowledged with WithReplicaAcks (a-00..a-19) and neither b-plain nor b-acked, scheduled while the replica was cut off", got)
	}
}

// TestReplicaAcksOnCluster: valkey-go's cluster client sends the WAIT,
// given the keys' slot, with the script on one connection to the primary
// of the namespace's slot: with that primary's replica stopped the
// schedule is not acknowledged.
func TestReplicaAcksOnCluster(t *testing.T) {
	t.Parallel()
	cl := testserver.StartRedisCluster(t, 3, 1)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const ns = "acks-cluster"
	s, err := valkeystore.New(c, valkeystore.WithNamespace(ns), valkeystore.WithReplicaAcks(1, 500*time.Millisecond))
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
		t.Fatalf("schedule with the replica %s stopped: %v; want ErrOutcomeUnknown saying 0 of 1 replicas acknowledged", replica.Addr, err)
	}
}

func TestReplicaAcksInvalid(t *testing.T) {
	c := newClient(t, testserver.Redis(t))
	for _, o := range []valkeystore.Option{valkeystore.WithReplicaAcks(-1, time.Second), valkeystore.WithReplicaAcks(1, 0)} {
		if _, err := valkeystore.New(c, o); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "WithReplicaAcks") {
			t.Errorf("New with a bad WithReplicaAcks: %v; want ErrInvalid naming the option", err)
		}
	}
}

// replicaOf returns the replica of the primary that serves key (asked
// through the cluster client c, which routes by the key's slot), once
// the primary lists it online.
func replicaOf(t *testing.T, cl *testserver.RedisCluster, c valkey.Client, key string) *testserver.Process {
	t.Helper()
	var info string
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if info, err = c.Do(t.Context(), c.B().Info().Section("replication").Build().SetSlot(key)).ToString(); err != nil {
			t.Fatal(err)
		}
		if n := cl.OnlineReplicaIn(info); n != nil {
			return n
		}
	}
	t.Fatalf("no online replica of the primary serving %s: %s", key, info)
	return nil
}

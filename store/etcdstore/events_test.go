package etcdstore_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
)

// A feed whose etcd client is closed under it ends with an error event
// instead of retrying its watch until its ctx ends.
func TestFollowClientClosed(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: testserver.Etcd(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := etcdstore.New(cli, etcdstore.WithNamespace(namespace(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.Follow(ctx, &store.FollowParams{})
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	select {
	case ev, ok := <-ch:
		if !ok || ev.Err == nil {
			t.Fatalf("feed after the client closed: %+v (open %v), want an error event", ev, ok)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("feed gave nothing within 5s of its client closing")
	}
}

// A feed outlives a restart of etcd: its watch ends, and it watches again
// from its position once etcd is back, delivering what was written after
// with nothing lost or repeated.
func TestFollowServerRestart(t *testing.T) {
	p := testserver.StartEtcd(t)
	cli := newClient(t, []string{p.Addr})
	s, err := etcdstore.New(cli, etcdstore.WithNamespace(namespace(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.Follow(ctx, &store.FollowParams{})
	if err != nil {
		t.Fatal(err)
	}
	enq := func(id string) error {
		now := time.Now()
		_, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{{ID: id, Kind: "k", Queue: "q", RunAt: now, CreatedAt: now}}, Now: now})
		return err
	}
	want := func(id string) {
		t.Helper()
		for _, st := range []store.State{store.Created, store.Scheduled} {
			select {
			case ev, ok := <-ch:
				if !ok || ev.Err != nil || ev.InstanceID != id || ev.State != st {
					t.Fatalf("event %+v (open %v), want %s %v", ev, ok, id, st)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("no event for %s %v within 15s", id, st)
			}
		}
	}
	if err := enq("a"); err != nil {
		t.Fatal(err)
	}
	want("a")
	p.Kill()
	p = testserver.RestartEtcd(t, p)
	defer p.Stop()
	deadline := time.Now().Add(15 * time.Second)
	for enq("b") != nil {
		if time.Now().After(deadline) {
			t.Fatal("Enqueue still fails 15s after the restart")
		}
		time.Sleep(50 * time.Millisecond)
	}
	want("b")
}

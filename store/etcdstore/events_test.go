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

package etcdstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
	"github.com/jobkit/job/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newClient connects to the test binary's etcd; the client is closed when t
// ends.
func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// namespace returns a namespace of t's own.
func namespace(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return "test-" + name + "-" + hex.EncodeToString(b[:])
}

// keyPrefix is the documented key prefix of namespace ns.
func keyPrefix(ns string) string { return "jobkit/" + url.PathEscape(ns) + "/" }

// open returns a store on its own client in namespace ns, closed when t
// ends.
func open(t testing.TB, ns string, opts ...etcdstore.Option) *etcdstore.Store {
	t.Helper()
	cli := newClient(t, testserver.Etcd(t))
	s, err := etcdstore.New(cli, append([]etcdstore.Option{etcdstore.WithNamespace(ns)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// cleanup deletes everything of namespace ns when t ends (and nothing
// else).
func cleanup(t testing.TB, ns string) {
	p := keyPrefix(ns)
	cli := newClient(t, testserver.Etcd(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// Part by part, so a benchmark's million keys do not make one
		// request that times out.
		for _, part := range []string{"l/", "lt/", "lk/", "i/", "s/", "r/", "ic/", "icb/", "f/", "fb/", ""} {
			if _, err := cli.Delete(ctx, p+part, clientv3.WithPrefix()); err != nil {
				t.Errorf("delete prefix %s: %v", p+part, err)
			}
		}
	})
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB, ns string) store.Store {
			return open(t, "conformance-"+ns)
		},
		ExpireEvents:   compactAll,
		NodeClock:      true,
		CancelNotifier: true,
	})
}

// TestManagerSuite runs the manager-level scenarios on etcd.
func TestManagerSuite(t *testing.T) {
	jobtest.Run(t, jobtest.Harness{
		Open: func(t testing.TB, ns string) store.Store {
			return open(t, "manager-"+ns)
		},
	})
}

// compactAll writes a probe key and compacts etcd at the probe's revision,
// so every event cursor taken before expires, the last write's events
// included (on the whole server: storetest calls it only while no other
// events test runs).
func compactAll(t testing.TB, s store.Store) {
	t.Helper()
	cli := newClient(t, testserver.Etcd(t))
	resp, err := cli.Put(t.Context(), "compact-probe", "")
	if err != nil {
		t.Fatalf("etcd revision: %v", err)
	}
	if _, err := cli.Compact(t.Context(), resp.Header.Revision); err != nil {
		t.Fatalf("etcd compact: %v", err)
	}
}

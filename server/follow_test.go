package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// TestFollowerForgetsOldRecords: following a long-running instance keeps
// only the records it may still see again (those within followSkew of the
// newest sent) in memory, not every record it ever sent; and still sends
// each record once, in order.
func TestFollowerForgetsOldRecords(t *testing.T) {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := job.NewManager(job.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	const id, n, step = "inst-1", 120, 10 * time.Second // 20 minutes of records
	var sent []string
	f := &follower{m: m, id: id, seen: map[uint64]time.Time{}, send: func(r *store.LogRecord) error {
		sent = append(sent, r.Message)
		return nil
	}}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	for i := range n {
		rec := &store.LogRecord{InstanceID: id, Kind: "k", Attempt: 1, Level: store.LevelInfo, Time: t0.Add(time.Duration(i) * step), Node: "n", Message: fmt.Sprint(i)}
		if err := st.AppendLogs(t.Context(), []*store.LogRecord{rec}); err != nil {
			t.Fatal(err)
		}
		if err := f.round(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(sent) != n {
		t.Fatalf("sent %d records, want %d: %v", len(sent), n, sent)
	}
	for i, msg := range sent {
		if msg != fmt.Sprint(i) {
			t.Fatalf("record %d sent as %q; want each once, in order: %v", i, msg, sent)
		}
	}
	if limit := int(followSkew/step) + 1; len(f.seen) > limit {
		t.Fatalf("the follower remembers %d records after sending %d; want at most %d (those within followSkew of the newest)", len(f.seen), n, limit)
	}
}

// TestStreamsEndWhenTheClientLeaves: a client that goes away (its ctx
// ends) ends its Watch and FollowLogs handlers on the server at once, on
// every protocol, so an abandoned stream holds no goroutine or feed.
func TestStreamsEndWhenTheClientLeaves(t *testing.T) {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, st, &gate{})
	srv, err := New(Config{Namespaces: map[string]*job.Manager{"default": m}})
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64 // Watch and FollowLogs handlers running
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/Watch") || strings.HasSuffix(r.URL.Path, "/FollowLogs") {
			open.Add(1)
			defer open.Add(-1)
		}
		srv.ServeHTTP(w, r)
	}))
	hs.Config.Protocols = Protocols()
	hs.Start()
	t.Cleanup(hs.Close)
	blocked, err := m.ScheduleJob(t.Context(), "block")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			// The calls must return before the first message (FollowLogs
			// of an instance that logged nothing yet): fail, not hang.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			c := (&env{url: hs.URL}).dial(t, p, "", "")
			w, err := c.jobs.Watch(ctx, connect.NewRequest(&pb.WatchRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			f, err := c.jobs.FollowLogs(ctx, connect.NewRequest(&pb.FollowLogsRequest{InstanceId: blocked.ID}))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			waitFor(t, "both streams to be served", func() bool { return open.Load() == 2 })
			cancel()
			waitFor(t, "both stream handlers to return after the client left", func() bool { return open.Load() == 0 })
		})
	}
}

package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/redisstore"
)

// TestCommand runs the command on a real redis-server: refused while a
// source node is live (exit 1, nothing moved), then exit 2 while an
// instance still runs in the source, with every scheduled instance and
// the document collection found in the source's keys moved; then exit 0
// once the running one finished.
func TestCommand(t *testing.T) {
	addr := testserver.Redis(t)
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ns := fmt.Sprintf("cmd-%d", time.Now().UnixNano())
	src, err := redisstore.New(c, redisstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var ins []*store.Instance
	for i := range 10 {
		ins = append(ins, &store.Instance{ID: fmt.Sprintf("c-%d", i), Kind: "k", Queue: []string{"q", "busy"}[i/9], RunAt: now, CreatedAt: now})
	}
	if _, err := src.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Node: "p", Now: now}); err != nil {
		t.Fatal(err)
	}
	cr, err := src.Claim(ctx, &store.ClaimParams{Queue: "busy", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Hour)})
	if err != nil || len(cr.Instances) != 1 {
		t.Fatalf("claim: %v %v", cr, err)
	}
	if _, err := src.PutDocument(ctx, &store.PutDocumentParams{Collection: "calendars", Name: "eu", Body: []byte(`{}`), Now: now}); err != nil {
		t.Fatal(err)
	}
	hb := &store.HeartbeatParams{Node: store.NodeInfo{ID: "worker-1"}, Now: now, DeadAfter: 10 * time.Second, Retain: time.Hour}
	if _, err := src.Heartbeat(ctx, hb); err != nil {
		t.Fatal(err)
	}
	args := []string{"-from", addr, "-ns", ns, "-to", addr, "-to-ns", ns + "-dst", "-partitions", "4"}
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 1 || !strings.Contains(errb.String(), "worker-1") {
		t.Fatalf("with a live source node: exit %d, stderr %q", code, errb.String())
	}
	t.Logf("refused: %s", strings.TrimSpace(errb.String()))
	dst, err := redisstore.NewPartitioned(ctx, c, 4, redisstore.WithNamespace(ns+"-dst"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := dst.LookupInstances(ctx, &store.Query{}); len(got) != 0 {
		t.Fatalf("a refused run moved %d instances", len(got))
	}
	hb.Leaving = true
	if _, err := src.Heartbeat(ctx, hb); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run(args, &out, &errb); code != 2 || !strings.Contains(out.String(), "still running in the source: c-9") || !strings.Contains(out.String(), "moved: 9") || !strings.Contains(out.String(), "collections calendars") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	t.Logf("with one running:\n%s", out.String())
	if got, _ := dst.LookupInstances(ctx, &store.Query{}); len(got) != 9 {
		t.Fatalf("the target holds %d instances, want 9", len(got))
	}
	if _, err := dst.GetDocument(ctx, "calendars", "eu"); err != nil {
		t.Fatal(err)
	}
	// The running one ends with a retry: scheduled again, then moved.
	if fr, err := src.Finish(ctx, &store.FinishParams{Owner: "w", Now: time.Now(), Outcomes: []store.Outcome{{ID: "c-9", Attempt: 1, State: store.Scheduled, RunAt: time.Now()}}}); err != nil || fr[0].Err != nil {
		t.Fatalf("finish: %v %v", fr, err)
	}
	out.Reset()
	if code := run(args, &out, &errb); code != 0 || !strings.Contains(out.String(), "moved: 1") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if got, _ := dst.LookupInstances(ctx, &store.Query{}); len(got) != 10 {
		t.Fatalf("the target holds %d instances, want 10", len(got))
	}
}

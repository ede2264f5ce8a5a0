package server

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// recordingClient records the gRPC encoding headers of the calls it makes.
type recordingClient struct {
	base *http.Client
	mu   sync.Mutex
	// accept and got are the request's Grpc-Accept-Encoding and the
	// response's Grpc-Encoding of every call.
	accept, got []string
}

func (c *recordingClient) Do(r *http.Request) (*http.Response, error) {
	resp, err := c.base.Do(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.accept = append(c.accept, r.Header.Get("Grpc-Accept-Encoding"))
	if resp != nil {
		c.got = append(c.got, resp.Header.Get("Grpc-Encoding"))
	}
	return resp, err
}

// TestExecutorSessionUncompressed: a worker neither asks for nor gets
// gzipped messages. Compressing every small message of a session (each
// push of tasks, each reply) was the largest single cost jobd paid per
// remote task.
func TestExecutorSessionUncompressed(t *testing.T) {
	st, _ := memdbstore.New()
	_, url := executorServer(t, st, nil, "default")
	hc := &recordingClient{base: httpClient(t, true, "", "")}
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "n1", HTTPClient: hc, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if _, err := rs.ListQueues(t.Context()); err != nil { // a unary call too
		t.Fatal(err)
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if len(hc.accept) < 2 {
		t.Fatalf("recorded %d calls, want the session and a unary call", len(hc.accept))
	}
	for i := range hc.accept {
		if strings.Contains(hc.accept[i], "gzip") || strings.Contains(hc.got[i], "gzip") {
			t.Fatalf("call %d: Grpc-Accept-Encoding %q, Grpc-Encoding %q; want no gzip", i, hc.accept[i], hc.got[i])
		}
	}
}

// gatedStore holds every Claim while gated, until open is closed.
type gatedStore struct {
	store.Store
	gated atomic.Bool
	open  chan struct{}
}

func (g *gatedStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if g.gated.Load() {
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Store.Claim(ctx, p)
}

func (g *gatedStore) Subscribe(ctx context.Context, queue string) (<-chan struct{}, error) {
	return g.Store.(store.Notifier).Subscribe(ctx, queue)
}

// TestExecutorClaimFromBuffer: a claim that finds pushed tasks returns
// them at once, without a round trip to jobd and its store (which used to
// stand between every pushed task and its start), and tells jobd the
// credit it has left in passing, so jobd goes on pushing.
func TestExecutorClaimFromBuffer(t *testing.T) {
	mem, _ := memdbstore.New()
	st := &gatedStore{Store: mem, open: make(chan struct{})}
	defer func() {
		if st.gated.Load() {
			close(st.open)
		}
	}()
	_, url := executorServer(t, st, nil, "default")
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "n1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ctx := t.Context()
	now := time.Now()
	if _, err := rs.Heartbeat(ctx, &store.HeartbeatParams{Node: store.NodeInfo{ID: "n1", Workers: 4, Kinds: []string{"k"}}, Now: now, DeadAfter: time.Minute, Retain: time.Hour}); err != nil {
		t.Fatal(err)
	}
	pushed, err := rs.Subscribe(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	claim := func(ctx context.Context) (*store.ClaimResult, error) {
		now := time.Now()
		return rs.Claim(ctx, &store.ClaimParams{Queue: "default", Owner: "n1", Limit: 4, Now: now, LeaseUntil: now.Add(time.Minute), Kinds: []string{"k"}})
	}
	if r, err := claim(ctx); err != nil || len(r.Instances) != 0 { // credit 4
		t.Fatalf("first claim: %v, %v", r, err)
	}
	enqueue := func(id string) {
		t.Helper()
		now := time.Now()
		if _, err := mem.Enqueue(ctx, &store.EnqueueParams{Now: now, Instances: []*store.Instance{{ID: id, Kind: "k", Queue: "default", Args: []byte("[]"), RunAt: now, CreatedAt: now}}}); err != nil {
			t.Fatal(err)
		}
	}
	waitPush := func(what string) {
		t.Helper()
		select {
		case <-pushed:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting until %s", what)
		}
	}
	enqueue("a")
	waitPush("a is pushed")
	st.gated.Store(true) // from now, a claim that reaches the store waits
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r, err := claim(cctx)
	if err != nil || len(r.Instances) != 1 || r.Instances[0].ID != "a" {
		t.Fatalf("claim with a pushed task waiting: %v, %v; want a at once, without a store claim", r, err)
	}
	st.gated.Store(false)
	close(st.open)
	enqueue("b")
	waitPush("b is pushed on the credit the buffered claim left")
	if r, err := claim(ctx); err != nil || len(r.Instances) != 1 || r.Instances[0].ID != "b" {
		t.Fatalf("claim after the second push: %v, %v; want b", r, err)
	}
}

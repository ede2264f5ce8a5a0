package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/api/remote/wire"
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

// TestExecutorSessionEncodings: a worker that reads msgpack gets its
// tasks and replies in msgpack; one that says nothing of encodings (an
// older worker) gets JSON, as before.
func TestExecutorSessionEncodings(t *testing.T) {
	for _, c := range []struct {
		name      string
		encodings []string
		want      string
	}{
		{"msgpack", []string{"cbor", wire.Msgpack}, wire.Msgpack},
		{"json", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _ := memdbstore.New()
			_, url := executorServer(t, st, nil, "default")
			s := rawSession(t, url, "", "")
			if err := s.Send(hello(&pb.Hello{NodeId: "n", Slots: 4, Encodings: c.encodings})); err != nil {
				t.Fatal(err)
			}
			w, err := s.Receive()
			if err != nil || w.GetWelcome() == nil {
				t.Fatalf("welcome: %v, %v", w, err)
			}
			if got := w.GetWelcome().GetEncoding(); got != c.want {
				t.Fatalf("welcome encoding %q, want %q", got, c.want)
			}
			now := time.Now()
			call := func(id uint64, method string, params any) {
				t.Helper()
				sc := &pb.StoreCall{Id: id, Method: method}
				var err error
				if c.want == wire.Msgpack {
					sc.ParamsMsgpack, err = wire.MarshalMsgpack(params)
				} else {
					sc.ParamsJson, err = json.Marshal(params)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Send(&pb.ConnectRequest{Msg: &pb.ConnectRequest_Call{Call: sc}}); err != nil {
					t.Fatal(err)
				}
			}
			reply := func() *pb.StoreReply {
				t.Helper()
				for {
					m, err := s.Receive()
					if err != nil {
						t.Fatal(err)
					}
					if r := m.GetReply(); r != nil {
						if r.GetError() != nil {
							t.Fatalf("reply %d: %v", r.GetId(), r.GetError())
						}
						return r
					}
				}
			}
			// A heartbeat first (calls run at once, in no set order): a
			// session whose node never heartbeat gets no credit.
			call(1, wire.MethodHeartbeat, &store.HeartbeatParams{Node: store.NodeInfo{ID: "n", Workers: 4, Kinds: []string{"k"}}, Now: now, DeadAfter: time.Minute, Retain: time.Hour})
			reply()
			call(2, wire.MethodClaim, &store.ClaimParams{Queue: "default", Owner: "n", Limit: 4, Now: now, LeaseUntil: now.Add(time.Minute), Kinds: []string{"k"}})
			if r := reply(); (c.want == wire.Msgpack) != (len(r.GetResultMsgpack()) > 0) {
				t.Fatalf("claim reply: json %q, msgpack %x; want the session's encoding %q", r.GetResultJson(), r.GetResultMsgpack(), c.want)
			}
			if _, err := st.Enqueue(t.Context(), &store.EnqueueParams{Now: now, Instances: []*store.Instance{
				{ID: "a", Kind: "k", Queue: "default", Args: []byte(`[1]`), RunAt: now, CreatedAt: now, Metadata: map[string]string{"m": "v"}},
			}}); err != nil {
				t.Fatal(err)
			}
			for {
				m, err := s.Receive()
				if err != nil {
					t.Fatal(err)
				}
				tasks := m.GetTasks()
				if tasks == nil {
					continue
				}
				var got []*store.Instance
				if c.want == wire.Msgpack {
					if len(tasks.GetInstancesJson()) > 0 {
						t.Fatal("tasks in JSON on a msgpack session")
					}
					if err := wire.UnmarshalMsgpack(tasks.GetInstancesMsgpack(), &got); err != nil {
						t.Fatal(err)
					}
				} else {
					if len(tasks.GetInstancesMsgpack()) > 0 {
						t.Fatal("tasks in msgpack on a JSON session")
					}
					for _, b := range tasks.GetInstancesJson() {
						in := new(store.Instance)
						if err := json.Unmarshal(b, in); err != nil {
							t.Fatal(err)
						}
						got = append(got, in)
					}
				}
				if len(got) != 1 || got[0].ID != "a" || got[0].LeaseOwner != "n" || string(got[0].Args) != "[1]" || got[0].Metadata["m"] != "v" {
					t.Fatalf("pushed %+v, want a, leased to n, with its args and metadata", got)
				}
				return
			}
		})
	}
}

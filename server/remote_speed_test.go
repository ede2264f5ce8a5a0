package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
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

// TestExecutorSessionEncodings: a worker that reads msgpack-keyed gets its
// tasks and replies in it; one that offers only msgpack (an older worker)
// gets msgpack; one that says nothing of encodings (older still) gets
// JSON, as before; and an older jobd (one that knows only msgpack) answers
// a new worker's offer with msgpack.
func TestExecutorSessionEncodings(t *testing.T) {
	for _, c := range []struct {
		name      string
		encodings []string
		server    []string // the server's encodings; nil: all it knows
		want      string
	}{
		{"msgpack-keyed", []string{wire.MsgpackKeyed, wire.Msgpack}, nil, wire.MsgpackKeyed},
		{"msgpack", []string{"cbor", wire.Msgpack}, nil, wire.Msgpack},
		{"older jobd", []string{wire.MsgpackKeyed, wire.Msgpack}, []string{wire.Msgpack}, wire.Msgpack},
		{"json", nil, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _ := memdbstore.New()
			srv, url := executorServer(t, st, nil, "default")
			srv.setEncodings(c.server)
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
				switch c.want {
				case wire.MsgpackKeyed:
					sc.ParamsMsgpack, err = wire.MarshalKeyed(params)
				case wire.Msgpack:
					sc.ParamsMsgpack, err = wire.MarshalMsgpack(params)
				default:
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
			r := reply()
			if (c.want != "") != (len(r.GetResultMsgpack()) > 0) {
				t.Fatalf("claim reply: json %q, msgpack %x; want the session's encoding %q", r.GetResultJson(), r.GetResultMsgpack(), c.want)
			}
			var cr *wire.ClaimResult
			if c.want == wire.MsgpackKeyed {
				if err := wire.UnmarshalKeyed(r.GetResultMsgpack(), &cr); err != nil {
					t.Fatalf("claim reply in %s: %v", c.want, err)
				}
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
				if c.want != "" {
					if len(tasks.GetInstancesJson()) > 0 {
						t.Fatal("tasks in JSON on a msgpack session")
					}
					unmarshal := wire.UnmarshalMsgpack
					if c.want == wire.MsgpackKeyed {
						unmarshal = wire.UnmarshalKeyed
					}
					if err := unmarshal(tasks.GetInstancesMsgpack(), &got); err != nil {
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
				// Its outcome, in the session's encoding, and the results.
				call(3, wire.MethodFinish, &store.FinishParams{Owner: "n", Now: time.Now(), Outcomes: []store.Outcome{
					{ID: "a", Attempt: got[0].Attempt, State: store.Completed, Result: []byte(`[2]`)},
					{ID: "a", Attempt: got[0].Attempt + 1, State: store.Completed},
				}})
				r := reply()
				var rs []wire.FinishResult
				switch c.want {
				case wire.MsgpackKeyed:
					err = wire.UnmarshalKeyed(r.GetResultMsgpack(), &rs)
				case wire.Msgpack:
					err = wire.UnmarshalMsgpack(r.GetResultMsgpack(), &rs)
				default:
					err = json.Unmarshal(r.GetResultJson(), &rs)
				}
				if err != nil || len(rs) != 2 || rs[0].State != store.Completed || rs[0].Err != nil || rs[1].Err == nil || !slices.Contains(rs[1].Err.Sentinels, "lease_lost") {
					t.Fatalf("finish results %+v, %v; want a completed, then lease_lost for an attempt the worker never had", rs, err)
				}
				ins, err := st.LookupInstances(t.Context(), &store.Query{InstanceID: "a"})
				if err != nil || len(ins) != 1 || ins[0].State != store.Completed || string(ins[0].Result) != "[2]" {
					t.Fatalf("a in the store: %+v, %v; want completed with [2]", ins, err)
				}
				return
			}
		})
	}
}

// TestExecutorStandingCredit: on a msgpack-keyed session that jobd pushes
// on, a claim that finds nothing pushed returns at once, without a round
// trip to jobd (the engine's claim loop claims each time a slot frees,
// and a round trip each time was most of a session's messages), and the
// credit it left stands: what becomes ready is pushed, never more than
// the worker's slots in flight.
func TestExecutorStandingCredit(t *testing.T) {
	mem, _ := memdbstore.New()
	st := &gatedStore{Store: mem, open: make(chan struct{})}
	defer func() {
		if st.gated.Load() {
			close(st.open)
		}
	}()
	srv, url := executorServer(t, st, nil, "default")
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
	claim := func(ctx context.Context, limit int) (*store.ClaimResult, error) {
		now := time.Now()
		return rs.Claim(ctx, &store.ClaimParams{Queue: "default", Owner: "n1", Limit: limit, Now: now, LeaseUntil: now.Add(time.Minute), Kinds: []string{"k"}})
	}
	enqueue := func(ids ...string) {
		t.Helper()
		now := time.Now()
		var ins []*store.Instance
		for _, id := range ids {
			ins = append(ins, &store.Instance{ID: id, Kind: "k", Queue: "default", Args: []byte("[]"), RunAt: now, CreatedAt: now})
		}
		if _, err := mem.Enqueue(ctx, &store.EnqueueParams{Now: now, Instances: ins}); err != nil {
			t.Fatal(err)
		}
	}
	var took []*store.Instance
	// take waits for pushes and claims until it holds n tasks in all.
	take := func(n int) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for len(took) < n {
			select {
			case <-pushed:
			case <-deadline:
				t.Fatalf("took %d tasks, want %d", len(took), n)
			}
			r, err := claim(ctx, 4)
			if err != nil {
				t.Fatal(err)
			}
			took = append(took, r.Instances...)
		}
	}
	if r, err := claim(ctx, 4); err != nil || len(r.Instances) != 0 { // credit 4, through jobd
		t.Fatalf("first claim: %v, %v", r, err)
	}
	enqueue("a")
	take(1)
	// jobd has had: the hello, the heartbeat, the first claim and the
	// Credit that taking a left behind.
	received := func() int64 {
		ss := srv.Sessions()
		if len(ss) != 1 {
			t.Fatalf("sessions %+v, want one", ss)
		}
		return ss[0].Received
	}
	waitCond(t, "jobd received 4 messages", func() bool { return received() == 4 })
	st.gated.Store(true) // from now, a claim that reaches the store waits
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if r, err := claim(cctx, 3); err != nil || len(r.Instances) != 0 {
		t.Fatalf("claim with nothing pushed: %v, %v; want nothing at once, without a round trip to jobd and its store", r, err)
	}
	if n := received(); n != 4 {
		t.Fatalf("jobd received %d messages, want still 4: a claim with nothing pushed sent one", n)
	}
	st.gated.Store(false)
	close(st.open)
	// The credit stands: what becomes ready is pushed, up to the slots.
	enqueue("b", "c", "d", "e", "f")
	take(4)
	ss := srv.Sessions()
	if len(ss) != 1 || ss[0].InFlight != 4 || ss[0].PeakInFlight > 4 {
		t.Fatalf("sessions %+v; want one with 4 in flight, never more", ss)
	}
	// An outcome frees a slot: e is pushed on the standing credit.
	if _, err := rs.Finish(ctx, &store.FinishParams{Owner: "n1", Now: time.Now(), Outcomes: []store.Outcome{{ID: took[0].ID, Attempt: took[0].Attempt, State: store.Completed}}}); err != nil {
		t.Fatal(err)
	}
	take(5)
	if ss := srv.Sessions(); ss[0].PeakInFlight > 4 {
		t.Fatalf("peak in flight %d with 4 slots", ss[0].PeakInFlight)
	}
}

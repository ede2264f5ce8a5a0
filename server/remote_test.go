package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// rawSession opens a Connect stream by hand, for what remote.Store never
// sends.
func rawSession(t *testing.T, url, token, ns string) *connect.BidiStreamForClient[pb.ConnectRequest, pb.ConnectResponse] {
	t.Helper()
	c := jobkitv1connect.NewExecutorServiceClient(httpClient(t, true, token, ns), url, connect.WithGRPC())
	ctx, cancel := context.WithCancel(t.Context())
	s := c.Connect(ctx)
	t.Cleanup(func() { cancel(); _ = s.CloseRequest() })
	return s
}

func hello(h *pb.Hello) *pb.ConnectRequest {
	return &pb.ConnectRequest{Msg: &pb.ConnectRequest_Hello{Hello: h}}
}

func callMsg(id uint64, method string, params []byte) *pb.ConnectRequest {
	return &pb.ConnectRequest{Msg: &pb.ConnectRequest_Call{Call: &pb.StoreCall{Id: id, Method: method, ParamsJson: params}}}
}

// TestExecutorRefusals: a hello with an unknown namespace, a wrong token,
// or a token of the wrong role is refused with a clear code, and Dial
// fails at once with ErrRefused.
func TestExecutorRefusals(t *testing.T) {
	st, _ := memdbstore.New()
	tokens := []Token{
		{Name: "w", SHA256: HashToken("w-secret"), Role: RoleWorker, Namespaces: []string{"default"}},
		{Name: "v", SHA256: HashToken("v-secret"), Role: RoleViewer, Namespaces: []string{"*"}},
	}
	_, url := executorServer(t, st, tokens, "default")
	for _, c := range []struct {
		name, token, ns string
		code            connect.Code
		says            string
	}{
		{"unknown namespace", "w-secret", "nope", connect.CodeNotFound, "namespace \"nope\" is not served"},
		{"wrong token", "bad", "default", connect.CodeUnauthenticated, "not accepted"},
		{"no token", "", "default", connect.CodeUnauthenticated, "no token"},
		{"viewer token", "v-secret", "default", connect.CodePermissionDenied, "role worker"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := remote.Dial(ctx, remote.Options{Address: url, Token: c.token, Namespace: c.ns, Logger: quiet})
			if !errors.Is(err, remote.ErrRefused) || connect.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("Dial: %v (code %v), want ErrRefused with %v saying %q", err, connect.CodeOf(err), c.code, c.says)
			}
		})
	}
	// The worker token works.
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, Token: "w-secret", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rs.Close()
}

// TestExecutorSignatureConflict: a worker announcing a kind with an
// executor signature other than a connected worker's is refused, naming
// both; once the first leaves, it is accepted.
func TestExecutorSignatureConflict(t *testing.T) {
	st, _ := memdbstore.New()
	_, url := executorServer(t, st, nil, "default")
	sum := func(sig any) *job.Job {
		j, err := job.NewJob(job.WithKind("sum"), job.WithExecutor(sig))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	ints := sum(func(a, b int) int { return a + b })
	floats := sum(func(a, b float64) float64 { return a + b })
	first, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "n1", Jobs: []*job.Job{ints}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// The same signature is welcome.
	same, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "n2", Jobs: []*job.Job{sum(func(x, y int) int { return x - y })}, Logger: quiet})
	if err != nil {
		t.Fatalf("a second worker with the same signature: %v", err)
	}
	same.Close()
	_, err = remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "n3", Jobs: []*job.Job{floats}, Logger: quiet})
	if !errors.Is(err, remote.ErrRefused) || connect.CodeOf(err) != connect.CodeFailedPrecondition ||
		!strings.Contains(err.Error(), "func(float64, float64) float64") || !strings.Contains(err.Error(), "func(int, int) int") || !strings.Contains(err.Error(), "n1") {
		t.Fatalf("Dial with another signature: %v, want FailedPrecondition naming both signatures and worker n1", err)
	}
	first.Close()
	waitCond(t, "the first session ends", func() bool { return len(sessionsOf(t, url)) == 0 })
	other, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "n3", Jobs: []*job.Job{floats}, Logger: quiet})
	if err != nil {
		t.Fatalf("after the first worker left: %v", err)
	}
	other.Close()
}

// servers maps a test server's URL to the Server (set by executorServer).
var servers = map[string]*Server{}

func sessionsOf(t *testing.T, url string) []SessionInfo {
	t.Helper()
	serversMu.Lock()
	s := servers[url]
	serversMu.Unlock()
	return s.Sessions()
}

// waitCond polls cond until it holds, for up to 10 s.
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling for a condition, with a deadline
	}
}

// TestExecutorMalformedSession: a session that does not start with a
// hello, says hello twice, or sends bad credit ends with InvalidArgument;
// a call of an unknown method or with undecodable parameters gets an
// error reply wrapping store.ErrInvalid, and the session goes on.
func TestExecutorMalformedSession(t *testing.T) {
	st, _ := memdbstore.New()
	_, url := executorServer(t, st, nil, "default")
	recvErr := func(s *connect.BidiStreamForClient[pb.ConnectRequest, pb.ConnectResponse]) error {
		for {
			if _, err := s.Receive(); err != nil {
				return err
			}
		}
	}
	t.Run("no hello", func(t *testing.T) {
		s := rawSession(t, url, "", "")
		_ = s.Send(&pb.ConnectRequest{Msg: &pb.ConnectRequest_Credit{Credit: &pb.Credit{Queue: "default", Limit: 1}}})
		if err := recvErr(s); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "must be a hello") {
			t.Fatalf("got %v, want InvalidArgument saying the first message must be a hello", err)
		}
	})
	t.Run("bad labels", func(t *testing.T) {
		s := rawSession(t, url, "", "")
		_ = s.Send(hello(&pb.Hello{NodeId: "n", Labels: []string{"has space"}}))
		if err := recvErr(s); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("got %v, want InvalidArgument", err)
		}
	})
	t.Run("second hello", func(t *testing.T) {
		s := rawSession(t, url, "", "")
		_ = s.Send(hello(&pb.Hello{NodeId: "n"}))
		if m, err := s.Receive(); err != nil || m.GetWelcome() == nil {
			t.Fatalf("first reply %v, %v; want a welcome", m, err)
		}
		_ = s.Send(hello(&pb.Hello{NodeId: "n"}))
		if err := recvErr(s); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "second hello") {
			t.Fatalf("got %v, want InvalidArgument about a second hello", err)
		}
	})
	t.Run("negative credit", func(t *testing.T) {
		s := rawSession(t, url, "", "")
		_ = s.Send(hello(&pb.Hello{NodeId: "n"}))
		_, _ = s.Receive()
		_ = s.Send(&pb.ConnectRequest{Msg: &pb.ConnectRequest_Credit{Credit: &pb.Credit{Queue: "default", Limit: -1}}})
		if err := recvErr(s); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("got %v, want InvalidArgument", err)
		}
	})
	t.Run("bad calls", func(t *testing.T) {
		s := rawSession(t, url, "", "")
		_ = s.Send(hello(&pb.Hello{NodeId: "n"}))
		_, _ = s.Receive()
		_ = s.Send(callMsg(1, "DropEverything", nil))
		_ = s.Send(callMsg(2, "Renew", []byte("{not json")))
		_ = s.Send(callMsg(3, "LookupInstances", []byte("{}")))
		p, _ := json.Marshal(&store.RenewParams{Owner: "n", Until: time.Now().Add(time.Minute), Now: time.Now()})
		_ = s.Send(callMsg(4, "Renew", p))
		got := map[uint64]*pb.StoreReply{}
		for len(got) < 4 {
			m, err := s.Receive()
			if err != nil {
				t.Fatalf("session ended after %d replies: %v", len(got), err)
			}
			if r := m.GetReply(); r != nil {
				got[r.GetId()] = r
			}
		}
		for id, says := range map[uint64]string{1: "unknown store method", 2: "undecodable parameters", 3: "not a session call"} {
			e := got[id].GetError()
			if e == nil || !strings.Contains(e.GetMessage(), says) || !strings.Contains(strings.Join(e.GetSentinels(), ","), "invalid") {
				t.Errorf("reply %d: %v, want an invalid-parameters error saying %q", id, e, says)
			}
		}
		if e := got[4].GetError(); e != nil {
			t.Errorf("a good call after bad ones: %v", e)
		}
	})
}

// TestExecutorForeignResult: a worker reporting the outcome of an attempt
// it does not hold (another worker's, or one never claimed) changes
// nothing: each outcome is refused with store.ErrLeaseLost.
func TestExecutorForeignResult(t *testing.T) {
	st, _ := memdbstore.New()
	_, url := executorServer(t, st, nil, "default")
	now := time.Now()
	ins := []*store.Instance{
		{ID: "held-by-other", Kind: "k", Queue: "default", Args: []byte("[]"), RunAt: now, CreatedAt: now},
		{ID: "never-claimed", Kind: "k", Queue: "q2", Args: []byte("[]"), RunAt: now, CreatedAt: now},
	}
	if _, err := st.Enqueue(t.Context(), &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Claim(t.Context(), &store.ClaimParams{Queue: "default", Owner: "other", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil || len(r.Instances) != 1 {
		t.Fatalf("claim: %v", err)
	}
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "me", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	res, err := rs.Finish(t.Context(), &store.FinishParams{Owner: "me", Now: now, Outcomes: []store.Outcome{
		{ID: "held-by-other", Attempt: 1, State: store.Completed},
		{ID: "never-claimed", Attempt: 1, State: store.Completed},
	}})
	if err != nil || len(res) != 2 {
		t.Fatalf("Finish: %v, %v", res, err)
	}
	for i, r := range res {
		if !errors.Is(r.Err, store.ErrLeaseLost) {
			t.Errorf("outcome %d: %v, want ErrLeaseLost", i, r.Err)
		}
	}
	got, _ := st.LookupInstances(t.Context(), &store.Query{})
	for _, in := range got {
		if in.State == store.Completed {
			t.Errorf("%s completed by a worker that did not hold it", in.ID)
		}
	}
}

// TestExecutorSilentWorker: a worker that says hello and then never
// claims, acknowledges or reads (no credit, replies unread) is pushed
// nothing, holds nothing, and slows no other worker down.
func TestExecutorSilentWorker(t *testing.T) {
	st, _ := memdbstore.New()
	srv, url := executorServer(t, st, nil, "default")
	silent := rawSession(t, url, "", "")
	_ = silent.Send(hello(&pb.Hello{NodeId: "silent", Slots: 4}))
	// Calls it never reads the replies of: more than jobd applies at once.
	p, _ := json.Marshal(&store.RenewParams{Owner: "silent", Until: time.Now().Add(time.Minute), Now: time.Now()})
	go func() {
		for i := range 2 * maxSessionCalls {
			if silent.Send(callMsg(uint64(i+1), "Renew", p)) != nil {
				return
			}
		}
	}()
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	m, err := job.NewManager(job.WithStore(rs), job.WithWorkers(4), job.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	j, _ := job.NewJob(job.WithKind("noop"), job.WithExecutor(func() {}))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	}()
	var ids []string
	for range 100 {
		ji, err := m.ScheduleJob(t.Context(), "noop")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ji.ID)
	}
	waitCond(t, "the live worker runs all 100", func() bool {
		ins, _ := st.LookupInstances(t.Context(), &store.Query{Kind: "noop", States: []store.State{store.Completed}})
		return len(ins) == len(ids)
	})
	for _, s := range srv.Sessions() {
		if s.Node == "silent" && (s.InFlight != 0 || s.PeakInFlight != 0) {
			t.Fatalf("the silent worker holds %d (peak %d), want nothing", s.InFlight, s.PeakInFlight)
		}
	}
	hist, _ := st.LookupHistory(t.Context(), &store.Query{Kind: "noop", States: []store.State{store.Processing}})
	for _, h := range hist {
		if h.Node == "silent" {
			t.Fatalf("%s ran on the silent worker", h.InstanceID)
		}
	}
}

// TestExecutorCreditWhileOutcomesLag: a worker frees a slot before its
// outcome reaches jobd, so its next claim can find jobd still counting
// the slot busy. What jobd holds back then stays credit, pushed once the
// outcome lands: a one-slot worker whose poll interval is a minute runs
// 30 tasks back to back, not one a minute.
func TestExecutorCreditWhileOutcomesLag(t *testing.T) {
	st, _ := memdbstore.New()
	_, url := executorServer(t, st, nil, "default")
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	m, err := job.NewManager(job.WithStore(rs), job.WithWorkers(1), job.WithPollInterval(time.Minute), job.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	j, _ := job.NewJob(job.WithKind("noop"), job.WithExecutor(func() {}))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	}()
	const n = 30
	for range n {
		if _, err := m.ScheduleJob(t.Context(), "noop"); err != nil {
			t.Fatal(err)
		}
	}
	waitCond(t, "30 tasks complete on the one-slot worker", func() bool {
		ins, _ := st.LookupInstances(t.Context(), &store.Query{Kind: "noop", States: []store.State{store.Completed}})
		return len(ins) == n
	})
}

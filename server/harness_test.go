package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/store/redisstore"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	os.Exit(code)
}

// backend makes a store for one namespace of a test.
type backend struct {
	name string
	open func(t *testing.T, ns string) store.Store
}

// nsSeq keeps Redis namespaces of the tests of one run apart.
var nsSeq atomic.Int64

// backends are the stores every functional test runs on: the in-memory
// one, and Redis (the test binary's redis-server, or $JOBKIT_REDIS_ADDR).
var backends = []backend{
	{"memdb", func(t *testing.T, _ string) store.Store {
		s, err := memdbstore.New()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"redis", func(t *testing.T, ns string) store.Store {
		c := redis.NewClient(&redis.Options{Addr: testserver.Redis(t), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.WithNamespace(fmt.Sprintf("srv-%d-%d-%s", os.Getpid(), nsSeq.Add(1), ns)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// eachBackend runs f as a subtest per backend.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// gate holds the "step" executor between its two log lines until released.
type gate struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (g *gate) get(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = map[string]chan struct{}{}
	}
	c, ok := g.ch[key]
	if !ok {
		c = make(chan struct{})
		g.ch[key] = c
	}
	return c
}

// newManager starts a manager on st with the test's executors:
//
//	add(a, b int) int               completes with a+b
//	add-converting(a, b int) int    the same, converting "1" to 1 (WithArgumentConversion)
//	greet(name string) string       logs two lines, completes "hi <name>"
//	fail()                          fails for good
//	block()                         runs until canceled
//	step(key string)                logs "step 1", reports progress 0.5 "step 1 of 2",
//	                                waits for gates[key], logs "step 2"
//	tagged()                        needs label "gpu" (never runs here)
func newManager(t *testing.T, st store.Store, g *gate) *job.Manager {
	t.Helper()
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(4), job.WithPollInterval(50*time.Millisecond), job.WithQueues("default", "slow"))
	if err != nil {
		t.Fatal(err)
	}
	reg := func(opts ...job.JobOption) {
		j, err := job.NewJob(opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	reg(job.WithKind("add"), job.WithExecutor(func(a, b int) int { return a + b }))
	reg(job.WithKind("add-converting"), job.WithArgumentConversion(), job.WithExecutor(func(a, b int) int { return a + b }))
	reg(job.WithKind("greet"), job.WithExecutor(func(ji job.Instance, name string) string {
		ji.Infof("hello %s", name)
		ji.Warnf("bye %s", name)
		return "hi " + name
	}))
	reg(job.WithKind("fail"), job.WithExecutor(func() error { return job.Permanent(errors.New("boom")) }))
	reg(job.WithKind("block"), job.WithExecutor(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}))
	reg(job.WithKind("step"), job.WithExecutor(func(ctx context.Context, ji job.Instance, key string) error {
		ji.Infof("step 1")
		ji.SetProgress(0.5, "step 1 of 2")
		select {
		case <-g.get(key):
		case <-ctx.Done():
			return ctx.Err()
		}
		ji.Infof("step 2")
		return nil
	}))
	reg(job.WithKind("tagged"), job.WithExecutor(func() {}), job.WithRequiredLabels("gpu"))
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = m.Stop(sctx)
	})
	return m
}

// env is a Server on a real listener with the managers behind it.
type env struct {
	srv  *Server
	url  string
	mgrs map[string]*job.Manager
	gate *gate
	// gets counts the GET requests served, by path.
	gets sync.Map
}

// newEnv serves namespaces "default" and "other" on b, with cfg's tokens
// and limits.
func newEnv(t *testing.T, b backend, cfg Config) *env {
	t.Helper()
	e := &env{mgrs: map[string]*job.Manager{}, gate: &gate{}}
	for _, ns := range []string{"default", "other"} {
		e.mgrs[ns] = newManager(t, b.open(t, ns), e.gate)
	}
	cfg.Namespaces = e.mgrs
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.url = serve(t, srv, func(r *http.Request) {
		if r.Method == http.MethodGet {
			n, _ := e.gets.LoadOrStore(r.URL.Path, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}
	})
	return e
}

// serve serves srv on a real loopback listener, HTTP/1.1 and h2c, until
// the test ends, and returns its URL.
func serve(t *testing.T, srv *Server, seen ...func(*http.Request)) string {
	srv.followPoll, srv.followSettle = 20*time.Millisecond, 200*time.Millisecond
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, f := range seen {
			f(r)
		}
		srv.ServeHTTP(w, r)
	}))
	hs.Config.Protocols = Protocols()
	hs.Start()
	t.Cleanup(hs.Close)
	return hs.URL
}

// headerTransport adds a token and a namespace to every request.
type headerTransport struct {
	base      http.RoundTripper
	token, ns string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
	if h.ns != "" {
		r.Header.Set(NamespaceHeader, h.ns)
	}
	return h.base.RoundTrip(r)
}

// httpClient returns a client over HTTP/1.1, or h2c when h2 is set, with
// the token and namespace headers.
func httpClient(t *testing.T, h2 bool, token, ns string) *http.Client {
	p := new(http.Protocols)
	if h2 {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: headerTransport{base: tr, token: token, ns: ns}}
}

// clients are the services' connect-go clients in one protocol.
type clients struct {
	jobs  jobkitv1connect.JobServiceClient
	defs  jobkitv1connect.DefinitionServiceClient
	trigs jobkitv1connect.TriggerServiceClient
	queue jobkitv1connect.QueueServiceClient
	nodes jobkitv1connect.NodeServiceClient
}

// protocol is one way a connect-go client talks to the server.
type protocol struct {
	name string
	h2   bool
	opts []connect.ClientOption
}

// protocols are every protocol and encoding the server serves.
var protocols = []protocol{
	{"grpc", true, []connect.ClientOption{connect.WithGRPC()}},
	{"grpc-web", false, []connect.ClientOption{connect.WithGRPCWeb()}},
	{"connect-json", false, []connect.ClientOption{connect.WithProtoJSON()}},
	{"connect-proto-h2", true, nil},
	{"connect-json-get", false, []connect.ClientOption{connect.WithProtoJSON(), connect.WithHTTPGet()}},
}

// dial returns clients of protocol p with a token and a namespace.
func (e *env) dial(t *testing.T, p protocol, token, ns string) *clients {
	hc := httpClient(t, p.h2, token, ns)
	return &clients{
		jobs:  jobkitv1connect.NewJobServiceClient(hc, e.url, p.opts...),
		defs:  jobkitv1connect.NewDefinitionServiceClient(hc, e.url, p.opts...),
		trigs: jobkitv1connect.NewTriggerServiceClient(hc, e.url, p.opts...),
		queue: jobkitv1connect.NewQueueServiceClient(hc, e.url, p.opts...),
		nodes: jobkitv1connect.NewNodeServiceClient(hc, e.url, p.opts...),
	}
}

// connectJSON is the Connect protocol with JSON: what curl users send.
var connectJSON = protocols[2]

// waitFor calls cond until it reports true, failing after 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// waitState waits until the instance is in state want and returns it.
func waitState(t *testing.T, c *clients, id string, want pb.State) *pb.Instance {
	t.Helper()
	var last *pb.Instance
	waitFor(t, fmt.Sprintf("instance %s to be %v", id, want), func() bool {
		res, err := c.jobs.GetInstance(context.Background(), connect.NewRequest(&pb.GetInstanceRequest{Id: id}))
		if err != nil {
			t.Fatalf("GetInstance(%s): %v", id, err)
		}
		last = res.Msg.GetInstance()
		return last.GetState() == want
	})
	return last
}

// codeOf returns the connect code of err, failing when it has none.
func codeOf(t *testing.T, err error) connect.Code {
	t.Helper()
	if err == nil {
		t.Fatal("want an error, got none")
	}
	return connect.CodeOf(err)
}

// wantCode fails unless err has code and its message holds every one of
// words.
func wantCode(t *testing.T, err error, code connect.Code, words ...string) {
	t.Helper()
	if got := codeOf(t, err); got != code {
		t.Fatalf("code %v, want %v: %v", got, code, err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("message %q does not say %q", err.Error(), w)
		}
	}
}

// count returns how many instances the namespace's store holds.
func count(t *testing.T, m *job.Manager) int {
	t.Helper()
	ins, err := m.LookupInstances(context.Background(), job.NewQuery())
	if err != nil {
		t.Fatal(err)
	}
	return len(ins)
}

package console_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/server/console"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/store/redisstore"
)

// The tokens of the test server, by role.
const (
	adminToken    = "admin-secret"
	operatorToken = "operator-secret"
	viewerToken   = "viewer-secret"
	otherToken    = "other-ns-secret" // an admin of namespace "other" only
	// oddToken is an operator's token with bytes a cookie value cannot hold.
	oddToken = `odd token; "quoted", back\\slash`
)

// env is a real jobkit server with real managers (memdb) and the console
// mounted under /console/ on one listener.
type env struct {
	url     string // the listener's base URL
	console string // the console's base URL
	// failing makes "flaky" fail for good while set.
	failing atomic.Bool
	// step holds "steps" between its log lines: one receive per line after
	// the first.
	step chan struct{}
	mgrs map[string]*job.Manager
	// stats are the Overview charts of each namespace, observing its manager.
	stats map[string]*console.Stats
}

// TestMain stops the redis-server the tests started, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	if jobdDir != "" {
		_ = os.RemoveAll(jobdDir)
	}
	os.Exit(code)
}

// memdb opens an in-memory store.
func memdb(t *testing.T, _ string) store.Store {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// redisSeq keeps the Redis namespaces of one run's tests apart.
var redisSeq atomic.Int64

// redisStore opens a store on the test binary's redis-server
// ($JOBKIT_REDIS_ADDR, or one it starts) in a namespace of its own.
func redisStore(t *testing.T, ns string) store.Store {
	c := redis.NewClient(&redis.Options{Addr: testserver.Redis(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	st, err := redisstore.New(c, redisstore.WithNamespace(fmt.Sprintf("console-%d-%d-%s", os.Getpid(), redisSeq.Add(1), ns)))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// envOptions change what newEnvOn makes.
type envOptions struct {
	console []func(*console.Config)
	manager []job.ManagerOption
	// jobdRedis, when set, serves the API and the console from a jobd
	// process on that Redis (the env's managers are worker nodes beside
	// it), not from this process.
	jobdRedis string
}

// envOption is an option of newEnvOn.
type envOption func(*envOptions)

// withConsole changes the console's configuration.
func withConsole(f func(*console.Config)) envOption {
	return func(o *envOptions) { o.console = append(o.console, f) }
}

// withManager adds options to every namespace's manager.
func withManager(opts ...job.ManagerOption) envOption {
	return func(o *envOptions) { o.manager = append(o.manager, opts...) }
}

// newEnv is newEnvOn(t, memdb).
func newEnv(t *testing.T) *env { return newEnvOn(t, memdb) }

// newJobdEnv is newEnvOn with a jobd process serving the API and the
// console, on a redis-server of the test's own (namespaces "default" and
// "other", as jobd names them), and the env's managers as the worker
// nodes that run the executors.
func newJobdEnv(t *testing.T) *env {
	t.Helper()
	p := testserver.StartRedis(t)
	t.Cleanup(p.Stop)
	open := func(t *testing.T, ns string) store.Store {
		c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		st, err := redisstore.New(c, redisstore.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	return newEnvOn(t, open, func(o *envOptions) { o.jobdRedis = p.Addr })
}

// newEnvOn serves namespaces "default" and "other", each on a store open
// makes, with executors:
//
//	greet(name string) string  logs two lines, completes "hi <name>"
//	flaky()                    logs a line; fails for good while env.failing, else completes
//	block()                    runs until canceled
//	tagged()                   requires labels gpu and region=eu (no node here has them: never runs)
//	steps()                    logs "step 1", waits for env.step, logs "step 2", waits for it again, completes
func newEnvOn(t *testing.T, open func(t *testing.T, ns string) store.Store, opts ...envOption) *env {
	t.Helper()
	var o envOptions
	for _, f := range opts {
		f(&o)
	}
	e := &env{mgrs: map[string]*job.Manager{}, stats: map[string]*console.Stats{}, step: make(chan struct{})}
	e.failing.Store(true)
	for _, ns := range []string{"default", "other"} {
		st := open(t, ns)
		e.stats[ns] = console.NewStats()
		m, err := job.NewManager(append([]job.ManagerOption{job.WithStore(st), job.WithWorkers(4), job.WithPollInterval(50 * time.Millisecond), job.WithNodeID("node-" + ns), job.WithObserver(e.stats[ns])}, o.manager...)...)
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
		reg(job.WithKind("greet"), job.WithExecutor(func(ji job.Instance, name string) string {
			ji.Infof("hello %s", name)
			ji.Warnf("bye %s", name)
			return "hi " + name
		}))
		reg(job.WithKind("flaky"), job.WithExecutor(func(ji job.Instance) error {
			ji.Infof("flaky attempt %d", ji.Info().Attempt)
			if e.failing.Load() {
				return job.Permanent(errors.New("flaky failed on purpose"))
			}
			return nil
		}))
		reg(job.WithKind("steps"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
			for i := 1; i <= 2; i++ {
				ji.Infof("step %d", i)
				ji.SetProgress(float64(i)/2, fmt.Sprintf("step %d of 2", i))
				select {
				case <-e.step:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}))
		// creep reports progress 0.25, then at e.step 0.75, then returns
		// at e.step: its progress changes with no event in between.
		reg(job.WithKind("creep"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
			for _, f := range []float64{0.25, 0.75} {
				ji.SetProgress(f, fmt.Sprintf("%.0f%% crept", f*100))
				select {
				case <-e.step:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}))
		reg(job.WithKind("tagged"), job.WithExecutor(func() {}), job.WithRequiredLabels("gpu", "region=eu"))
		reg(job.WithKind("block"), job.WithExecutor(func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}))
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
		e.mgrs[ns] = m
	}
	if o.jobdRedis != "" {
		// jobd schedules only kinds it has a definition of (it runs none).
		for _, m := range e.mgrs {
			for _, k := range []string{"greet", "flaky", "steps", "creep", "block"} {
				if _, err := m.Admin().PutDefinition(context.Background(), job.Definition{Kind: k, MaxRetries: 3}, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		e.url = startJobd(t, o.jobdRedis, "default", "other")
		e.console = e.url + "/console"
		return e
	}
	srv, err := server.New(server.Config{Namespaces: e.mgrs, Logger: slog.New(slog.DiscardHandler), Tokens: testTokens()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := console.Config{API: srv, Prefix: "/console", Stats: e.stats, Namespaces: []string{"default", "other"}, IdentityTTL: time.Second}
	for _, f := range o.console {
		f(&cfg)
	}
	con, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })
	mux := http.NewServeMux()
	mux.Handle("/console/", con)
	mux.Handle("/", srv)
	hs := httptest.NewUnstartedServer(mux)
	hs.Config.Protocols = server.Protocols()
	hs.Start()
	t.Cleanup(hs.Close)
	e.url, e.console = hs.URL, hs.URL+"/console"
	return e
}

// jobs returns a JobService client over the network with token, in
// namespace ns.
func (e *env) jobs(token, ns string) jobkitv1connect.JobServiceClient {
	return jobkitv1connect.NewJobServiceClient(http.DefaultClient, e.url, connect.WithInterceptors(auth{token, ns}))
}

// schedule schedules kind with args through the API as the admin.
func (e *env) schedule(t *testing.T, kind, args string) *pb.Instance {
	t.Helper()
	res, err := e.jobs(adminToken, "default").Schedule(context.Background(), connect.NewRequest(&pb.ScheduleRequest{Kind: kind, ArgsJson: args}))
	if err != nil {
		t.Fatalf("schedule %s: %v", kind, err)
	}
	return res.Msg.GetInstance()
}

// waitState waits until instance id is in state want.
func (e *env) waitState(t *testing.T, id string, want pb.State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := e.jobs(adminToken, "default").GetInstance(context.Background(), connect.NewRequest(&pb.GetInstanceRequest{Id: id}))
		if err == nil && res.Msg.GetInstance().GetState() == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s did not reach %v within 10 s (last: %v, %v)", id, want, res, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// auth adds a token and a namespace to every call.
type auth struct{ token, ns string }

func (a auth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+a.token)
		req.Header().Set("Jobkit-Namespace", a.ns)
		return next(ctx, req)
	}
}

func (a auth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a auth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// browserless is an HTTP client with a cookie jar that does not follow
// redirects, for the tests that read the console's answers themselves.
func browserless(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// scheduleMany schedules n instances of kind with arguments ["bulk"]
// through the API, 1000 a call.
func (e *env) scheduleMany(t *testing.T, kind string, n int) {
	t.Helper()
	for n > 0 {
		batch := min(n, 1000)
		items := make([]*pb.ScheduleRequest, batch)
		for i := range items {
			items[i] = &pb.ScheduleRequest{Kind: kind, ArgsJson: `["bulk"]`}
		}
		res, err := e.jobs(adminToken, "default").ScheduleBatch(context.Background(), connect.NewRequest(&pb.ScheduleBatchRequest{Items: items}))
		if err != nil {
			t.Fatalf("schedule %d %s: %v", batch, kind, err)
		}
		for _, r := range res.Msg.GetResults() {
			if r.GetError() != nil {
				t.Fatalf("schedule %s: %v", kind, r.GetError())
			}
		}
		n -= batch
	}
}

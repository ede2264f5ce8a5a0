package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/internal/testserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// TestNoFlags: jobd with no flags serves the embedded memdb store, says
// where it listens, answers /healthz, /readyz and gRPC health checks, and
// drains on SIGTERM with exit status 0.
func TestNoFlags(t *testing.T) {
	t.Parallel()
	p := startJobd(t, jobdBin(), nil) // the listen address and log format come from JOBD_*
	if !strings.Contains(p.logText(), `"store":"memdb`) {
		t.Errorf("the log does not say the store is memdb:\n%s", p.logText())
	}
	if code, body, err := get(p.api + "/healthz"); code != http.StatusOK || err != nil {
		t.Errorf("/healthz: %d %q %v; want 200", code, body, err)
	}
	if st := grpcHealth(t, p.api, ""); st != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health: %v; want SERVING", st)
	}
	// The web console: / redirects to /console/, which asks to sign in.
	if code, body, err := get(p.api + "/"); code != http.StatusOK || err != nil || !strings.Contains(body, `id="token"`) {
		t.Errorf("GET / (redirected to the console): %d %v; want 200 and the sign-in form, got:\n%s", code, err, body)
	}
	p.signal(syscall.SIGTERM)
	if code := p.exitCode(30 * time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM; want 0. Log:\n%s", code, p.logText())
	}
	if !strings.Contains(p.logText(), `"msg":"drained"`) {
		t.Errorf("the log does not say it drained:\n%s", p.logText())
	}
}

// grpcHealth asks the gRPC health service of the jobd at base about
// service ("" for the server as a whole).
func grpcHealth(t *testing.T, base, service string) grpc_health_v1.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := grpc_health_v1.NewHealthClient(conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("gRPC health check: %v", err)
	}
	return resp.GetStatus()
}

// TestMetricsListen: with --metrics-listen, /healthz and /readyz move to
// their own address, off the API's.
func TestMetricsListen(t *testing.T) {
	t.Parallel()
	p := startJobd(t, jobdBin(), nil, "--metrics-listen", "127.0.0.1:0")
	if p.health == p.api {
		t.Fatalf("health endpoints on the API's address %s; want their own", p.api)
	}
	if code, _, err := get(p.health + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz on %s: %d %v; want 200", p.health, code, err)
	}
	if code, _, _ := get(p.api + "/readyz"); code == http.StatusOK {
		t.Errorf("/readyz answers on the API's address %s too; want it only on %s", p.api, p.health)
	}
	p.signal(syscall.SIGINT)
	if code := p.exitCode(30 * time.Second); code != 0 {
		t.Errorf("exit status %d after SIGINT; want 0. Log:\n%s", code, p.logText())
	}
}

// TestDrain: SIGTERM on a jobd whose worker runs an attempt: gRPC health
// turns NOT_SERVING and /readyz 503 at once, new API calls are refused
// with Unavailable, the attempt runs to its end and is recorded
// Completed, and jobd exits 0.
func TestDrain(t *testing.T) {
	t.Parallel()
	ns := uniqueNS(t)
	p := startJobd(t, testjobdBin(), nil, "--publish-definitions", "--store", "redis", "--redis-addr", redisAddr(t), "--namespace", ns,
		"--workers", "2", "--drain-timeout", "60s", "--metrics-listen", "127.0.0.1:0")
	producer := newRedisWorker(t, ns, 0, nil)
	release := filepath.Join(t.TempDir(), "release")
	ji, err := producer.ScheduleJob(context.Background(), "block", job.WithArguments(release))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, producer.Manager, ji.ID, job.Processing)

	p.signal(syscall.SIGTERM)
	waitFor(t, 10*time.Second, "/readyz to answer 503 during the drain", func() (bool, string) {
		code, body, err := get(p.health + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "draining"), fmt.Sprintf("%d %q %v", code, body, err)
	})
	if st := grpcHealth(t, p.api, "jobkit.v1.JobService"); st != grpc_health_v1.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health of jobkit.v1.JobService during the drain: %v; want NOT_SERVING", st)
	}
	code, body := postJSON(t, p.api, "/jobkit.v1.JobService/Schedule", `{"kind":"echo","argsJson":"[\"x\"]"}`, nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"unavailable"`) {
		t.Errorf("Schedule during the drain: %d %s; want 503 with code unavailable", code, body)
	}
	select {
	case <-p.exited:
		t.Fatalf("jobd exited while its attempt still ran; log:\n%s", p.logText())
	default:
	}
	if got, err := producer.GetInstance(context.Background(), ji.ID); err != nil || got.State != job.Processing {
		t.Fatalf("instance during the drain: %v, %v; want still Processing", got, err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(30 * time.Second); code != 0 {
		t.Errorf("exit status %d; want 0. Log:\n%s", code, p.logText())
	}
	if got := waitState(t, producer.Manager, ji.ID, job.Completed); got.Attempt != 1 {
		t.Errorf("attempt %d; want 1 (it ran once, to its end)", got.Attempt)
	}
}

// postJSON posts body to procedure as a Connect JSON call, the way curl
// would, and returns the HTTP status and the response body.
func postJSON(t *testing.T, base, procedure, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", procedure, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := fmt.Fprint(&b, readAll(t, resp)); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b.String()
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	var m json.RawMessage
	dec := json.NewDecoder(resp.Body)
	if err := dec.Decode(&m); err != nil {
		return ""
	}
	return string(m)
}

// TestRefusesNonLoopback: a non-loopback --listen without TLS and tokens
// is refused with exit status 2 and a message naming the way out, unless
// --insecure.
func TestRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	code, stderr := run(t, jobdBin(), nil, "--listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(stderr, "not a loopback address") || !strings.Contains(stderr, "--insecure") {
		t.Errorf("non-loopback without TLS and tokens: exit %d, stderr %q; want 2 and a message naming --insecure", code, stderr)
	}
	code, stderr = run(t, jobdBin(), []string{"JOBD_LISTEN=:0"})
	if code != 2 || !strings.Contains(stderr, "not a loopback address") {
		t.Errorf("JOBD_LISTEN=:0 (every interface): exit %d, stderr %q; want 2", code, stderr)
	}
	p := startJobd(t, jobdBin(), nil, "--listen", "0.0.0.0:0", "--insecure")
	if !strings.Contains(p.logText(), "--insecure allows") {
		t.Errorf("with --insecure jobd does not warn; log:\n%s", p.logText())
	}
}

// TestBadFlags: bad flags, environment and configuration exit 2 with a
// message that names them; nothing starts.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown flag", nil, []string{"--bogus"}, "unknown flag: --bogus"},
		{"argument", nil, []string{"serve"}, "unknown command"},
		{"bad store", nil, []string{"--store", "mongo"}, `--store "mongo"`},
		{"bad workers", nil, []string{"--workers", "-1"}, "--workers -1"},
		{"workers not a number", nil, []string{"--workers", "x"}, "--workers"},
		{"bad env", []string{"JOBD_DRAIN_TIMEOUT=soon"}, nil, "JOBD_DRAIN_TIMEOUT"},
		{"half TLS", nil, []string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key"},
		{"bad log format", nil, []string{"--log-format", "xml"}, "--log-format"},
		{"missing tokens file", nil, []string{"--tokens-file", "/nonexistent/tokens.yaml"}, "--tokens-file"},
		{"bad postgres URL", nil, []string{"--store", "postgres", "--pg-url", "postgres://x:y:z"}, "--pg-url"},
		{"bad metrics naming", nil, []string{"--metrics-naming", "statsd"}, "--metrics-naming"},
		{"bad label", nil, []string{"--labels", "a b"}, "label"},
		{"bad alert interval", nil, []string{"--alert-interval", "0s"}, "--alert-interval 0s"},
		{"bad alert allowlist", nil, []string{"--alert-allow", "http://x/"}, "--alert-allow"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stderr := run(t, jobdBin(), append([]string{"JOBD_LISTEN=127.0.0.1:0"}, tc.env...), tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// TestVersionAndMigrate: the subcommands.
func TestVersionAndMigrate(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(jobdBin(), "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "jobd ") || !strings.Contains(string(out), job.Version) {
		t.Errorf("jobd version: %q, %v; want a line naming %s", out, err, job.Version)
	}
	code, stderr := run(t, jobdBin(), nil, "migrate", "--store", "redis", "--redis-addr", "127.0.0.1:1")
	if code != 0 || !strings.Contains(stderr, "nothing to migrate") {
		t.Errorf("jobd migrate --store redis: exit %d, %q; want 0 and nothing to migrate", code, stderr)
	}
}

// TestPostgres: jobd migrate creates the PostgreSQL schema (and is
// idempotent), then a jobd on PostgreSQL with executors linked in
// schedules and runs an instance through the API.
func TestPostgres(t *testing.T) {
	t.Parallel()
	url := testserver.Postgres(t)
	for range 2 {
		code, stderr := run(t, jobdBin(), nil, "migrate", "--store", "postgres", "--pg-url", url)
		if code != 0 || !strings.Contains(stderr, "schema at version") {
			t.Fatalf("jobd migrate --store postgres: exit %d, %q; want 0 and the schema version", code, stderr)
		}
	}
	p := startJobd(t, testjobdBin(), nil, "--store", "postgres", "--pg-url", url, "--namespace", uniqueNS(t), "--workers", "2")
	if !strings.Contains(p.logText(), `"store":"postgres at `) {
		t.Errorf("the log does not say the store is postgres:\n%s", p.logText())
	}
	in := scheduleJSON(t, p.api, `{"kind":"echo","argsJson":"[\"pg\"]"}`, nil)
	if done := waitStateJSON(t, p.api, in.ID, "STATE_COMPLETED", nil); done.ResultJSON != `["pg"]` {
		t.Errorf("result %q; want [\"pg\"]", done.ResultJSON)
	}
}

// TestReadyzStoreDown: /readyz answers 503 naming the store when its
// server goes away, and 200 again when it is back.
func TestReadyzStoreDown(t *testing.T) {
	t.Parallel()
	addr, stop := startRedis(t)
	p := startJobd(t, jobdBin(), nil, "--store", "redis", "--redis-addr", addr)
	stop()
	waitFor(t, 20*time.Second, "/readyz to answer 503 with the store down", func() (bool, string) {
		code, body, err := get(p.health + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "store unreachable"), fmt.Sprintf("%d %q %v", code, body, err)
	})
	if code, _, _ := get(p.health + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with the store down: %d; want 200 (the process is alive)", code)
	}
}

// startRedis starts a redis-server of the test's own on a free loopback
// port; stop kills it (also at the end of the test).
func startRedis(t *testing.T) (addr string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--dir", dir, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server (apt-get install redis-server): %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = func() {
		_ = cmd.Process.Kill()
		<-done
	}
	t.Cleanup(stop)
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	waitFor(t, 10*time.Second, "redis-server to listen", func() (bool, string) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil, fmt.Sprint(err)
	})
	return addr, stop
}

// TestDrainEndsStreams: a Watch stream open at SIGTERM is ended by the
// drain (the client sees the stream end and can resume elsewhere from its
// cursor), so jobd exits 0 well before --drain-timeout.
func TestDrainEndsStreams(t *testing.T) {
	t.Parallel()
	p := startJobd(t, jobdBin(), nil, "--drain-timeout", "60s")
	conn, err := grpc.NewClient(strings.TrimPrefix(p.api, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	desc := &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}
	stream, err := conn.NewStream(ctx, desc, jobkitv1connect.JobServiceWatchProcedure)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(&jobkitv1.WatchRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	// The stream is open once its headers arrived.
	if _, err := stream.Header(); err != nil {
		t.Fatalf("Watch headers: %v", err)
	}
	ended := make(chan error, 1)
	go func() {
		for {
			var ev jobkitv1.WatchResponse
			if err := stream.RecvMsg(&ev); err != nil {
				ended <- err
				return
			}
		}
	}()
	start := time.Now()
	p.signal(syscall.SIGTERM)
	select {
	case err := <-ended:
		t.Logf("the stream ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("the Watch stream did not end within 30 s of SIGTERM; log:\n%s", p.logText())
	}
	if code := p.exitCode(30 * time.Second); code != 0 {
		t.Errorf("exit status %d; want 0. Log:\n%s", code, p.logText())
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the drain took %v with a stream open; want it well under --drain-timeout (60 s)", d)
	}
}

// TestDrainHandsBack: an attempt still running when --drain-timeout ends
// is canceled and handed back (Scheduled again, the attempt not counted),
// jobd exits 0, and the next jobd on the store runs it to its end.
func TestDrainHandsBack(t *testing.T) {
	t.Parallel()
	ns := uniqueNS(t)
	args := []string{"--publish-definitions", "--store", "redis", "--redis-addr", redisAddr(t), "--namespace", ns, "--workers", "2"}
	p := startJobd(t, testjobdBin(), nil, append(args, "--drain-timeout", "2s")...)
	producer := newRedisWorker(t, ns, 0, nil)
	release := filepath.Join(t.TempDir(), "release")
	ji, err := producer.ScheduleJob(context.Background(), "block", job.WithArguments(release))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, producer.Manager, ji.ID, job.Processing)
	p.signal(syscall.SIGTERM)
	if code := p.exitCode(30 * time.Second); code != 0 {
		t.Errorf("exit status %d; want 0 (the attempt was handed back). Log:\n%s", code, p.logText())
	}
	got, err := producer.GetInstance(context.Background(), ji.ID)
	if err != nil || got.State != job.Scheduled || got.Attempt != 0 {
		t.Fatalf("after the drain: %v (attempt %d), %v; want Scheduled with the attempt not counted (0)", got.State, got.Attempt, err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	startJobd(t, testjobdBin(), nil, args...)
	if done := waitState(t, producer.Manager, ji.ID, job.Completed); done.Attempt != 1 {
		t.Errorf("completed at attempt %d; want 1", done.Attempt)
	}
}

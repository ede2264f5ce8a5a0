package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
	"github.com/jobkit/job/store/redisstore"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// binDir holds the binaries TestMain builds: jobd, testjobd (jobd with
// the test executors echo, sleep and block linked in) and jobctl.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jobd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := func() int {
		defer os.RemoveAll(dir)
		for _, b := range []struct{ out, pkg string }{
			{"jobd", "."},
			{"testjobd", "../../internal/jobd/testjobd"},
			{"jobctl", "../jobctl"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "go build %s: %v\n", b.pkg, err)
				return 1
			}
		}
		defer testserver.StopAll() // a PostgreSQL TestPostgres started
		return m.Run()
	}()
	os.Exit(code)
}

// jobdBin, testjobdBin and jobctlBin are the built binaries.
func jobdBin() string     { return filepath.Join(binDir, "jobd") }
func testjobdBin() string { return filepath.Join(binDir, "testjobd") }
func jobctlBin() string   { return filepath.Join(binDir, "jobctl") }

// proc is a running jobd.
type proc struct {
	t   *testing.T
	cmd *exec.Cmd
	// api and health are the base URLs ("http://127.0.0.1:port") of the
	// API and of /healthz, /readyz and /metrics.
	api, health string
	mu          sync.Mutex
	log         bytes.Buffer // stderr
	exited      chan struct{}
	waitErr     error
}

// logText returns what the process wrote to stderr so far.
func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// exitCode waits (up to d) for the process to exit and returns its status.
func (p *proc) exitCode(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		p.t.Fatalf("jobd did not exit within %v; its log:\n%s", d, p.logText())
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode()
	}
	if p.waitErr != nil {
		p.t.Fatalf("jobd: %v", p.waitErr)
	}
	return 0
}

// signal sends sig to the process.
func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// startJobd starts bin with args (listening on a free loopback port and
// logging JSON unless env or args say otherwise), waits until it logs where it listens and
// /readyz answers 200, and stops it (SIGTERM) at the end of the test.
func startJobd(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := startNoWait(t, bin, env, args...)
	p.waitReady()
	return p
}

// startNoWait starts jobd and waits only until it logs where it listens.
func startNoWait(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// By the environment, so a test can run jobd with no flags at all;
	// env and flags given win.
	cmd.Env = append(append(os.Environ(), "JOBD_LISTEN=127.0.0.1:0", "JOBD_LOG_FORMAT=json"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, exited: make(chan struct{})}
	listening := make(chan map[string]any, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.log.Write(line)
			p.log.WriteByte('\n')
			p.mu.Unlock()
			var rec map[string]any
			if json.Unmarshal(line, &rec) == nil && rec["msg"] == "jobd listening" {
				select {
				case listening <- rec:
				default:
				}
			}
		}
	}()
	go func() {
		<-readDone
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
			t.Errorf("jobd did not drain within 30 s of SIGTERM; killed. Its log:\n%s", p.logText())
		}
	})
	select {
	case rec := <-listening:
		p.api, _ = rec["listen"].(string)
		p.health = p.api
		if m, ok := rec["metrics-listen"].(string); ok {
			p.health = m
		}
	case <-p.exited:
		t.Fatalf("jobd %v exited before listening: %v; its log:\n%s", args, p.waitErr, p.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("jobd %v did not log where it listens within 30 s; its log:\n%s", args, p.logText())
	}
	return p
}

// httpClient is a plain HTTP/1.1 client, as curl would call.
var httpClient = &http.Client{Timeout: 10 * time.Second}

// get returns the status and body of GET url.
func get(url string) (int, string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitReady waits until /readyz answers 200.
func (p *proc) waitReady() {
	p.t.Helper()
	waitFor(p.t, 30*time.Second, "/readyz to answer 200", func() (bool, string) {
		code, body, err := get(p.health + "/readyz")
		return code == http.StatusOK, fmt.Sprintf("%d %q %v; log:\n%s", code, body, err, p.logText())
	})
}

// waitFor polls cond until it holds or d passes; then it fails the test
// with what cond said last.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; last: %s", d, what, last)
		}
		<-tick.C
	}
}

// run runs bin with args to its end and returns its exit status and
// stderr.
func run(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stderr.String()
	}
	if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return 0, stderr.String()
}

// redisAddr returns the Redis of the tests, or fails saying how to get
// one.
func redisAddr(t *testing.T) string {
	t.Helper()
	a := os.Getenv("JOBKIT_REDIS_ADDR")
	if a == "" {
		t.Fatal("JOBKIT_REDIS_ADDR is not set: run scripts/test.sh (it starts redis-server), or start one (redis-server --port 6390 --save '') and export JOBKIT_REDIS_ADDR=127.0.0.1:6390")
	}
	return a
}

// etcdEndpoints returns the etcd of the tests, or fails saying how to get
// one.
func etcdEndpoints(t *testing.T) string {
	t.Helper()
	e := os.Getenv("JOBKIT_ETCD_ENDPOINTS")
	if e == "" {
		t.Fatal("JOBKIT_ETCD_ENDPOINTS is not set: run scripts/test.sh (it starts etcd), or start one (etcd --data-dir /tmp/e --listen-client-urls http://127.0.0.1:2399 --advertise-client-urls http://127.0.0.1:2399) and export JOBKIT_ETCD_ENDPOINTS=127.0.0.1:2399")
	}
	return e
}

// uniqueNS returns a namespace no other test run uses.
func uniqueNS(t *testing.T) string {
	return fmt.Sprintf("jobdtest-%s-%d", strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name())), time.Now().UnixNano())
}

// worker is a Manager in the test process sharing jobd's store: it runs
// the kinds jobd schedules (jobd has no executors), and publishes their
// definitions so jobd can schedule them.
type worker struct {
	*job.Manager
	started chan string // the ID of each instance as its executor starts
}

// kindAdd is the test kind the worker runs: add [a, b int] returns a+b.
const kindAdd = "add"

// kindHold runs until the test closes hold (or the attempt is canceled).
const kindHold = "hold"

// newRedisWorker starts a worker on Redis namespace ns.
func newRedisWorker(t *testing.T, ns string, workers int, hold <-chan struct{}) *worker {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := redisstore.New(rdb, redisstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	return newWorker(t, st, workers, hold)
}

// newEtcdWorker starts a worker on etcd namespace ns.
func newEtcdWorker(t *testing.T, ns string, workers int) *worker {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(etcdEndpoints(t), ","), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	st, err := etcdstore.New(cli, etcdstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return newWorker(t, st, workers, nil)
}

func newWorker(t *testing.T, st store.Store, workers int, hold <-chan struct{}) *worker {
	t.Helper()
	w := &worker{started: make(chan string, 1024)}
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(workers), job.WithPublishDefinitions(),
		job.WithNodeID(fmt.Sprintf("test-worker-%d", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	add, err := job.NewJob(job.WithKind(kindAdd), job.WithExecutor(func(ji job.Instance, a, b int) (int, error) {
		w.started <- ji.Info().ID
		return a + b, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	holdJob, err := job.NewJob(job.WithKind(kindHold), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
		w.started <- ji.Info().ID
		select {
		case <-hold:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []*job.Job{add, holdJob} {
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Stop(ctx); err != nil {
			t.Errorf("stop the worker: %v", err)
		}
	})
	w.Manager = m
	return w
}

// waitState waits until instance id is in state want, as m sees it.
func waitState(t *testing.T, m *job.Manager, id string, want job.State) *job.InstanceInfo {
	t.Helper()
	var ji *job.InstanceInfo
	waitFor(t, 20*time.Second, fmt.Sprintf("instance %s to be %v", id, want), func() (bool, string) {
		var err error
		ji, err = m.GetInstance(context.Background(), id)
		if err != nil {
			return false, err.Error()
		}
		return ji.State == want, ji.State.String()
	})
	return ji
}

// Package redisfault tests jobkit on Redis with real OS processes: worker
// processes (internal/faulttest/redisworker, built by the test) share one
// redis-server and are killed, or the server is, mid-run.
package redisfault

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/redisstore"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const (
	jobs  = 3000
	lease = 2 * time.Second
)

var build struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// worker returns the path of the redisworker binary, built once.
func worker(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "jobkit-redisworker-")
		if err != nil {
			build.err = err
			return
		}
		build.bin = filepath.Join(dir, "redisworker")
		cmd := exec.Command("go", "build", "-o", build.bin, "github.com/jobkit/job/internal/faulttest/redisworker")
		build.out, build.err = cmd.CombinedOutput()
	})
	if build.err != nil {
		t.Fatalf("build redisworker: %v\n%s", build.err, build.out)
	}
	return build.bin
}

// proc is one worker process.
type proc struct {
	node string
	cmd  *exec.Cmd
	done chan struct{}
	out  *strings.Builder
	mu   sync.Mutex
}

func start(t *testing.T, addr, ns, node string, args ...string) *proc {
	t.Helper()
	p := &proc{node: node, done: make(chan struct{}), out: &strings.Builder{}}
	p.cmd = exec.Command(worker(t), append([]string{"-addr", addr, "-ns", ns, "-node", node, "-lease", lease.String()}, args...)...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.out.Write(b)
	})
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
			}
		}
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s output:\n%s", node, p.out.String())
			p.mu.Unlock()
		}
	})
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("worker %s exited before it was ready", node)
	case <-time.After(20 * time.Second):
		t.Fatalf("worker %s not ready within 20s", node)
	}
	return p
}

// stop ends p with SIGTERM (an orderly Stop) and waits.
func (p *proc) stop(t *testing.T) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Errorf("worker %s did not stop within 15s of SIGTERM", p.node)
		p.cmd.Process.Kill()
		<-p.done
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// seed schedules n fault.work jobs through a manager that is never
// started.
func seed(t *testing.T, rdb *redis.Client, ns string, n int) {
	t.Helper()
	mgr, err := job.NewManager(job.WithStore(redisstore.New(rdb, redisstore.WithNamespace(ns))))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("fault.work"), job.WithMaxRetries(job.RetryForever),
		job.WithExecutor(func(ctx context.Context, ji job.Instance, n int) (int, error) { return n * 2, nil }))
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := mgr.ScheduleJob(t.Context(), "fault.work", job.WithArguments(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// verify waits until every fault.work instance is Completed and checks
// that each completed exactly once. It returns the store's history.
func verify(t *testing.T, s store.Store, n int, within time.Duration) []*store.HistoryRecord {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ins, err := s.LookupInstances(t.Context(), &store.Query{Kind: "fault.work", States: []store.State{store.Completed}})
		if err == nil && len(ins) == n {
			break
		}
		if time.Now().After(deadline) {
			all, _ := s.LookupInstances(t.Context(), &store.Query{Kind: "fault.work"})
			states := map[store.State]int{}
			for _, in := range all {
				states[in.State]++
			}
			t.Fatalf("after %v: %d of %d completed (%v, lookup error %v); states %v", within, len(ins), n, len(all), err, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
	hist, err := s.LookupHistory(t.Context(), &store.Query{Kind: "fault.work"})
	if err != nil {
		t.Fatal(err)
	}
	completed := map[string]int{}
	for _, h := range hist {
		if h.State == store.Completed {
			completed[h.InstanceID]++
		}
	}
	if len(completed) != n {
		t.Fatalf("%d instances have a Completed record, want %d", len(completed), n)
	}
	for id, c := range completed {
		if c != 1 {
			t.Fatalf("instance %s completed %d times", id, c)
		}
	}
	return hist
}

func newClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestKillWorker: three processes share 3,000 jobs; one is SIGKILLed
// mid-run. Every job completes exactly once, and the killed process's
// attempts are back in the queue within lease + 1 s.
func TestKillWorker(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	rdb := newClient(t, srv.Addr)
	ns := fmt.Sprintf("kill_%d", time.Now().UnixNano())
	s := redisstore.New(rdb, redisstore.WithNamespace(ns))
	seed(t, rdb, ns, jobs)
	ps := []*proc{start(t, srv.Addr, ns, "w1"), start(t, srv.Addr, ns, "w2"), start(t, srv.Addr, ns, "w3")}
	runs := "faulttest:{" + ns + "}:runs"
	waitFor(t, 30*time.Second, "a third of the jobs to start", func() bool { return rdb.LLen(t.Context(), runs).Val() >= jobs/3 })

	ps[1].cmd.Process.Signal(syscall.SIGKILL)
	<-ps[1].done
	killed := time.Now()
	inflight, err := s.LookupInstances(t.Context(), &store.Query{Kind: "fault.work", States: []store.State{store.Processing}})
	if err != nil {
		t.Fatal(err)
	}
	lost := map[string]int{} // instance → attempt held by the killed node
	for _, in := range inflight {
		if in.LeaseOwner == "w2" {
			lost[in.ID] = in.Attempt
		}
	}
	if len(lost) == 0 {
		t.Fatal("the killed worker held no lease; the test proves nothing")
	}

	hist := verify(t, s, jobs, 60*time.Second)
	// Rescue puts an expired attempt back in the queue with RunAt = now,
	// so it is back in line within lease + rescue interval; it then runs
	// in claim order, after the backlog queued before it.
	var rescued, reran time.Duration
	back := map[string]bool{}
	for _, h := range hist {
		a, ok := lost[h.InstanceID]
		if !ok {
			continue
		}
		switch {
		case h.State == store.Scheduled && h.Attempt == a && strings.Contains(h.Error, "expired"):
			rescued = max(rescued, h.Time.Sub(killed))
			back[h.InstanceID] = true
		case h.State == store.Processing && h.Attempt == a+1:
			reran = max(reran, h.Time.Sub(killed))
		}
	}
	if len(back) != len(lost) {
		t.Fatalf("%d of the killed worker's %d attempts were rescued", len(back), len(lost))
	}
	t.Logf("killed worker held %d attempts: all rescued within %v of the kill (lease %v), all ran again within %v (behind the backlog)", len(lost), rescued, lease, reran)
	if rescued > lease+time.Second {
		t.Fatalf("a killed worker's attempt was rescued %v after the kill, want within lease + 1s = %v", rescued, lease+time.Second)
	}
	ps[0].stop(t)
	ps[2].stop(t)
}

// TestRedisRestart: the durable redis-server is killed and restarted
// mid-run; the workers reconnect on their own and every job completes
// exactly once.
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := newClient(t, srv.Addr)
	ns := fmt.Sprintf("restart_%d", time.Now().UnixNano())
	s := redisstore.New(rdb, redisstore.WithNamespace(ns))
	seed(t, rdb, ns, jobs)
	ps := []*proc{start(t, srv.Addr, ns, "w1"), start(t, srv.Addr, ns, "w2"), start(t, srv.Addr, ns, "w3")}
	runs := "faulttest:{" + ns + "}:runs"
	waitFor(t, 30*time.Second, "a third of the jobs to start", func() bool { return rdb.LLen(t.Context(), runs).Val() >= jobs/3 })
	srv.Kill()
	time.Sleep(500 * time.Millisecond)
	srv = testserver.RestartRedis(t, srv)
	verify(t, s, jobs, 90*time.Second)
	for _, p := range ps {
		p.stop(t)
	}
}

// TestCronOnce: three processes run a job recurring every second; every
// tick runs exactly once. JOBKIT_FAULT_CRON (a duration, default 15s)
// sets how long.
func TestCronOnce(t *testing.T) {
	t.Parallel()
	d := 15 * time.Second
	if v := os.Getenv("JOBKIT_FAULT_CRON"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("JOBKIT_FAULT_CRON=%q: %v", v, err)
		}
	}
	srv := testserver.StartRedis(t)
	rdb := newClient(t, srv.Addr)
	ns := fmt.Sprintf("cron_%d", time.Now().UnixNano())
	ps := []*proc{
		start(t, srv.Addr, ns, "c1", "-mode", "cron"),
		start(t, srv.Addr, ns, "c2", "-mode", "cron"),
		start(t, srv.Addr, ns, "c3", "-mode", "cron"),
	}
	began := time.Now()
	time.Sleep(d)
	for _, p := range ps {
		p.stop(t)
	}
	ended := time.Now()
	recs, err := rdb.LRange(t.Context(), "faulttest:{"+ns+"}:runs:tick", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	perTick := map[int64][]string{}
	for _, r := range recs {
		f := strings.Fields(r)
		ms, _ := strconv.ParseInt(f[1], 10, 64)
		perTick[ms] = append(perTick[ms], f[2])
	}
	var ticks []int64
	for ms, nodes := range perTick {
		if len(nodes) != 1 {
			t.Errorf("tick %v ran %d times (on %v)", time.UnixMilli(ms).UTC(), len(nodes), nodes)
		}
		ticks = append(ticks, ms)
	}
	slices.Sort(ticks)
	// Every whole second strictly inside the run must have run.
	for sec := began.Truncate(time.Second).Add(2 * time.Second); sec.Before(ended.Add(-2 * time.Second)); sec = sec.Add(time.Second) {
		if _, ok := perTick[sec.UnixMilli()]; !ok {
			t.Errorf("tick %v never ran", sec.UTC())
		}
	}
	t.Logf("%d ticks over %v on 3 processes, each exactly once", len(ticks), d)
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

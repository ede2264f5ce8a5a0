package benchkit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// The kinds of the API workloads: APIKind has a stored definition and a
// queue no manager claims (instances pile up, as in a burst of schedules);
// APIStartKind runs in the worker manager of the latency run.
const (
	APIKind      = "api-bench"
	apiQueue     = "api-bench"
	APIStartKind = "api-start"
)

// BuildJobd builds cmd/jobd of the repository that holds the working
// directory (or one of its parents) into dir and returns the binary.
func BuildJobd(dir string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "server", "cmd", "jobd", "main.go")); err == nil {
			out := filepath.Join(dir, "jobd")
			cmd := exec.Command("go", "build", "-o", out, "./cmd/jobd")
			cmd.Dir = filepath.Join(d, "server")
			cmd.Env = append(os.Environ(), "GOWORK=off")
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return "", fmt.Errorf("go build ./cmd/jobd in %s: %w", cmd.Dir, err)
			}
			return out, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no server/cmd/jobd above %s: run from the repository, or pass -jobd with a built jobd", wd)
		}
	}
}

// Jobd is a jobd process the benchmark started.
type Jobd struct {
	// URL is the API's base URL.
	URL    string
	cmd    *exec.Cmd
	exited chan struct{}
	log    tailBuffer
}

// StartJobd starts bin on Redis at redisAddr serving namespace ns on a
// free loopback port, and waits until /readyz answers 200.
func StartJobd(bin, redisAddr, ns string) (*Jobd, error) {
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--log-format", "json",
		"--store", "redis", "--redis-addr", redisAddr, "--namespace", ns)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	j := &Jobd{cmd: cmd, exited: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			_, _ = j.log.Write(append(sc.Bytes(), '\n'))
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "jobd listening" {
				if u, ok := rec["listen"].(string); ok {
					select {
					case listening <- u:
					default:
					}
				}
			}
		}
		_ = cmd.Wait()
		close(j.exited)
	}()
	select {
	case j.URL = <-listening:
	case <-j.exited:
		return nil, fmt.Errorf("jobd exited before listening: %s", j.log.String())
	case <-time.After(30 * time.Second):
		j.Stop()
		return nil, fmt.Errorf("jobd did not listen within 30 s: %s", j.log.String())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(j.URL + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j, nil
			}
		}
		if time.Now().After(deadline) {
			j.Stop()
			return nil, fmt.Errorf("jobd not ready within 30 s (%v): %s", err, j.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop drains jobd (SIGTERM) and waits for it to exit.
func (j *Jobd) Stop() {
	_ = j.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-j.exited:
	case <-time.After(30 * time.Second):
		_ = j.cmd.Process.Kill()
		<-j.exited
	}
}

// APIEnv is what the API workloads share: Redis, a jobd on it, a
// producer manager (for the in-process baseline) and a worker manager
// (for the latency run), all in namespace NS.
type APIEnv struct {
	NS       string
	Jobd     *Jobd
	Producer *job.Manager
	worker   *job.Manager
	started  chan time.Time
	rdb      *redis.Client
	client   jobkitv1connect.JobServiceClient
}

// NewAPIEnv starts a jobd (bin) on Redis and the managers.
func NewAPIEnv(ctx context.Context, bin, redisAddr string) (*APIEnv, error) {
	e := &APIEnv{NS: fmt.Sprintf("apibench-%d", time.Now().UnixNano()), started: make(chan time.Time, 16)}
	e.rdb = redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 64, ContextTimeoutEnabled: true})
	mk := func(workers int) (*job.Manager, error) {
		st, err := redisstore.New(e.rdb, redisstore.WithNamespace(e.NS))
		if err != nil {
			return nil, err
		}
		return job.NewManager(job.WithStore(st), job.WithWorkers(workers), job.WithPublishDefinitions())
	}
	var err error
	if e.Producer, err = mk(0); err != nil {
		return nil, err
	}
	if _, err := e.Producer.Admin().PutDefinition(ctx, job.Definition{Kind: APIKind, Queue: apiQueue}, 0); err != nil {
		return nil, err
	}
	if e.worker, err = mk(8); err != nil {
		return nil, err
	}
	start, err := job.NewJob(job.WithKind(APIStartKind), job.WithExecutor(func() {
		e.started <- time.Now()
	}))
	if err != nil {
		return nil, err
	}
	if err := e.worker.RegisterJob(start); err != nil {
		return nil, err
	}
	for _, m := range []*job.Manager{e.Producer, e.worker} {
		if err := m.Start(ctx); err != nil {
			return nil, err
		}
	}
	if e.Jobd, err = StartJobd(bin, redisAddr, e.NS); err != nil {
		e.Close()
		return nil, err
	}
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	e.client = jobkitv1connect.NewJobServiceClient(&http.Client{Transport: tr}, e.Jobd.URL)
	return e, nil
}

// Close stops everything NewAPIEnv started and removes its keys.
func (e *APIEnv) Close() {
	if e.Jobd != nil {
		e.Jobd.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range []*job.Manager{e.worker, e.Producer} {
		if m != nil {
			_ = m.Stop(ctx)
		}
	}
	var cursor uint64
	for {
		keys, next, err := e.rdb.Scan(ctx, cursor, "jobkit:{"+e.NS+"}:*", 1000).Result()
		if err != nil {
			break
		}
		if len(keys) > 0 {
			e.rdb.Unlink(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	_ = e.rdb.Close()
}

// callStats runs calls calls of f from clients goroutines and returns
// calls/s and the latency percentiles of one call.
func callStats(ctx context.Context, clients, calls int, limit time.Duration, f func(ctx context.Context) error) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var next atomic.Int64
	lat := make([][]int64, clients)
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	begin := time.Now()
	for c := range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(calls) && ctx.Err() == nil {
				t0 := time.Now()
				if err := f(ctx); err != nil {
					errOnce.Do(func() { firstErr = err })
					cancel()
					return
				}
				lat[c] = append(lat[c], time.Since(t0).Nanoseconds())
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	var all []int64
	for _, l := range lat {
		all = append(all, l...)
	}
	if firstErr != nil && !errors.Is(firstErr, context.DeadlineExceeded) {
		return nil, firstErr
	}
	ms := millis(all)
	s := Sample{"calls/s": float64(len(all)) / elapsed.Seconds(), "p50 ms": Percentile(ms, 0.50), "p99 ms": Percentile(ms, 0.99)}
	if len(all) < calls {
		return s, fmt.Errorf("%w: %d of %d calls in %v", ErrCutShort, len(all), calls, limit)
	}
	return s, nil
}

// APISchedule schedules calls jobs over the API, one Schedule call each,
// from clients concurrent clients.
func APISchedule(ctx context.Context, e *APIEnv, clients, calls int, limit time.Duration) (Sample, error) {
	req := &jobkitv1.ScheduleRequest{Kind: APIKind, ArgsJson: "[1]"}
	s, err := callStats(ctx, clients, calls, limit, func(ctx context.Context) error {
		_, err := e.client.Schedule(ctx, connect.NewRequest(req))
		return err
	})
	if s != nil {
		s["jobs/s"] = s["calls/s"]
	}
	return s, err
}

// APIScheduleBatch schedules batches × size jobs over the API in
// ScheduleBatch calls of size items, from clients concurrent clients.
func APIScheduleBatch(ctx context.Context, e *APIEnv, clients, batches, size int, limit time.Duration) (Sample, error) {
	items := make([]*jobkitv1.ScheduleRequest, size)
	for i := range items {
		items[i] = &jobkitv1.ScheduleRequest{Kind: APIKind, ArgsJson: "[1]"}
	}
	req := &jobkitv1.ScheduleBatchRequest{Items: items}
	s, err := callStats(ctx, clients, batches, limit, func(ctx context.Context) error {
		resp, err := e.client.ScheduleBatch(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		for _, r := range resp.Msg.GetResults() {
			if r.GetError() != nil {
				return fmt.Errorf("batch item: %s: %s", r.GetError().GetCode(), r.GetError().GetMessage())
			}
		}
		return nil
	})
	if s != nil {
		s["jobs/s"] = s["calls/s"] * float64(size)
	}
	return s, err
}

// InProcessSchedule is the baseline: calls ScheduleJob calls of a manager
// in this process on the same Redis, from clients goroutines.
func InProcessSchedule(ctx context.Context, e *APIEnv, clients, calls int, limit time.Duration) (Sample, error) {
	s, err := callStats(ctx, clients, calls, limit, func(ctx context.Context) error {
		_, err := e.Producer.ScheduleJob(ctx, APIKind, job.WithArguments(1))
		return err
	})
	if s != nil {
		s["jobs/s"] = s["calls/s"]
	}
	return s, err
}

// APIScheduleToStart measures, n times one at a time on an idle system,
// the time from a Schedule call over the API to the executor starting in
// the worker manager (another manager on the same Redis).
func APIScheduleToStart(ctx context.Context, e *APIEnv, n int, limit time.Duration) (Sample, error) {
	req := &jobkitv1.ScheduleRequest{Kind: APIStartKind}
	deadline := time.Now().Add(limit)
	lat := make([]int64, 0, n)
	for range n {
		if time.Now().After(deadline) {
			break
		}
		t0 := time.Now()
		if _, err := e.client.Schedule(ctx, connect.NewRequest(req)); err != nil {
			return nil, err
		}
		select {
		case t := <-e.started:
			lat = append(lat, t.Sub(t0).Nanoseconds())
		case <-time.After(10 * time.Second):
			return nil, errors.New("an instance scheduled over the API did not start within 10 s")
		}
	}
	ms := millis(lat)
	s := Sample{"p50 ms": Percentile(ms, 0.50), "p99 ms": Percentile(ms, 0.99)}
	if len(lat) < n {
		return s, fmt.Errorf("%w: %d of %d in %v", ErrCutShort, len(lat), n, limit)
	}
	return s, nil
}

// APIPlan is what the API mode runs.
type APIPlan struct {
	Calls     int // Schedule calls per single-call run
	Batches   int // ScheduleBatch calls per batched run
	BatchSize int
	LatencyN  int
	Clients   []int
}

// APIRows runs the API workloads runs times each and calls row with each
// figure.
func APIRows(ctx context.Context, e *APIEnv, p APIPlan, runs int, limit time.Duration, row func(figure string, r Result, key, unit string, prec int)) {
	for _, c := range p.Clients {
		r := Repeat(runs, func() (Sample, error) { return InProcessSchedule(ctx, e, c, p.Calls, limit) })
		row(fmt.Sprintf("in-process ScheduleJob, %d goroutines: calls/s", c), r, "calls/s", "calls/s", 0)
		row(fmt.Sprintf("in-process ScheduleJob, %d goroutines: p50", c), r, "p50 ms", "ms", 3)
		row(fmt.Sprintf("in-process ScheduleJob, %d goroutines: p99", c), r, "p99 ms", "ms", 3)
		r = Repeat(runs, func() (Sample, error) { return APISchedule(ctx, e, c, p.Calls, limit) })
		row(fmt.Sprintf("API Schedule (one job per call), %d clients: calls/s", c), r, "calls/s", "calls/s", 0)
		row(fmt.Sprintf("API Schedule (one job per call), %d clients: p50", c), r, "p50 ms", "ms", 3)
		row(fmt.Sprintf("API Schedule (one job per call), %d clients: p99", c), r, "p99 ms", "ms", 3)
		r = Repeat(runs, func() (Sample, error) { return APIScheduleBatch(ctx, e, c, p.Batches, p.BatchSize, limit) })
		row(fmt.Sprintf("API ScheduleBatch (%d jobs per call), %d clients: jobs/s", p.BatchSize, c), r, "jobs/s", "jobs/s", 0)
		row(fmt.Sprintf("API ScheduleBatch (%d jobs per call), %d clients: calls/s", p.BatchSize, c), r, "calls/s", "calls/s", 1)
		row(fmt.Sprintf("API ScheduleBatch (%d jobs per call), %d clients: p50 per call", p.BatchSize, c), r, "p50 ms", "ms", 2)
		row(fmt.Sprintf("API ScheduleBatch (%d jobs per call), %d clients: p99 per call", p.BatchSize, c), r, "p99 ms", "ms", 2)
	}
	r := Repeat(runs, func() (Sample, error) { return APIScheduleToStart(ctx, e, p.LatencyN, limit) })
	row(fmt.Sprintf("idle API Schedule → executor start in a worker manager, p50 (%d jobs, one at a time)", p.LatencyN), r, "p50 ms", "ms", 3)
	row("idle API Schedule → executor start, p99", r, "p99 ms", "ms", 3)
}

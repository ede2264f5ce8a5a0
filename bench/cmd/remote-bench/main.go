// Command remote-bench measures remote executors (issue 21): no-op tasks
// per second through one jobd to 1 and 4 remote worker processes, and the
// pick-up latency of an idle remote worker (enqueue to executor start),
// against the same work done by in-process managers on the same store.
//
// jobd runs in this process (package server on a redisstore); each worker
// is this program again with -worker. It needs a redis-server:
//
//	go run ./cmd/remote-bench -redis-addr 127.0.0.1:6379 [-n 50000] [-slots 64]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/redisstore"
)

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func main() {
	worker := flag.Bool("worker", false, "run as a worker process")
	addr := flag.String("addr", "", "jobd URL (-worker)")
	redisAddr := flag.String("redis-addr", "127.0.0.1:6379", "redis-server")
	n := flag.Int("n", 50000, "tasks per throughput run")
	slots := flag.Int("slots", 64, "worker slots per process (or per in-process manager)")
	samples := flag.Int("samples", 300, "pick-up latency samples")
	prof := flag.String("profile", "", "write CPU and allocation profiles of the throughput runs (this process and each worker) to files starting with this path")
	flag.Parse()
	var err error
	if *worker {
		err = runWorker(*addr, *slots, *prof)
	} else {
		err = run(*redisAddr, *n, *slots, *samples, *prof)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "remote-bench:", err)
		os.Exit(1)
	}
}

// noop is the benchmark's job: it returns when it started.
func noop() *job.Job {
	j, err := job.NewJob(job.WithKind("noop"), job.WithExecutor(func() int64 { return time.Now().UnixNano() }))
	if err != nil {
		panic(err)
	}
	return j
}

func runWorker(addr string, slots int, prof string) error {
	ctx := context.Background()
	stopProfile := profile(prof)
	m0 := mallocs()
	st, err := remote.Dial(ctx, remote.Options{Address: addr, Logger: quiet})
	if err != nil {
		return err
	}
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(slots), job.WithLogger(quiet))
	if err != nil {
		return err
	}
	if err := m.RegisterJob(noop()); err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	_, _ = os.Stdin.Read(make([]byte, 1)) // until the parent closes stdin
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = m.Stop(sctx)
	stopProfile()
	fmt.Printf("mallocs %d\n", mallocs()-m0)
	return err
}

func openStore(rdb *redis.Client, ns string) (store.Store, error) {
	return redisstore.New(rdb, redisstore.WithNamespace(ns))
}

func run(redisAddr string, n, slots, samples int, prof string) error {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 64})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", redisAddr, err)
	}
	fmt.Printf("remote-bench: redis %s, %d tasks per run, %d slots per worker, GOMAXPROCS %s\n", redisAddr, n, slots, os.Getenv("GOMAXPROCS"))
	for _, procs := range []int{1, 4} {
		for _, remoteMode := range []bool{true, false} {
			ns := "rb-" + uuid.NewString()[:8]
			st, err := openStore(rdb, ns)
			if err != nil {
				return err
			}
			path := ""
			if prof != "" {
				path = fmt.Sprintf("%s-%s-w%d", prof, mode(remoteMode), procs)
			}
			rs, err := startRunners(ctx, rdb, st, ns, remoteMode, procs, slots, path)
			if err != nil {
				return err
			}
			stopProfile := profile(path)
			cpu0, m0, r0 := cpuTime(), mallocs(), readRedisCost(ctx, rdb)
			load0 := loadavg()
			rate, err := throughput(ctx, st, n)
			msgsIn, msgsOut := rs.messages()
			cpu1, m1, r1 := cpuTime(), mallocs(), readRedisCost(ctx, rdb)
			load1 := loadavg()
			stopProfile()
			wcpu, wmallocs := rs.stop()
			if err != nil {
				return err
			}
			fmt.Printf("throughput  %-10s workers=%d: %8.0f tasks/s   (load %s -> %s)\n", mode(remoteMode), procs, rate, load0, load1)
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
			fmt.Printf("  cpu µs/task: this process %.1f, workers %.1f, redis %.1f; allocs/task: this process %.0f, workers %.0f; redis commands/task %.2f\n",
				per(cpu1-cpu0), per(wcpu), per(r1.cpu-r0.cpu), float64(m1-m0)/float64(n), float64(wmallocs)/float64(n), float64(r1.commands-r0.commands)/float64(n))
			if remoteMode {
				c := &rs.calls
				fn := float64(n)
				fmt.Printf("  jobd store calls/task: claim %.3f finish %.3f renew %.3f heartbeat %.3f; stream messages/task to jobd %.3f from jobd %.3f; bytes/task to jobd %.0f from jobd %.0f\n",
					float64(c.claim.Load())/fn, float64(c.finish.Load())/fn, float64(c.renew.Load())/fn, float64(c.heartbeat.Load())/fn,
					float64(msgsIn)/fn, float64(msgsOut)/fn, float64(rs.bytesIn.Load())/fn, float64(rs.bytesOut.Load())/fn)
			}
		}
	}
	for _, remoteMode := range []bool{true, false} {
		ns := "rb-" + uuid.NewString()[:8]
		st, err := openStore(rdb, ns)
		if err != nil {
			return err
		}
		rs, err := startRunners(ctx, rdb, st, ns, remoteMode, 1, slots, "")
		if err != nil {
			return err
		}
		load0 := loadavg()
		p50, p99, err := pickup(ctx, st, samples)
		rs.stop()
		if err != nil {
			return err
		}
		fmt.Printf("pick-up     %-10s idle worker: p50 %v  p99 %v  (%d samples; load %s -> %s)\n", mode(remoteMode), p50, p99, samples, load0, loadavg())
	}
	return nil
}

func mode(remote bool) string {
	if remote {
		return "remote"
	}
	return "in-process"
}

// loadavg returns the 1-minute load average.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// runners are the runners of one run and what jobd counted of them.
type runners struct {
	stops []func()
	// workers' CPU time and allocations, known once they stopped.
	wcpu     time.Duration
	wmallocs uint64
	// calls are jobd's store calls for the workers; bytesIn and bytesOut
	// the bytes on jobd's listener.
	calls             counts
	bytesIn, bytesOut atomic.Int64
	api               *server.Server
}

// stop stops the runners and returns the workers' CPU time and
// allocations.
func (r *runners) stop() (time.Duration, uint64) {
	for _, s := range slices.Backward(r.stops) {
		s()
	}
	return r.wcpu, r.wmallocs
}

// messages returns the stream messages jobd received and sent so far.
func (r *runners) messages() (in, out int64) {
	if r.api == nil {
		return 0, 0
	}
	for _, s := range r.api.Sessions() {
		in += s.Received
		out += s.Sent
	}
	return in, out
}

// startRunners starts procs runners of noop on st: worker processes
// connected to a jobd served here (remote), or managers in this process.
// Workers write profiles to prof-worker<i> when prof is set.
func startRunners(ctx context.Context, rdb *redis.Client, st store.Store, ns string, remoteMode bool, procs, slots int, prof string) (*runners, error) {
	rs := &runners{}
	stopAll := func() { rs.stop() }
	if !remoteMode {
		for range procs {
			s, err := openStore(rdb, ns)
			if err != nil {
				return nil, err
			}
			m, err := job.NewManager(job.WithStore(s), job.WithWorkers(slots), job.WithLogger(quiet))
			if err != nil {
				return nil, err
			}
			if err := m.RegisterJob(noop()); err != nil {
				return nil, err
			}
			if err := m.Start(ctx); err != nil {
				return nil, err
			}
			rs.stops = append(rs.stops, func() {
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				_ = m.Stop(sctx)
			})
		}
		return rs, nil
	}
	sched, err := job.NewManager(job.WithStore(st), job.WithWorkers(0), job.WithLogger(quiet))
	if err != nil {
		return nil, err
	}
	if err := sched.Start(ctx); err != nil {
		return nil, err
	}
	rs.stops = append(rs.stops, func() { _ = sched.Stop(context.Background()) })
	api, err := server.New(server.Config{Namespaces: map[string]*job.Manager{"default": sched}, ExecutorStores: map[string]store.Store{"default": countingStore{st, &rs.calls}}, Logger: quiet})
	if err != nil {
		return nil, err
	}
	rs.api = api
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: api, Protocols: server.Protocols(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(countingListener{ln, &rs.bytesIn, &rs.bytesOut})
	rs.stops = append(rs.stops, func() { hs.Close() })
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	for i := range procs {
		args := []string{"-worker", "-addr", "http://" + ln.Addr().String(), "-slots", strconv.Itoa(slots)}
		if prof != "" {
			args = append(args, "-profile", fmt.Sprintf("%s-worker%d", prof, i))
		}
		cmd := exec.Command(self, args...)
		stdin, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		lines := bufio.NewScanner(out)
		if !lines.Scan() || lines.Text() != "ready" {
			stopAll()
			return nil, fmt.Errorf("worker did not start: %v", lines.Err())
		}
		rs.stops = append(rs.stops, func() {
			stdin.Close()
			done := make(chan struct{})
			go func() {
				for lines.Scan() {
					if v, ok := strings.CutPrefix(lines.Text(), "mallocs "); ok {
						n, _ := strconv.ParseUint(v, 10, 64)
						rs.wmallocs += n
					}
				}
				_ = cmd.Wait()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-done
			}
			if ps := cmd.ProcessState; ps != nil {
				rs.wcpu += ps.UserTime() + ps.SystemTime()
			}
		})
	}
	return rs, nil
}

// throughput enqueues n noop tasks in batches and returns tasks per
// second from the first enqueue to the last completion.
func throughput(ctx context.Context, st store.Store, n int) (float64, error) {
	start := time.Now()
	go func() {
		for i := 0; i < n; i += 1000 {
			now := time.Now()
			var ins []*store.Instance
			for range min(1000, n-i) {
				ins = append(ins, &store.Instance{ID: uuid.NewString(), Kind: "noop", Queue: "default", Args: []byte("[]"), RunAt: now, CreatedAt: now})
			}
			if _, err := st.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now, Node: "bench"}); err != nil {
				fmt.Fprintln(os.Stderr, "enqueue:", err)
				return
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		cs, err := st.Counts(ctx, &store.CountsParams{Kind: "noop"})
		if err != nil {
			return 0, err
		}
		var done int64
		for _, c := range cs {
			done += c.States[store.Completed]
		}
		if done >= int64(n) {
			return float64(n) / time.Since(start).Seconds(), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d completed after 10 minutes", done, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pickup enqueues one task at a time to an idle runner and measures from
// just before the enqueue to the executor's start (its result).
func pickup(ctx context.Context, st store.Store, samples int) (p50, p99 time.Duration, _ error) {
	var ds []time.Duration
	for range samples {
		id := uuid.NewString()
		t0 := time.Now()
		in := &store.Instance{ID: id, Kind: "noop", Queue: "default", Args: []byte("[]"), RunAt: t0, CreatedAt: t0}
		if _, err := st.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Now: t0, Node: "bench"}); err != nil {
			return 0, 0, err
		}
		for {
			ins, err := st.LookupInstances(ctx, &store.Query{InstanceID: id})
			if err != nil {
				return 0, 0, err
			}
			if len(ins) == 1 && ins[0].State == store.Completed {
				var started []int64
				if err := jsonUnmarshal(ins[0].Result, &started); err != nil || len(started) != 1 {
					return 0, 0, fmt.Errorf("result %s: %v", ins[0].Result, err)
				}
				ds = append(ds, time.Unix(0, started[0]).Sub(t0))
				break
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // idle between samples: the runner waits for work
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100], nil
}

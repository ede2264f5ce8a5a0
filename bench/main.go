// Command bench measures jobkit side by side with asynq (on the same
// redis-server) and River (on PostgreSQL) in one run, on the workloads of
// bench/internal/benchkit, and writes the table into doc/benchmarks.md between
// its markers. It starts redis-server, etcd and PostgreSQL itself on free
// loopback ports and stops them by PID. scripts/bench.sh builds and runs
// it:
//
//	scripts/bench.sh quick   # a few minutes: small sizes, to check it all works
//	scripts/bench.sh full    # the published figures; run on a quiet machine
//
// This is a module of its own so that the library's go.mod never depends on
// asynq or River.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/bench/internal/benchkit"
)

// env is where the servers are.
type env struct {
	redisAddr string
	etcdEPs   []string
	pgURL     string
}

// sysSpec is one column of the table.
type sysSpec struct {
	name     string
	peer     string // "" for jobkit, else "asynq", "river" or "baseline"
	only     string // a workload key: the system takes part in that one only ("": all)
	tuned    bool
	recovery bool // used only by the recovery workload
	store    string
	about    string
	make     func(ctx context.Context, e env) (benchkit.System, error)
}

func specs() []sysSpec {
	jk := func(store string, tuned bool) sysSpec {
		name := "jobkit-" + store
		about := "jobkit defaults (lease 30 s, rescue every 1 s, retry backoff 1 s doubling"
		if store == "etcd" {
			about += ", etcd lease TTL 10 s"
		}
		about += ")"
		if tuned {
			name += "-lease2s"
			about = "WithLease(2 s), WithRescueInterval(250 ms), ConstantBackoff(10 ms)"
			if store == "etcd" {
				about += ", etcdstore.WithLeaseTTL(2 s)"
			}
		}
		return sysSpec{name: name, tuned: tuned, recovery: tuned, store: store, about: about,
			make: func(_ context.Context, e env) (benchkit.System, error) {
				cfg := benchkit.JobkitConfig{Name: name, Store: store, RedisAddr: e.redisAddr, EtcdEndpoints: e.etcdEPs, PGURL: e.pgURL,
					FinishLinger: *jobkitFinishLinger, PGNotifyWindow: *pgNotifyWindow}
				if tuned {
					cfg.Lease, cfg.RescueInterval, cfg.Backoff = 2*time.Second, 250*time.Millisecond, job.ConstantBackoff(10*time.Millisecond)
					cfg.EtcdLeaseTTL = 2 * time.Second
				}
				return benchkit.NewJobkit(cfg)
			}}
	}
	out := []sysSpec{jk("memdb", false), jk("redis", false), jk("valkey", false), jk("etcd", false), jk("pg", false)}
	out = append(out,
		sysSpec{name: "asynq", peer: "asynq", store: "redis", about: "asynq defaults (TaskCheckInterval 1 s, DelayedTaskCheckInterval 5 s)",
			make: func(_ context.Context, e env) (benchkit.System, error) {
				return newAsynq(e.redisAddr, asynqConfig{name: "asynq"}), nil
			}},
		sysSpec{name: "asynq-tuned", peer: "asynq", tuned: true, store: "redis", about: "TaskCheckInterval 10 ms, DelayedTaskCheckInterval 100 ms, RetryDelayFunc 10 ms",
			make: func(_ context.Context, e env) (benchkit.System, error) {
				return newAsynq(e.redisAddr, asynqConfig{name: "asynq-tuned", taskCheckInterval: 10 * time.Millisecond,
					delayedTaskCheckInterval: 100 * time.Millisecond, retryDelay: 10 * time.Millisecond}), nil
			}},
		sysSpec{name: "redis-rpush", peer: "baseline", store: "redis", only: "schedule",
			about: "no job system: one RPUSH per call through go-redis, the round trip any durable one-call enqueue pays",
			make: func(_ context.Context, e env) (benchkit.System, error) {
				return newRPushBaseline(e.redisAddr), nil
			}},
		sysSpec{name: "river", peer: "river", store: "postgres", about: "River defaults (FetchCooldown 100 ms, FetchPollInterval 1 s, JobTimeout 1 min, RescueStuckJobsAfter 1 h)",
			make: func(ctx context.Context, e env) (benchkit.System, error) {
				return newRiver(ctx, e.pgURL, riverConfig{name: "river"})
			}},
		sysSpec{name: "river-tuned", peer: "river", tuned: true, store: "postgres", about: "FetchCooldown 5 ms, FetchPollInterval 50 ms, JobTimeout 1 s, RescueStuckJobsAfter 2 s",
			make: func(ctx context.Context, e env) (benchkit.System, error) {
				return newRiver(ctx, e.pgURL, riverConfig{name: "river-tuned", fetchCooldown: 5 * time.Millisecond,
					fetchPollInterval: 50 * time.Millisecond, jobTimeout: time.Second, rescueStuckJobsAfter: 2 * time.Second})
			}},
	)
	out = append(out, jk("redis", true), jk("valkey", true), jk("etcd", true), jk("pg", true))
	return out
}

// jobkitFinishLinger is -jobkit-finish-linger (issue 17).
var jobkitFinishLinger = flag.Duration("jobkit-finish-linger", 0, "jobkit's WithFinishLinger for every jobkit system (default: the manager's, per store)")

// pgNotifyWindow sets pgstore.WithNotifyWindow on the jobkit-pg systems.
var pgNotifyWindow = flag.Duration("pg-notify-window", 0, "pgstore.WithNotifyWindow of the jobkit-pg systems (default 0: a notification per enqueue)")

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		workerMain(os.Args[2:])
		return
	}
	var p params
	mode := flag.String("mode", "quick", "quick (a few minutes, small sizes) or full (the published figures)")
	only := flag.String("only", "", "comma-separated workloads to run (default all): burndown, schedule, steady, rest, idle, scheduled, memory, depth, claim, recovery")
	systems := flag.String("systems", "", "comma-separated systems to run (default all): "+strings.Join(specNames(), ", "))
	out := flag.String("out", "", "Markdown file to write the table into, between its bench markers (default: none; scripts/bench.sh passes doc/benchmarks.md)")
	runs := flag.Int("runs", 0, "runs per figure (default 3); the median is reported")
	redisAddr := flag.String("redis-addr", "", "use this redis-server instead of starting one")
	etcdEPs := flag.String("etcd", "", "use these etcd endpoints instead of starting etcd")
	pgURL := flag.String("pg-url", "", "use this PostgreSQL database instead of starting a server")
	// Issue 17: one burn-down size on its own (100k jobs with 64 workers,
	// the figure) without the rest of full mode.
	burnSizes := flag.String("burn-sizes", "", "comma-separated burn-down sizes (jobs), replacing the mode's")
	burnWorkers := flag.String("burn-workers", "", "comma-separated burn-down worker counts, replacing the mode's")
	burnLimit := flag.Duration("burn-limit", 0, "time limit of one burn-down, schedule or batch run (default: the mode's)")
	rateCalls := flag.Int("rate-calls", 0, "ScheduleJob calls per single-call rate run of the schedule workload (default: the mode's)")
	batchJobs := flag.Int("batch-jobs", 0, "jobs per batch run of the schedule workload, 1,000 per call (default: the mode's)")
	// Issue 39: steady low rates (15, 40, 150 jobs/s for 60 s) with idle
	// workers waiting, for what a job costs PostgreSQL at rest.
	steadyRate := flag.Int("steady-rate", 0, "jobs/s of the steady workload (default: the mode's)")
	steadyDur := flag.Duration("steady-dur", 0, "how long the steady workload inserts (default: the mode's); its limit is twice this plus 5 s")
	steadyWorkers := flag.Int("steady-workers", 0, "workers of the steady workload (default: the mode's)")
	flag.Parse()
	switch *mode {
	case "quick":
		p = quickParams()
	case "full":
		p = fullParams()
	default:
		log.Fatalf("-mode %q: want quick or full", *mode)
	}
	if *runs > 0 {
		p.runs = *runs
	}
	if err := p.override(*burnSizes, *burnWorkers, *burnLimit); err != nil {
		log.Fatal(err)
	}
	if *rateCalls > 0 {
		p.rateN = *rateCalls
	}
	if *batchJobs > 0 {
		p.batchN = *batchJobs
	}
	if *steadyRate > 0 {
		p.steadyRate = *steadyRate
	}
	if *steadyDur > 0 {
		p.steadyDur, p.steadyLimit = *steadyDur, 2**steadyDur+5*time.Second
	}
	if *steadyWorkers > 0 {
		p.steadyWorkers = *steadyWorkers
	}
	p.mode = *mode
	want := func(list, name string) bool { return list == "" || strings.Contains(","+list+",", ","+name+",") }

	ctx := context.Background()
	started := time.Now()
	cmdline := "go run . " + strings.Join(os.Args[1:], " ")
	if v := os.Getenv("BENCH_COMMAND"); v != "" {
		cmdline = v
	}
	log.SetFlags(log.Ltime)
	log.Printf("bench %s mode; %s", *mode, benchkit.Machine())

	// Servers.
	var e env
	var ver versions
	ver.redis = serverVersion("redis-server", "--version")
	etcdBin := "etcd"
	if b := os.Getenv("JOBKIT_ETCD_BIN"); b != "" && *etcdEPs == "" {
		etcdBin = b // the program testserver starts
	}
	ver.etcd = serverVersion(etcdBin, "--version")
	if *etcdEPs != "" {
		// The server given, not the program on PATH, is the one measured.
		ver.etcd = etcdServerVersion(strings.Split(*etcdEPs, ",")[0])
	}
	needRedis, needEtcd, needPG := false, false, false
	var sel []sysSpec
	for _, s := range specs() {
		if !want(*systems, s.name) {
			continue
		}
		sel = append(sel, s)
		switch s.store {
		case "redis", "valkey":
			needRedis = true
		case "etcd":
			needEtcd = true
		case "postgres", "pg":
			needPG = true
		}
	}
	if needRedis {
		e.redisAddr = benchkit.StartRedis(*redisAddr)
		log.Printf("redis-server %s at %s", ver.redis, e.redisAddr)
	}
	if needEtcd {
		e.etcdEPs = benchkit.StartEtcd(*etcdEPs)
		log.Printf("etcd %s at %s", ver.etcd, strings.Join(e.etcdEPs, ","))
	}
	var pg *postgres
	if needPG {
		if *pgURL != "" {
			e.pgURL = *pgURL
		} else {
			var err error
			if pg, err = startPostgres(ctx); err != nil {
				benchkit.Fatalf("%v", err)
			}
			e.pgURL = pg.URL
			ver.postgres = pg.Version
			log.Printf("postgres %s at %s (pid %d)", pg.Version, pg.URL, pg.cmd.Process.Pid)
		}
		if err := migrateRiver(ctx, e.pgURL); err != nil {
			stopAll(pg)
			benchkit.Fatalf("river migrations: %v", err)
		}
	}
	p.env = e
	// Ctrl-C or SIGTERM: stop the servers before going.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		log.Printf("%v: stopping the servers", sig)
		stopAll(pg)
		os.Exit(1)
	}()

	rep := newReport(p, sel)
	runOne := func(s sysSpec, w workload, sys benchkit.System) {
		t0 := time.Now()
		load := benchkit.LoadAvg()
		r := w.run(ctx, s, sys)
		rep.add(w, s, r, load)
		log.Printf("%-22s %-34s %s  [%.1fs, load %s]", s.name, w.title, summarize(w, r), time.Since(t0).Seconds(), load)
	}
	type job struct {
		s sysSpec
		w workload
	}
	var waiting []job // workloads that mostly wait (recovery): run side by side at the end
	for _, s := range sel {
		var sys benchkit.System
		for _, w := range workloads(p) {
			if !want(*only, w.key) || !w.applies(s) || (s.only != "" && s.only != w.key) {
				continue
			}
			if w.parallel {
				waiting = append(waiting, job{s, w})
				continue
			}
			if sys == nil {
				var err error
				if sys, err = s.make(ctx, e); err != nil {
					stopAll(pg)
					benchkit.Fatalf("%s: %v", s.name, err)
				}
			}
			runOne(s, w, sys)
		}
		if sys != nil {
			sys.Close()
		}
	}
	if len(waiting) > 0 {
		log.Printf("running %d waiting workloads (recovery) side by side", len(waiting))
		var wg sync.WaitGroup
		for _, j := range waiting {
			sys, err := j.s.make(ctx, e)
			if err != nil {
				stopAll(pg)
				benchkit.Fatalf("%s: %v", j.s.name, err)
			}
			wg.Go(func() {
				defer sys.Close()
				runOne(j.s, j.w, sys)
			})
		}
		wg.Wait()
	}
	stopAll(pg)
	rep.finish(ver, cmdline, started)
	md := rep.markdown()
	fmt.Println(md)
	if *out != "" {
		if err := benchkit.WriteBetweenMarkers(*out, "Benchmarks", md); err != nil {
			log.Fatalf("write %s: %v", *out, err)
		}
		log.Printf("wrote %s", *out)
	}
	log.Printf("done in %v", time.Since(started).Round(time.Second))
}

func stopAll(pg *postgres) {
	if pg != nil {
		pg.stop()
	}
	benchkit.StopServers()
}

func specNames() []string {
	var ns []string
	for _, s := range specs() {
		ns = append(ns, s.name)
	}
	return ns
}

// workerMain is the worker process of the recovery workload:
// `bench worker -system NAME -queue ID -workers N -redis-addr ... -etcd ... -pg-url ...`.
func workerMain(args []string) {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	name := fs.String("system", "", "system name")
	queue := fs.String("queue", "", "queue ID")
	workers := fs.Int("workers", 4, "workers")
	redisAddr := fs.String("redis-addr", "", "")
	etcdEPs := fs.String("etcd", "", "")
	pgURL := fs.String("pg-url", "", "")
	_ = fs.Parse(args)
	e := env{redisAddr: *redisAddr, pgURL: *pgURL}
	if *etcdEPs != "" {
		e.etcdEPs = strings.Split(*etcdEPs, ",")
	}
	log.SetOutput(os.Stderr)
	for _, s := range specs() {
		if s.name != *name {
			continue
		}
		ctx := context.Background()
		sys, err := s.make(ctx, e)
		if err != nil {
			log.Fatal(err)
		}
		if err := benchkit.WorkerMain(ctx, sys, *queue, *workers); err != nil {
			log.Fatal(err)
		}
		return
	}
	log.Fatalf("worker: unknown system %q", *name)
}

// spawner returns the command that runs this program as a recovery worker.
func spawner(s sysSpec, e env) benchkit.Spawn {
	return func(id string, workers int) *exec.Cmd {
		self, err := os.Executable()
		if err != nil {
			log.Fatal(err)
		}
		c := exec.Command(self, "worker", "-system", s.name, "-queue", id, "-workers", strconv.Itoa(workers),
			"-redis-addr", e.redisAddr, "-etcd", strings.Join(e.etcdEPs, ","), "-pg-url", e.pgURL)
		c.Stdin = nil
		return c
	}
}

type versions struct{ redis, etcd, postgres string }

func serverVersion(bin string, args ...string) string {
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		return "not installed"
	}
	l := firstLine(string(out))
	for _, f := range strings.Fields(l) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	fs := strings.Fields(l)
	if len(fs) > 0 {
		return fs[len(fs)-1]
	}
	return l
}

// etcdServerVersion asks the etcd server at endpoint (host:port or a URL)
// for its version, from its /version endpoint.
func etcdServerVersion(endpoint string) string {
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(strings.TrimSuffix(endpoint, "/") + "/version")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer resp.Body.Close()
	var v struct {
		Server string `json:"etcdserver"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.Server == "" {
		return "unknown (no version at " + endpoint + "/version)"
	}
	return v.Server
}

// moduleVersions lists the versions of the modules this binary was built
// with.
func moduleVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	var out []string
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/hibiken/asynq", "github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riverpgxv5",
			"github.com/jackc/pgx/v5", "github.com/redis/go-redis/v9", "github.com/valkey-io/valkey-go",
			"go.etcd.io/etcd/client/v3", "github.com/google/btree":
			v := d.Version
			if d.Replace != nil {
				v = d.Replace.Version
			}
			out = append(out, d.Path+" "+v)
		}
	}
	return strings.Join(out, ", ")
}

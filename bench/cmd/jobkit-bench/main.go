// Command jobkit-bench measures jobkit end to end on one store: throughput
// of no-op jobs with several worker counts, idle schedule-to-start latency,
// heap (and server memory) per pending instance, and claim cost as the
// queue grows. On a server store (not memdb) it also measures across OS
// processes: throughput with 2 worker processes and idle latency with the
// workers in another process; the worker processes are this program,
// re-executed as `jobkit-bench worker ...`. It prints a Markdown table. The
// workloads live in bench/internal/benchkit, which the side-by-side
// benchmark with asynq and River (bench/main.go, run by scripts/bench.sh)
// shares. From the repository root (`go run ./bench/cmd/jobkit-bench ...`
// also works there once `make work` made the development workspace):
//
//	go -C bench run ./cmd/jobkit-bench -store memdb
//	go -C bench run ./cmd/jobkit-bench -store redis                          # starts a redis-server
//	go -C bench run ./cmd/jobkit-bench -store redis -redis-addr 127.0.0.1:6379
//	go -C bench run ./cmd/jobkit-bench -store etcd -etcd 127.0.0.1:2379
//	go run ./bench/cmd/jobkit-bench -store redis -only soak               # memory under 2,000 jobs/s for 6 min
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/bench/internal/benchkit"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		workerMain(os.Args[2:])
		return
	}
	var (
		storeName  = flag.String("store", "memdb", "store to measure: "+strings.Join(benchkit.Stores, ", "))
		redisAddr  = flag.String("redis-addr", os.Getenv("JOBKIT_REDIS_ADDR"), "redis-server address for the redis and valkey stores (default: start one)")
		etcdEPs    = flag.String("etcd", os.Getenv("JOBKIT_ETCD_ENDPOINTS"), "etcd endpoints, comma-separated (default: start one)")
		jobs       = flag.Int("jobs", 100_000, "jobs per throughput run")
		workers    = flag.String("workers", "1,8,64", "worker counts of the throughput runs")
		procW      = flag.Int("proc-workers", 32, "workers in each of the 2 worker processes of the cross-process throughput run")
		latencyN   = flag.Int("latency-n", 2000, "jobs in the idle latency run")
		pending    = flag.Int("pending", 100_000, "pending instances in the memory run")
		depths     = flag.String("depths", "1000,100000,1000000", "queue depths of the claim-cost run")
		runs       = flag.Int("runs", 3, "runs per figure; the median is reported")
		only       = flag.String("only", "", "comma-separated subset of: throughput, latency, memory, claim, soak, api, limits (soak, api and limits run only when named; api needs -store redis)")
		jobdBin    = flag.String("jobd", "", "jobd binary of the api workloads (default: go build ../server/cmd/jobd of this repository)")
		apiCalls   = flag.Int("api-calls", 20_000, "Schedule calls per single-call run of the api workloads")
		apiBatches = flag.Int("api-batches", 100, "ScheduleBatch calls per batched run of the api workloads")
		apiBatch   = flag.Int("api-batch-size", 1000, "jobs per ScheduleBatch call (at most 1000)")
		apiClients = flag.String("api-clients", "1,16", "concurrent clients of the api workloads")
		soakRate   = flag.Int("soak-rate", 2000, "jobs per second scheduled by the soak run")
		soakFor    = flag.Duration("soak-for", 6*time.Minute, "how long the soak run schedules jobs")
		soakEvery  = flag.Duration("soak-every", 15*time.Second, "how often the soak run samples memory")
		limit      = flag.Duration("limit", 10*time.Minute, "time limit of each run; a run that hits it is reported as cut short")
		pgURL      = flag.String("pg", os.Getenv("JOBKIT_PG_URL"), "PostgreSQL URL of the pg store")
		kindLimit  = flag.Int("kind-limit", 64, "concurrency limit of the limits workload's burn-down")
		limitWs    = flag.String("limit-workers", "64,128", "worker counts of the limits workload's burn-downs")
		accN       = flag.Int("accuracy-jobs", 20_000, "jobs of the limits workload's accuracy run (limit 10, 3 managers × 16 workers)")
		cpuprofile = flag.String("cpuprofile", "", "write a CPU profile to this file")
	)
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	ws, err := ints(*workers)
	if err != nil {
		log.Fatalf("-workers: %v", err)
	}
	ds, err := ints(*depths)
	if err != nil {
		log.Fatalf("-depths: %v", err)
	}
	want := func(name string) bool { return *only == "" || strings.Contains(","+*only+",", ","+name+",") }

	cfg := benchkit.JobkitConfig{Store: *storeName}
	switch *storeName {
	case "redis", "valkey":
		cfg.RedisAddr = benchkit.StartRedis(*redisAddr)
	case "etcd":
		cfg.EtcdEndpoints = benchkit.StartEtcd(*etcdEPs)
	case "pg":
		if *pgURL == "" {
			benchkit.Fatalf("-store pg needs -pg or JOBKIT_PG_URL")
		}
		cfg.PGURL = *pgURL
	}
	defer benchkit.StopServers()
	sys, err := benchkit.NewJobkit(cfg)
	if err != nil {
		benchkit.Fatalf("%v", err)
	}
	defer sys.Close()
	ctx := context.Background()
	// memdb lives in one process: no cross-process rows.
	cross := *storeName != "memdb"
	spawn := spawner(cfg)

	fmt.Printf("# jobkit-bench: store %s; %s; %s\n\n", *storeName, benchkit.Machine(), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("| figure | value | runs |\n|---|---|---|\n")
	row := func(figure string, r benchkit.Result, key, unit string, prec int) {
		if r.Err != nil {
			fmt.Printf("| %s | failed: %v | |\n", figure, r.Err)
			return
		}
		v := strconv.FormatFloat(r.Sample[key], 'f', prec, 64) + " " + unit
		if r.Cut {
			v += " (cut short: " + r.Note + ")"
		}
		fmt.Printf("| %s | %s | %d |\n", figure, v, r.Runs)
	}
	if want("throughput") {
		for _, w := range ws {
			r := benchkit.Repeat(*runs, func() (benchkit.Sample, error) { return benchkit.Burndown(ctx, sys, *jobs, w, *limit) })
			row(fmt.Sprintf("throughput, %d pre-scheduled no-op jobs, %d workers", *jobs, w), r, "jobs/s", "jobs/s", 0)
		}
		if cross {
			r := benchkit.Repeat(*runs, func() (benchkit.Sample, error) {
				return benchkit.CrossBurndown(ctx, sys, spawn, *jobs, 2, *procW, *limit)
			})
			row(fmt.Sprintf("throughput, %d pre-scheduled no-op jobs, 2 processes × %d workers", *jobs, *procW), r, "jobs/s", "jobs/s", 0)
		}
		r := benchkit.Repeat(*runs, func() (benchkit.Sample, error) {
			return benchkit.ScheduleAndRun(ctx, sys, *jobs/2, 8, 64, *limit)
		})
		row(fmt.Sprintf("throughput, schedule and run concurrently (%d jobs, 8 producers, 64 workers)", *jobs/2), r, "jobs/s", "jobs/s", 0)
	}
	if want("latency") {
		r := benchkit.Repeat(*runs, func() (benchkit.Sample, error) { return benchkit.Idle(ctx, sys, *latencyN, *limit) })
		row(fmt.Sprintf("idle schedule→start latency p50 (%d jobs, one at a time)", *latencyN), r, "p50 ms", "ms", 3)
		row("idle schedule→start latency p99", r, "p99 ms", "ms", 3)
		if cross {
			r := benchkit.Repeat(*runs, func() (benchkit.Sample, error) { return benchkit.CrossIdle(ctx, sys, spawn, *latencyN, *limit) })
			row(fmt.Sprintf("idle schedule→start latency across processes p50 (%d jobs, one at a time, 1 worker process × 8 workers)", *latencyN), r, "p50 ms", "ms", 3)
			row("idle schedule→start latency across processes p99", r, "p99 ms", "ms", 3)
		}
	}
	if want("memory") {
		r := benchkit.Repeat(1, func() (benchkit.Sample, error) { return benchkit.MemoryPerPending(ctx, sys, *pending, *limit) })
		row(fmt.Sprintf("Go heap (after GC) per pending instance at %d", *pending), r, "heap B/job", "B", 0)
		if name := sys.ServerMemoryName(); name != "" {
			row(fmt.Sprintf("%s per pending instance at %d", name, *pending), r, "server B/job", "B", 0)
		}
	}
	if *only != "" && want("soak") {
		fmt.Printf("\n## soak: %d jobs/s scheduled one by one (8 producers, 64 workers) for %v, default settings (retention included)\n\n", *soakRate, *soakFor)
		fmt.Printf("| t | scheduled | completed | Go heap (after GC) | %s |\n|---|---|---|---|---|\n", serverMemName(sys))
		err := benchkit.Soak(ctx, sys, *soakRate, *soakFor, *soakEvery, 64, func(p benchkit.SoakPoint) {
			server := "–"
			if p.Server > 0 {
				server = fmt.Sprintf("%.1f MB", float64(p.Server)/1e6)
			}
			fmt.Printf("| %v | %d | %d | %.1f MB | %s |\n", p.At, p.Scheduled, p.Completed, float64(p.Heap)/1e6, server)
		})
		if err != nil {
			fmt.Printf("\nsoak: %v\n", err)
		}
	}
	if *only != "" && want("api") {
		if *storeName != "redis" {
			benchkit.Fatalf("-only api needs -store redis (jobd on Redis)")
		}
		cs, err := ints(*apiClients)
		if err != nil {
			log.Fatalf("-api-clients: %v", err)
		}
		bin := *jobdBin
		if bin == "" {
			dir, err := os.MkdirTemp("", "jobkit-bench-jobd-")
			if err != nil {
				benchkit.Fatalf("%v", err)
			}
			defer os.RemoveAll(dir)
			if bin, err = benchkit.BuildJobd(dir); err != nil {
				benchkit.Fatalf("%v", err)
			}
		}
		e, err := benchkit.NewAPIEnv(ctx, bin, cfg.RedisAddr)
		if err != nil {
			benchkit.Fatalf("api: %v", err)
		}
		benchkit.APIRows(ctx, e, benchkit.APIPlan{Calls: *apiCalls, Batches: *apiBatches, BatchSize: *apiBatch, LatencyN: *latencyN, Clients: cs}, *runs, *limit, row)
		e.Close()
	}
	if *only != "" && want("limits") {
		lws, err := ints(*limitWs)
		if err != nil {
			log.Fatalf("-limit-workers: %v", err)
		}
		// Side by side, alternating, so drift in the machine's load
		// weighs on both columns alike.
		for _, w := range lws {
			var without, with []float64
			for range *runs {
				for _, lim := range []int{0, *kindLimit} {
					s, err := benchkit.Burndown(ctx, sys.WithKindLimit(lim), *jobs, w, *limit)
					if err != nil {
						fmt.Printf("| burn-down, %d workers, limit %d | failed: %v | |\n", w, lim, err)
						continue
					}
					if lim == 0 {
						without = append(without, s["jobs/s"])
					} else {
						with = append(with, s["jobs/s"])
					}
				}
			}
			a, b := benchkit.Median(without), benchkit.Median(with)
			fmt.Printf("| throughput, %d pre-scheduled no-op jobs, %d workers, no limit | %.0f jobs/s | %d |\n", *jobs, w, a, len(without))
			fmt.Printf("| throughput, %d pre-scheduled no-op jobs, %d workers, limit %d on the kind | %.0f jobs/s (%.2fx) | %d |\n", *jobs, w, *kindLimit, b, b/a, len(with))
		}
		// Peaks are the largest over the runs, not a median.
		var execs, sampled float64
		var rates []float64
		for range *runs {
			s, err := benchkit.LimitAccuracy(ctx, sys, *accN, 3, 16, 10, *limit)
			if err != nil {
				fmt.Printf("| limit accuracy | failed: %v | |\n", err)
				continue
			}
			execs, sampled = max(execs, s["peak executors"]), max(sampled, s["peak sampled"])
			rates = append(rates, s["jobs/s"])
		}
		fmt.Printf("| limit 10 across 3 managers × 16 workers (%d jobs of 1 ms): most executors running at once, over the runs | %.0f | %d |\n", *accN, execs, len(rates))
		fmt.Printf("| the same: most Processing in store counts sampled every 5 ms | %.0f | %d |\n", sampled, len(rates))
		fmt.Printf("| the same: throughput | %.0f jobs/s | %d |\n", benchkit.Median(rates), len(rates))
	}
	if want("claim") {
		for _, d := range ds {
			r := benchkit.Repeat(1, func() (benchkit.Sample, error) { return benchkit.ClaimCost(ctx, sys, d, 2000, *runs, *limit) })
			r.Runs = *runs // passes over one filled queue
			row(fmt.Sprintf("claim+finish of 1 instance at queue depth %d", d), r, "µs", "µs", 1)
		}
	}
}

// serverMemName names the server memory column of the soak table.
func serverMemName(sys *benchkit.Jobkit) string {
	if n := sys.ServerMemoryName(); n != "" {
		return n
	}
	return "server memory"
}

// spawner returns the command that runs this program as a worker process
// of the cross-process workloads on cfg's store.
func spawner(cfg benchkit.JobkitConfig) benchkit.CrossSpawn {
	return func(mode, id string, workers int) *exec.Cmd {
		self, err := os.Executable()
		if err != nil {
			benchkit.Fatalf("%v", err)
		}
		return exec.Command(self, "worker", "-mode", mode, "-store", cfg.Store, "-queue", id, "-workers", strconv.Itoa(workers),
			"-redis-addr", cfg.RedisAddr, "-etcd", strings.Join(cfg.EtcdEndpoints, ","))
	}
}

// workerMain is a worker process of the cross-process workloads:
// `jobkit-bench worker -mode throughput|latency -store NAME -queue ID -workers N -redis-addr ... -etcd ...`.
// It speaks to the parent over stdin and stdout (benchkit.CrossWorkerMain).
func workerMain(args []string) {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	mode := fs.String("mode", "", benchkit.CrossThroughput+" or "+benchkit.CrossLatency)
	storeName := fs.String("store", "", "store")
	queue := fs.String("queue", "", "queue ID")
	workers := fs.Int("workers", 8, "workers")
	redisAddr := fs.String("redis-addr", "", "redis-server address")
	etcdEPs := fs.String("etcd", "", "etcd endpoints, comma-separated")
	_ = fs.Parse(args)
	log.SetOutput(os.Stderr)
	cfg := benchkit.JobkitConfig{Store: *storeName, RedisAddr: *redisAddr}
	if *etcdEPs != "" {
		cfg.EtcdEndpoints = strings.Split(*etcdEPs, ",")
	}
	sys, err := benchkit.NewJobkit(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Close()
	if err := benchkit.CrossWorkerMain(context.Background(), sys, *mode, *queue, *workers); err != nil {
		log.Fatal(err)
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no value")
	}
	return out, nil
}

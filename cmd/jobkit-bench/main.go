// Command jobkit-bench measures jobkit end to end on one store: throughput
// of no-op jobs with several worker counts, idle schedule-to-start latency,
// heap (and server memory) per pending instance, and claim cost as the
// queue grows. It prints a Markdown table. The workloads live in
// internal/benchkit, which the side-by-side benchmark with asynq and River
// (the bench module, run by scripts/bench.sh) shares.
//
//	go run ./cmd/jobkit-bench -store memdb
//	go run ./cmd/jobkit-bench -store redis                          # starts a redis-server
//	go run ./cmd/jobkit-bench -store redis -redis-addr 127.0.0.1:6379
//	go run ./cmd/jobkit-bench -store etcd -etcd 127.0.0.1:2379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/internal/benchkit"
)

func main() {
	var (
		storeName  = flag.String("store", "memdb", "store to measure: "+strings.Join(benchkit.Stores, ", "))
		redisAddr  = flag.String("redis-addr", os.Getenv("JOBKIT_REDIS_ADDR"), "redis-server address for the redis and valkey stores (default: start one)")
		etcdEPs    = flag.String("etcd", os.Getenv("JOBKIT_ETCD_ENDPOINTS"), "etcd endpoints, comma-separated (default: start one)")
		jobs       = flag.Int("jobs", 100_000, "jobs per throughput run")
		workers    = flag.String("workers", "1,8,64", "worker counts of the throughput runs")
		latencyN   = flag.Int("latency-n", 2000, "jobs in the idle latency run")
		pending    = flag.Int("pending", 100_000, "pending instances in the memory run")
		depths     = flag.String("depths", "1000,100000,1000000", "queue depths of the claim-cost run")
		runs       = flag.Int("runs", 3, "runs per figure; the median is reported")
		only       = flag.String("only", "", "comma-separated subset of: throughput, latency, memory, claim")
		limit      = flag.Duration("limit", 10*time.Minute, "time limit of each run; a run that hits it is reported as cut short")
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
	}
	defer benchkit.StopServers()
	sys, err := benchkit.NewJobkit(cfg)
	if err != nil {
		benchkit.Fatalf("%v", err)
	}
	defer sys.Close()
	ctx := context.Background()

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
		r := benchkit.Repeat(*runs, func() (benchkit.Sample, error) {
			return benchkit.ScheduleAndRun(ctx, sys, *jobs/2, 8, 64, *limit)
		})
		row(fmt.Sprintf("throughput, schedule and run concurrently (%d jobs, 8 producers, 64 workers)", *jobs/2), r, "jobs/s", "jobs/s", 0)
	}
	if want("latency") {
		r := benchkit.Repeat(*runs, func() (benchkit.Sample, error) { return benchkit.Idle(ctx, sys, *latencyN, *limit) })
		row(fmt.Sprintf("idle schedule→start latency p50 (%d jobs, one at a time)", *latencyN), r, "p50 ms", "ms", 3)
		row("idle schedule→start latency p99", r, "p99 ms", "ms", 3)
	}
	if want("memory") {
		r := benchkit.Repeat(1, func() (benchkit.Sample, error) { return benchkit.MemoryPerPending(ctx, sys, *pending, *limit) })
		row(fmt.Sprintf("Go heap (after GC) per pending instance at %d", *pending), r, "heap B/job", "B", 0)
		if name := sys.ServerMemoryName(); name != "" {
			row(fmt.Sprintf("%s per pending instance at %d", name, *pending), r, "server B/job", "B", 0)
		}
	}
	if want("claim") {
		for _, d := range ds {
			r := benchkit.Repeat(1, func() (benchkit.Sample, error) { return benchkit.ClaimCost(ctx, sys, d, 2000, *runs, *limit) })
			r.Runs = *runs // passes over one filled queue
			row(fmt.Sprintf("claim+finish of 1 instance at queue depth %d", d), r, "µs", "µs", 1)
		}
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

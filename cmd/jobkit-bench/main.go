// Command jobkit-bench measures jobkit end to end on a store: throughput
// of no-op jobs with several worker counts, idle schedule-to-start latency,
// heap (or server memory) per pending instance, and claim cost as the
// queue grows. It prints a Markdown table; doc/benchmarks.md quotes it with
// the command that made it.
//
//	go run ./cmd/jobkit-bench -store memdb
//	go run ./cmd/jobkit-bench -store redis -redis-addr 127.0.0.1:6379
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.store, "store", "memdb", "store to measure: "+strings.Join(storeNames(), ", "))
	flag.StringVar(&cfg.redisAddr, "redis-addr", os.Getenv("JOBKIT_REDIS_ADDR"), "redis-server address for the redis and valkey stores (default: start one)")
	flag.StringVar(&cfg.etcdEndpoints, "etcd", os.Getenv("JOBKIT_ETCD_ENDPOINTS"), "etcd endpoints, comma-separated (default: start one)")
	flag.IntVar(&cfg.jobs, "jobs", 100_000, "jobs per throughput run")
	workers := flag.String("workers", "1,8,64", "worker counts of the throughput runs")
	flag.IntVar(&cfg.latencyN, "latency-n", 2000, "jobs in the idle latency run")
	flag.IntVar(&cfg.pending, "pending", 100_000, "pending instances in the memory run")
	depths := flag.String("depths", "1000,100000,1000000", "queue depths of the claim-cost run")
	flag.IntVar(&cfg.runs, "runs", 3, "runs per figure; the median is reported")
	only := flag.String("only", "", "comma-separated subset of: throughput, latency, memory, claim")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile to this file")
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
	var err error
	if cfg.workers, err = ints(*workers); err != nil {
		log.Fatalf("-workers: %v", err)
	}
	if cfg.depths, err = ints(*depths); err != nil {
		log.Fatalf("-depths: %v", err)
	}
	want := func(name string) bool { return *only == "" || strings.Contains(","+*only+",", ","+name+",") }

	ctx := context.Background()
	target, err := openTarget(ctx, &cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer target.close()

	fmt.Printf("# jobkit-bench: store %s, %s, GOMAXPROCS %d, %s\n\n", cfg.store, runtime.Version(), runtime.GOMAXPROCS(0), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("| figure | value | runs |\n|---|---|---|\n")
	if want("throughput") {
		for _, w := range cfg.workers {
			v := median(cfg.runs, func() float64 { return throughput(ctx, target, cfg.jobs, w) })
			fmt.Printf("| throughput, %d pre-scheduled no-op jobs, %d workers | %.0f jobs/s | %d |\n", cfg.jobs, w, v, cfg.runs)
		}
		v := median(cfg.runs, func() float64 { return scheduleAndRun(ctx, target, cfg.jobs/2, 64) })
		fmt.Printf("| throughput, schedule and run concurrently (%d jobs, 8 producers, 64 workers) | %.0f jobs/s | %d |\n", cfg.jobs/2, v, cfg.runs)
	}
	if want("latency") {
		var p50s, p99s []float64
		for range cfg.runs {
			p50, p99 := idleLatency(ctx, target, cfg.latencyN)
			p50s, p99s = append(p50s, p50), append(p99s, p99)
		}
		fmt.Printf("| idle schedule→start latency p50 (%d jobs, one at a time) | %.3f ms | %d |\n", cfg.latencyN, medianOf(p50s), cfg.runs)
		fmt.Printf("| idle schedule→start latency p99 | %.3f ms | %d |\n", medianOf(p99s), cfg.runs)
	}
	if want("memory") {
		v := median(1, func() float64 { return memoryPerPending(ctx, target, cfg.pending) })
		fmt.Printf("| %s per pending instance at %d | %.0f B | 1 |\n", target.memoryName(), cfg.pending, v)
	}
	if want("claim") {
		for _, d := range cfg.depths {
			v := median(cfg.runs, func() float64 { return claimCost(ctx, target, d) })
			fmt.Printf("| claim+finish of 1 instance at queue depth %d | %.1f µs | %d |\n", d, v, cfg.runs)
		}
	}
}

type config struct {
	store         string
	redisAddr     string
	etcdEndpoints string
	jobs          int
	workers       []int
	latencyN      int
	pending       int
	depths        []int
	runs          int
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
	return out, nil
}

// Command etcd-cost measures what etcd itself charges for writes, apart
// from jobkit: transactions of k puts (each of a new key, value of -value
// bytes, optionally each guarded by a compare, and optionally followed by
// deleting them again) from c concurrent clients, for several k. For each
// run it reads etcd's own /metrics before and after and prints, per
// transaction and per key, the etcd process's CPU, consensus proposals,
// WAL fsyncs and backend (bbolt) commits with their mean durations, and a
// least-squares fit of etcd's CPU as a·transactions + b·keys: a is what a
// transaction costs whatever it holds (request, consensus round, WAL
// entry, revision), b what each key in it adds (MVCC index, bbolt write,
// watch fan-out). It is the ceiling etcd alone reaches on the machine, to
// set beside the etcd store's counts per job (doc/benchmarks.md, "Issue
// 18: etcd, per transaction or per key").
//
// Given a command after the flags, it runs that command instead and
// prints what etcd counted while it ran, divided by -per (the jobs the
// command ran), so a jobkit workload's etcd cost per job is read the same
// way; "etcd busy" is etcd's CPU over the command's time, in cores (well
// below 1, the workload waits on something other than etcd's CPU). The
// command runs against the etcd of -etcd or, without -etcd, against a
// fresh etcd started for it (the program of $JOBKIT_ETCD_BIN, else etcd
// on PATH; with --metrics extensive and an hour's compaction retention):
// the command finds its endpoint in $JOBKIT_ETCD_ENDPOINTS, and "{etcd}"
// in its arguments is replaced by it. With -profile, etcd's CPU profile
// over the command's first -profile-seconds is written to that file (keep
// it below the command's length: the profile samples the idle time after
// too); a fresh etcd is started with --enable-pprof, one given with -etcd
// must have it. `go tool pprof -top FILE` reads it.
//
//	go -C bench run ./cmd/etcd-cost                           # starts an etcd
//	go -C bench run ./cmd/etcd-cost -etcd 127.0.0.1:2379 -batches 1,8,32,120 -clients 8
//	JOBKIT_ETCD_BIN=$(go -C tools/etcd tool -n go.etcd.io/etcd/server/v3) \
//	  etcd-cost -per 25000 -profile etcd.prof -- jobkit-bench -store etcd -etcd {etcd} -only throughput -workers 64 -jobs 10000 -runs 1
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/bench/internal/benchkit"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	var (
		eps     = flag.String("etcd", os.Getenv("JOBKIT_ETCD_ENDPOINTS"), "etcd endpoints, comma-separated (default: start one)")
		batches = flag.String("batches", "1,4,16,64,120", "keys per transaction of each run")
		clients = flag.String("clients", "8", "concurrent clients of each run (a list runs every batch size with each)")
		keys    = flag.Int("keys", 20000, "keys written per run")
		value   = flag.Int("value", 400, "bytes per value (the etcd store's dynamic record with its history is a few hundred bytes)")
		cmp     = flag.Bool("cmp", false, "guard each put by a compare that the key is absent (like the store's revision compares)")
		del     = flag.Bool("del", false, "delete every key again, in transactions of the same size (like a ready key claimed)")
		per     = flag.Int("per", 1, "with a command: divide what etcd counted by this (the jobs the command ran)")
		prof    = flag.String("profile", "", "with a command: write etcd's CPU profile over the command's first -profile-seconds to this file")
		profSec = flag.Int("profile-seconds", 30, "how long -profile samples")
	)
	flag.Parse()
	if *prof != "" && flag.NArg() == 0 {
		benchkit.Fatalf("-profile needs a command to profile etcd under")
	}
	if *profSec < 1 {
		benchkit.Fatalf("-profile-seconds %d: give at least 1", *profSec)
	}
	var endpoints []string
	if flag.NArg() > 0 && *eps == "" {
		args := []string{"--metrics", "extensive", "--auto-compaction-retention", "1h"}
		if *prof != "" {
			args = append(args, "--enable-pprof")
		}
		endpoints = []string{benchkit.StartEtcdArgs(args...)}
	} else {
		endpoints = benchkit.StartEtcd(*eps)
	}
	defer benchkit.StopServers()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		benchkit.Fatalf("etcd: %v", err)
	}
	defer cli.Close()
	metricsURL := endpoints[0]
	if !strings.Contains(metricsURL, "://") {
		metricsURL = "http://" + metricsURL
	}
	metricsURL += "/metrics"

	if flag.NArg() > 0 {
		ep := strings.Join(endpoints, ",")
		around(metricsURL, ep, *per, withEndpoint(flag.Args(), ep), *prof, *profSec)
		return
	}
	fmt.Printf("etcd at %s; %d keys per run, values of %d bytes, compares %v, deletes %v\n\n", strings.Join(endpoints, ","), *keys, *value, *cmp, *del)
	fmt.Println("| keys/txn | clients | txn/s | keys/s | CPU µs/txn | CPU µs/key | proposals/txn | fsyncs/txn | fsync mean ms | backend commits/txn | commit mean ms | load |")
	fmt.Println("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	val := strings.Repeat("v", *value)
	var fit [][3]float64 // txns, keys, cpu seconds
	run := 0
	for _, cs := range strings.Split(*clients, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(cs))
		if err != nil || c < 1 {
			benchkit.Fatalf("bad -clients %q", cs)
		}
		for _, bs := range strings.Split(*batches, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(bs))
			if err != nil || k < 1 {
				benchkit.Fatalf("bad -batches %q", bs)
			}
			run++
			prefix := fmt.Sprintf("etcd-cost/%d/", run)
			before := scrape(metricsURL)
			t0 := time.Now()
			txns := write(cli, prefix, val, k, c, *keys, *cmp, *del)
			wall := time.Since(t0)
			after := scrape(metricsURL)
			d := func(name string) float64 { return after[name] - before[name] }
			n := float64(*keys)
			if *del {
				n *= 2 // a put and a delete per key
			}
			t := float64(txns)
			cpu := d("process_cpu_seconds_total")
			fit = append(fit, [3]float64{t, n, cpu})
			fmt.Printf("| %d | %d | %.0f | %.0f | %.0f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n",
				k, c, t/wall.Seconds(), n/wall.Seconds(), cpu/t*1e6, cpu/n*1e6,
				d("etcd_server_proposals_committed_total")/t,
				d("etcd_disk_wal_fsync_duration_seconds_count")/t,
				mean(d("etcd_disk_wal_fsync_duration_seconds_sum"), d("etcd_disk_wal_fsync_duration_seconds_count")),
				d("etcd_disk_backend_commit_duration_seconds_count")/t,
				mean(d("etcd_disk_backend_commit_duration_seconds_sum"), d("etcd_disk_backend_commit_duration_seconds_count")),
				loadavg())
			if _, err := cli.Delete(context.Background(), prefix, clientv3.WithPrefix()); err != nil {
				benchkit.Fatalf("etcd: %v", err)
			}
		}
	}
	a, b := leastSquares(fit)
	fmt.Printf("\netcd CPU ≈ %.0f µs a transaction + %.1f µs a key (least squares over the runs)\n", a*1e6, b*1e6)
}

// withEndpoint returns args with "{etcd}" replaced by ep.
func withEndpoint(args []string, ep string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, "{etcd}", ep)
	}
	return out
}

// around runs args (with $JOBKIT_ETCD_ENDPOINTS set to ep) and prints
// what etcd counted meanwhile, per n jobs; with prof, it also writes
// etcd's CPU profile over the command's first profSec seconds there.
func around(url, ep string, n int, args []string, prof string, profSec int) {
	before := scrapeAll(url)
	la0 := loadavg()
	t0 := time.Now()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "JOBKIT_ETCD_ENDPOINTS="+ep)
	if err := cmd.Start(); err != nil {
		benchkit.Fatalf("command: %v", err)
	}
	profiled := make(chan error, 1)
	if prof != "" {
		go func() { profiled <- profile(strings.TrimSuffix(url, "/metrics"), prof, profSec) }()
	}
	err := cmd.Wait()
	wall := time.Since(t0)
	after := scrapeAll(url)
	if err != nil {
		log.Printf("command: %v", err)
	}
	if prof != "" {
		if perr := <-profiled; perr != nil {
			log.Printf("etcd profile: %v", perr)
		} else {
			fmt.Printf("\netcd's CPU profile over the command's first %d s: %s\n", profSec, prof)
		}
	}
	d := func(name string) float64 { return after[name] - before[name] }
	kv := func(method string) float64 {
		k := `grpc_server_handled_total{grpc_code="OK",grpc_method="` + method + `",grpc_service="etcdserverpb.KV",grpc_type="unary"}`
		return d(k)
	}
	f := float64(n)
	fmt.Printf("\netcd while the command ran (%.1f s, load %s → %s), per job of %d:\n\n", wall.Seconds(), la0, loadavg(), n)
	fmt.Println("| per job | value |")
	fmt.Println("|---|--:|")
	row := func(name string, v float64, unit string) { fmt.Printf("| %s | %.3g%s |\n", name, v, unit) }
	row("etcd CPU", d("process_cpu_seconds_total")/f*1e3, " ms")
	row("etcd busy (CPU over the command's time)", d("process_cpu_seconds_total")/wall.Seconds(), " cores")
	row("Txn requests", kv("Txn")/f, "")
	row("Range requests", kv("Range")/f, "")
	row("Put + DeleteRange requests", (kv("Put")+kv("DeleteRange"))/f, "")
	row("proposals committed", d("etcd_server_proposals_committed_total")/f, "")
	row("WAL fsyncs", d("etcd_disk_wal_fsync_duration_seconds_count")/f, "")
	row("backend commits", d("etcd_disk_backend_commit_duration_seconds_count")/f, "")
	// etcd_mvcc_*: 3.4 has them beside the etcd_debugging_mvcc_* names,
	// which 3.6 dropped.
	row("keys put", d("etcd_mvcc_put_total")/f, "")
	row("keys deleted", d("etcd_mvcc_delete_total")/f, "")
	row("ranges (compares and reads)", d("etcd_mvcc_range_total")/f, "")
	row("watch events sent", d("etcd_debugging_mvcc_events_total")/f, "")
	row("bytes received", d("etcd_network_client_grpc_received_bytes_total")/f, " B")
	row("bytes sent", d("etcd_network_client_grpc_sent_bytes_total")/f, " B")
	txnLat := `{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"}`
	row("Txn latency inside etcd, mean (needs --metrics extensive)", mean(d("grpc_server_handling_seconds_sum"+txnLat), d("grpc_server_handling_seconds_count"+txnLat)), " ms")
	row("WAL fsync mean", mean(d("etcd_disk_wal_fsync_duration_seconds_sum"), d("etcd_disk_wal_fsync_duration_seconds_count")), " ms")
	row("backend commit mean", mean(d("etcd_disk_backend_commit_duration_seconds_sum"), d("etcd_disk_backend_commit_duration_seconds_count")), " ms")
	if err != nil {
		benchkit.Exit(1)
	}
}

// write puts n keys under prefix in transactions of k from c clients and
// returns how many transactions it sent (deletes included).
func write(cli *clientv3.Client, prefix, val string, k, c, n int, cmp, del bool) int64 {
	var next, txns atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for range c {
		wg.Go(func() {
			for {
				from := int(next.Add(int64(k))) - k
				if from >= n {
					return
				}
				to := min(from+k, n)
				var cmps []clientv3.Cmp
				var puts, dels []clientv3.Op
				for i := from; i < to; i++ {
					key := fmt.Sprintf("%sr/default/0/%020d%08d", prefix, i, i)
					if cmp {
						cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", 0))
					}
					puts = append(puts, clientv3.OpPut(key, val))
					dels = append(dels, clientv3.OpDelete(key))
				}
				resp, err := cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
				if err != nil {
					log.Fatalf("etcd: %v", err)
				}
				if !resp.Succeeded {
					log.Fatalf("etcd: a compare failed on new keys")
				}
				txns.Add(1)
				if del {
					if _, err := cli.Txn(ctx).Then(dels...).Commit(); err != nil {
						log.Fatalf("etcd: %v", err)
					}
					txns.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return txns.Load()
}

// profile writes the CPU profile of the etcd at base over the next sec
// seconds to file (etcd serves it under /debug/pprof with --enable-pprof).
func profile(base, file string, sec int) error {
	c := &http.Client{Timeout: time.Duration(sec+30) * time.Second}
	resp, err := c.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, sec))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s: start etcd with --enable-pprof (or leave out -etcd: etcd-cost then starts one with it)", base, resp.Status)
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// scrape reads the samples without labels of etcd's /metrics.
func scrape(url string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range scrapeAll(url) {
		if !strings.Contains(k, "{") {
			out[k] = v
		}
	}
	return out
}

// scrapeAll reads every sample of etcd's /metrics, by name with labels.
func scrapeAll(url string) map[string]float64 {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		benchkit.Fatalf("etcd metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err == nil {
			out[f[0]] = v
		}
	}
	return out
}

func mean(sum, count float64) float64 {
	if count == 0 {
		return 0
	}
	return sum / count * 1000
}

// loadavg is the 1-minute load average.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// leastSquares fits cpu = a·txns + b·keys (no constant).
func leastSquares(rows [][3]float64) (a, b float64) {
	var stt, skk, stk, stc, skc float64
	for _, r := range rows {
		t, k, c := r[0], r[1], r[2]
		stt += t * t
		skk += k * k
		stk += t * k
		stc += t * c
		skc += k * c
	}
	det := stt*skk - stk*stk
	if det == 0 {
		return 0, 0
	}
	return (stc*skk - skc*stk) / det, (skc*stt - stc*stk) / det
}

package etcdstore_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
)

// etcdCounters reads the counters of the test etcd's /metrics that say
// where an operation's cost goes: requests to the KV service (each a round
// trip; a write is one consensus round), keys put and deleted and ranges
// read (compares included) by the MVCC store, and bytes received over gRPC.
func etcdCounters(tb testing.TB) map[string]float64 {
	tb.Helper()
	ep := testserver.Etcd(tb)[0]
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(ep + "/metrics")
	if err != nil {
		tb.Fatalf("etcd metrics: %v", err)
	}
	defer resp.Body.Close()
	want := map[string]string{
		"etcd_mvcc_put_total":                           "puts",
		"etcd_mvcc_delete_total":                        "deletes",
		"etcd_mvcc_range_total":                         "ranges",
		"etcd_network_client_grpc_received_bytes_total": "bytes-in",
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		// Requests served by the KV service: Range, Txn, Put, DeleteRange.
		if strings.HasPrefix(f[0], "grpc_server_handled_total{") && strings.Contains(f[0], `grpc_service="etcdserverpb.KV"`) {
			v, _ := strconv.ParseFloat(f[1], 64)
			out["requests"] += v
			continue
		}
		if name, ok := want[f[0]]; ok {
			v, _ := strconv.ParseFloat(f[1], 64)
			out[name] = v
		}
	}
	return out
}

// reportPer reports the etcd counters' growth since before, per n jobs.
func reportPer(b *testing.B, before map[string]float64, n int) {
	after := etcdCounters(b)
	for _, k := range []string{"requests", "puts", "deletes", "ranges", "bytes-in"} {
		b.ReportMetric((after[k]-before[k])/float64(n), "etcd-"+k+"/job")
	}
}

func scheduleManager(b *testing.B) *job.Manager {
	ns := namespace(b)
	cleanup(b, ns)
	m, err := job.NewManager(job.WithStore(open(b, ns)))
	if err != nil {
		b.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("email.send"), job.WithExecutor(func(to string, n int) {}))
	if err != nil {
		b.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkScheduleJob measures Manager.ScheduleJob on the etcd store (no
// workers running): one caller at a time (p50/p99 latency of a call) and 8
// concurrent callers (calls per second), with etcd's own counters per job.
func BenchmarkScheduleJob(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", callers), func(b *testing.B) {
			m := scheduleManager(b)
			ctx := context.Background()
			lat := make([][]time.Duration, callers)
			before := etcdCounters(b)
			var wg sync.WaitGroup
			b.ResetTimer()
			for c := range callers {
				wg.Go(func() {
					for i := c; i < b.N; i += callers {
						t0 := time.Now()
						if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", i)); err != nil {
							b.Error(err)
							return
						}
						lat[c] = append(lat[c], time.Since(t0))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) > 0 {
				b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
			reportPer(b, before, b.N)
		})
	}
}

package valkeystore_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
)

// BenchmarkScheduleJob8 calls Manager.ScheduleJob from 8 goroutines, as
// the bench program's 8-goroutine figure does; the twin of redisstore's
// for the valkey-go client (issue 19). jobs/call is how many calls group
// commit put into one store call, cpu-µs/job this process's CPU time per
// job (GC included) and server-cpu-µs/job the server's.
//
//	go test -run '^$' -bench ScheduleJob8 -benchtime 20000x ./store/valkeystore/
func BenchmarkScheduleJob8(b *testing.B) {
	c := newClient(b, testserver.Redis(b))
	m, ctx := emailManager(b, c, "bench_sched8")
	calls0, cpu0 := serverStats(b, c)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	self0 := processCPU(b)
	b.SetParallelism(4) // 8 goroutines on 2 CPUs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", 42)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	self1 := processCPU(b)
	runtime.ReadMemStats(&ms1)
	calls1, cpu1 := serverStats(b, c)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(b.N)/float64(calls1-calls0), "jobs/call")
	b.ReportMetric(float64((self1-self0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/job")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N), "allocs/job")
	b.ReportMetric((cpu1-cpu0)/float64(b.N), "server-cpu-µs/job")
}

// serverStats returns the server's FCALL calls so far (INFO
// commandstats) and its CPU time in µs (INFO cpu: user + sys).
func serverStats(b *testing.B, c valkey.Client) (calls int64, cpuMicros float64) {
	b.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_fcall:"); ok {
			for _, f := range strings.Split(v, ",") {
				if n, ok := strings.CutPrefix(f, "calls="); ok {
					calls, _ = strconv.ParseInt(n, 10, 64)
				}
			}
		}
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				cpuMicros += f * 1e6
			}
		}
	}
	return calls, cpuMicros
}

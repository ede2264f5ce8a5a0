package valkeystore_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
)

// BenchmarkScheduleTail times lone Manager.ScheduleJob calls one after the
// other, as the bench program's 1-goroutine figure does (a ctx with a
// deadline), and reports the latency percentiles and GC cycles per 1,000
// calls; the twin of redisstore's, for the valkey-go client (issue 19).
//
//	go test -run '^$' -bench ScheduleTail -benchtime 100000x ./store/valkeystore/
func BenchmarkScheduleTail(b *testing.B) {
	m, ctx := emailManager(b, newClient(b, testserver.Redis(b)), "bench_tail")
	lat := make([]time.Duration, 0, b.N)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU(b)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", 42)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "go-cpu-µs/call")
	runtime.ReadMemStats(&ms1)
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	b.ReportMetric(float64(pct(0.50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(pct(0.99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(pct(0.999).Microseconds()), "p99.9-µs")
	b.ReportMetric(float64(ms1.NumGC-ms0.NumGC)/float64(b.N)*1000, "gc/1000calls")
	// The GC runs each time the heap grows by about its live size
	// (GOGC=100, at least 4 MB): a client that keeps more memory live
	// collects less often for the same bytes per call.
	b.ReportMetric(float64(ms1.NextGC)/1e6, "heap-goal-MB")
}

// processCPU is the CPU time (user + system) this process has used: the
// Go side's cost of a call, GC included, which waiting for the server
// and other processes' load do not add to.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// emailManager returns a manager on a store of its own namespace (named
// from prefix) on c, with kind "email.send" registered and 20 jobs of it
// already scheduled (connections and script caches warm), and a context
// with an hour's deadline, as the bench program's calls carry one.
func emailManager(b *testing.B, c valkey.Client, prefix string) (*job.Manager, context.Context) {
	ns := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	m, err := job.NewManager(job.WithStore(newStore(b, c, ns)))
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	b.Cleanup(cancel)
	for range 20 {
		if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", 42)); err != nil {
			b.Fatal(err)
		}
	}
	return m, ctx
}

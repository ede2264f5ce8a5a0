package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/trace"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
)

// phaseHook timestamps the client's part of a call: when go-redis is
// handed the command (after jobkit's Go work) and when it returns it.
type phaseHook struct {
	in, out time.Time
	dials   int
}

func (h *phaseHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials++
		return next(ctx, network, addr)
	}
}

func (h *phaseHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.in = time.Now()
		err := next(ctx, cmd)
		h.out = time.Now()
		return err
	}
}

func (h *phaseHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// gcCycles reads the number of finished GC cycles.
func gcCycles(s []metrics.Sample) uint64 {
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkScheduleTail times lone Manager.ScheduleJob calls one after the
// other, as the bench program's 1-goroutine figure does (a client with
// ContextTimeoutEnabled and PoolSize 64, a ctx with a deadline), and
// reports the latency percentiles and, for the slowest 1%, where their
// time went: before the client had the command (jobkit's Go work), in the
// client (pool, write, Redis, read), after it; and how many of them saw a
// GC cycle finish or a connection dialled (issue 19, the go-redis tail).
//
//	go test -run '^$' -bench ScheduleTail -benchtime 100000x ./store/redisstore/
//
// JOBKIT_TAIL_PLAIN=1 uses a client without ContextTimeoutEnabled and
// the default pool size.
func BenchmarkScheduleTail(b *testing.B) {
	benchClient(b) // starts the server
	opt := &redis.Options{Addr: benchServer.addr, PoolSize: 64, ContextTimeoutEnabled: true}
	if os.Getenv("JOBKIT_TAIL_PLAIN") != "" {
		opt = &redis.Options{Addr: benchServer.addr}
	}
	c := redis.NewClient(opt)
	b.Cleanup(func() { c.Close() })
	h := &phaseHook{}
	c.AddHook(h)
	ns := fmt.Sprintf("bench_tail_%d", time.Now().UnixNano())
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
	defer cancel()
	for range 20 {
		if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", 42)); err != nil {
			b.Fatal(err)
		}
	}
	type call struct {
		total, before, client, after time.Duration
		gc, dial                     bool
	}
	calls := make([]call, 0, b.N)
	gs := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	if path := os.Getenv("JOBKIT_TAIL_TRACE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			b.Fatal(err)
		}
		defer trace.Stop()
	}
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := range b.N {
		g0, d0 := gcCycles(gs), h.dials
		t0 := time.Now()
		trace.Log(ctx, "call", strconv.Itoa(i))
		if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", 42)); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		trace.Log(ctx, "done", strconv.Itoa(i))
		calls = append(calls, call{total: t1.Sub(t0), before: h.in.Sub(t0), client: h.out.Sub(h.in), after: t1.Sub(h.out),
			gc: gcCycles(gs) != g0, dial: h.dials != d0})
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "go-cpu-µs/call")
	runtime.ReadMemStats(&ms1)
	slices.SortFunc(calls, func(a, b call) int { return int(a.total - b.total) })
	pct := func(p float64) time.Duration { return calls[int(p*float64(len(calls)-1))].total }
	b.ReportMetric(float64(pct(0.50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(pct(0.99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(pct(0.999).Microseconds()), "p99.9-µs")
	b.ReportMetric(float64(ms1.NumGC-ms0.NumGC)/float64(b.N)*1000, "gc/1000calls")
	// The GC runs each time the heap grows by about its live size
	// (GOGC=100, at least 4 MB): a client that keeps more memory live
	// collects less often for the same bytes per call.
	b.ReportMetric(float64(ms1.NextGC)/1e6, "heap-goal-MB")
	slow := calls[len(calls)*99/100:]
	var before, client, after time.Duration
	var gc, dial int
	for _, c := range slow {
		before += c.before
		client += c.client
		after += c.after
		if c.gc {
			gc++
		}
		if c.dial {
			dial++
		}
	}
	n := time.Duration(len(slow))
	b.Logf("slowest 1%% (%d calls, from %v): mean before client %v, in client %v, after %v; %d saw a GC cycle end, %d a dial",
		len(slow), slow[0].total, before/n, client/n, after/n, gc, dial)
	all := 0
	for _, c := range calls {
		if c.gc {
			all++
		}
	}
	b.Logf("all calls: %d saw a GC cycle end", all)
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

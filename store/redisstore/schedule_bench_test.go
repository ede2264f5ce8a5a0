package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// serverCPU returns the CPU time the redis-server process has used
// (INFO cpu: used_cpu_user + used_cpu_sys), in µs. Unlike commandstats'
// usec, which is wall time, it does not grow while other processes on a
// busy machine hold the CPU.
func serverCPU(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				sum += f
			}
		}
	}
	return sum * 1e6
}

// BenchmarkScheduleBreakdown takes one ScheduleJob on Redis apart, one
// call at a time from one goroutine (issue 19): a PING (the client's
// round trip), a script that does nothing, a function that does nothing,
// the shared lib.lua prelude
// alone (whole, as most scripts have it, and the part the enqueue script
// has), one store.Enqueue of one instance, and Manager.ScheduleJob.
// server-µs/call is Redis's own time (INFO commandstats).
//
//	go test -run '^$' -bench ScheduleBreakdown -benchtime 20000x ./store/redisstore/
func BenchmarkScheduleBreakdown(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	ns := fmt.Sprintf("bench_brk_%d", time.Now().UnixNano())
	keys, err := redisscript.NewKeys(ns)
	if err != nil {
		b.Fatal(err)
	}
	lean, _, ok := strings.Cut(redisscript.Enqueue.Source, "\n-- ---- enqueue.lua ----")
	if !ok {
		b.Fatal("no enqueue.lua marker in the enqueue script")
	}
	full, _, ok := strings.Cut(redisscript.Claim.Source, "\n-- ---- claim.lua ----")
	if !ok {
		b.Fatal("no claim.lua marker in the claim script")
	}
	b.Run("ping", func(b *testing.B) {
		for range b.N {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct{ name, src string }{
		{"script_bare", "return 1"},
		{"script_lib_full", full + "\nreturn 1"},
		{"script_lib_enqueue", lean + "\nreturn 1"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sc := redis.NewScript(tc.src)
			args := []any{keys.Prefix, "1", "n"}
			if err := sc.Run(ctx, c, keys.Script, args...).Err(); err != nil {
				b.Fatal(err)
			}
			u0, n0 := serverMicros(b, c)
			cpu0 := serverCPU(b, c)
			for range b.N {
				if err := sc.Run(ctx, c, keys.Script, args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			u1, n1 := serverMicros(b, c)
			b.ReportMetric(float64(u1-u0)/float64(n1-n0), "server-µs/call")
			b.ReportMetric((serverCPU(b, c)-cpu0)/float64(b.N), "server-cpu-µs/call")
		})
	}
	// A function that does nothing, called with the same keys: what a
	// call of redisscript.Library costs before its own work.
	b.Run("function_bare", func(b *testing.B) {
		lib := "#!lua name=jobkit_bench_noop\nredis.register_function('jobkit_bench_noop', function(keys, args) return 1 end)"
		if err := c.FunctionLoadReplace(ctx, lib).Err(); err != nil {
			b.Fatal(err)
		}
		args := []any{keys.Prefix, "1", "n"}
		u0, n0 := serverMicros(b, c)
		cpu0 := serverCPU(b, c)
		for range b.N {
			if err := c.FCall(ctx, "jobkit_bench_noop", keys.Script, args...).Err(); err != nil {
				b.Fatal(err)
			}
		}
		u1, n1 := serverMicros(b, c)
		b.ReportMetric(float64(u1-u0)/float64(n1-n0), "server-µs/call")
		b.ReportMetric((serverCPU(b, c)-cpu0)/float64(b.N), "server-cpu-µs/call")
	})
	s := newStore(b, c, ns)
	b.Run("store_enqueue_1", func(b *testing.B) {
		u0, n0 := serverMicros(b, c)
		cpu0 := serverCPU(b, c)
		for range b.N {
			now := time.Now()
			in := &store.Instance{ID: uuid.Must(uuid.NewV7()).String(), Kind: "email.send", Queue: "default",
				Args: []byte(`["user@example.com",42]`), RunAt: now, CreatedAt: now, MaxRetries: 3}
			if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Node: "n", Now: now}); err != nil {
				b.Fatal(err)
			}
		}
		u1, n1 := serverMicros(b, c)
		b.ReportMetric(float64(u1-u0)/float64(n1-n0), "server-µs/call")
		b.ReportMetric((serverCPU(b, c)-cpu0)/float64(b.N), "server-cpu-µs/call")
	})
	m, err := job.NewManager(job.WithStore(s))
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
	b.Run("schedulejob_1", func(b *testing.B) {
		u0, n0 := serverMicros(b, c)
		cpu0 := serverCPU(b, c)
		for range b.N {
			if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", 42)); err != nil {
				b.Fatal(err)
			}
		}
		u1, n1 := serverMicros(b, c)
		b.ReportMetric(float64(u1-u0)/float64(n1-n0), "server-µs/call")
		b.ReportMetric((serverCPU(b, c)-cpu0)/float64(b.N), "server-cpu-µs/call")
	})
}

// BenchmarkScheduleJob8 calls Manager.ScheduleJob from 8 goroutines, as
// the bench program's 8-goroutine figure does (its client: PoolSize 64,
// ContextTimeoutEnabled); jobs/call is how many calls group commit put
// into one store.Enqueue on average, cpu-µs/job this process's CPU time
// per job (getrusage, GC included) and server-cpu-µs/job redis-server's:
// the two sides' costs, which other processes' load does not change.
//
//	go test -run '^$' -bench ScheduleJob8 -benchtime 20000x ./store/redisstore/
func BenchmarkScheduleJob8(b *testing.B) {
	c := benchClient(b)
	bc := redis.NewClient(&redis.Options{Addr: c.Options().Addr, PoolSize: 64, ContextTimeoutEnabled: true})
	b.Cleanup(func() { bc.Close() })
	ns := fmt.Sprintf("bench_sched8_%d", time.Now().UnixNano())
	m, err := job.NewManager(job.WithStore(newStore(b, bc, ns)))
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // a ctx that can end, as a service's would
	defer cancel()
	for range 20 { // warm: connections, the library loaded
		if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", 42)); err != nil {
			b.Fatal(err)
		}
	}
	u0, n0 := serverMicros(b, c)
	cpu0 := serverCPU(b, c)
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
	u1, n1 := serverMicros(b, c)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(b.N)/float64(n1-n0), "jobs/call")
	b.ReportMetric(float64((self1-self0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/job")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N), "allocs/job")
	b.ReportMetric(float64(u1-u0)/float64(n1-n0), "server-µs/call")
	b.ReportMetric((serverCPU(b, c)-cpu0)/float64(b.N), "server-cpu-µs/job")
}

// BenchmarkScheduleJobs1000 schedules batches of 1,000 with
// Manager.ScheduleJobs, one call at a time (per-op time is per batch).
// cpu-µs/job is this process's CPU time (getrusage: the manager, the
// arguments' encoding and go-redis, GC included) per job, and allocs/job
// its allocations: the Go side's cost, which other processes' load does
// not change.
//
//	go test -run '^$' -bench ScheduleJobs1000 -benchtime 50x ./store/redisstore/
func BenchmarkScheduleJobs1000(b *testing.B) {
	c := benchClient(b)
	ns := fmt.Sprintf("bench_batch_%d", time.Now().UnixNano())
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
	ctx := context.Background()
	items := make([]job.BatchItem, 1000)
	for i := range items {
		items[i] = job.BatchItem{Kind: "email.send", Options: []job.ScheduleOption{job.WithArguments("user@example.com", i)}}
	}
	mem0 := usedMemory(b, c)
	u0, n0 := serverMicros(b, c)
	cpu0 := serverCPU(b, c)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	self0 := processCPU(b)
	b.ResetTimer()
	for range b.N {
		res, err := m.ScheduleJobs(ctx, items...)
		if err != nil {
			b.Fatal(err)
		}
		if res[0].Err != nil {
			b.Fatal(res[0].Err)
		}
	}
	b.StopTimer()
	self1 := processCPU(b)
	runtime.ReadMemStats(&ms1)
	u1, n1 := serverMicros(b, c)
	jobs := float64(b.N * len(items))
	b.ReportMetric(float64((self1-self0).Microseconds())/jobs, "cpu-µs/job")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/jobs, "allocs/job")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/jobs, "B/job")
	b.ReportMetric(float64(b.N*len(items))/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(u1-u0)/float64(n1-n0), "server-µs/call")
	b.ReportMetric((serverCPU(b, c)-cpu0)/float64(b.N*len(items)), "server-cpu-µs/job")
	b.ReportMetric(float64(usedMemory(b, c)-mem0)/float64(b.N*len(items)), "B/pending-job")
}

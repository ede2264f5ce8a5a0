package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
	"github.com/jobkit/job/store/redisstore"
)

// Benchmarks run on a redis-server of their own, so used_memory counts
// only what they store.
//
//	go test -run '^$' -bench . -benchtime 2000x ./store/redisstore/

var benchServer struct {
	once sync.Once
	addr string
}

func benchClient(b *testing.B) *redis.Client {
	b.Helper()
	benchServer.once.Do(func() {
		// A server of the caller's (one run under valgrind, say); else
		// one of the benchmarks' own.
		if addr := os.Getenv("JOBKIT_BENCH_REDIS_ADDR"); addr != "" {
			benchServer.addr = addr
			return
		}
		benchServer.addr = testserver.StartRedis(b).Addr
	})
	c := redis.NewClient(&redis.Options{Addr: benchServer.addr, PoolSize: 32})
	b.Cleanup(func() { c.Close() })
	return c
}

var benchBase = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// uuidish returns a 36-character ID like the engine's UUIDs.
func uuidish(ns string, i int) string {
	s := fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", i, len(ns), i%4096, i%4096, i)
	return s[:36]
}

func benchInst(ns string, i int) *store.Instance {
	return &store.Instance{
		ID: uuidish(ns, i), Kind: "email.send", Queue: "default",
		Args: []byte(`["user@example.com",42]`), RunAt: benchBase, CreatedAt: benchBase,
		MaxRetries: 3, Timeout: 30 * time.Second,
	}
}

// fill enqueues n instances in batches of 1000, 8 batches in flight.
func fill(b *testing.B, s *redisstore.Store, ns string, n int) {
	b.Helper()
	const batch = 1000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make(chan error, 1)
	for start := 0; start < n; start += batch {
		ins := make([]*store.Instance, 0, batch)
		for i := start; i < min(start+batch, n); i++ {
			ins = append(ins, benchInst(ns, i))
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := s.Enqueue(context.Background(), &store.EnqueueParams{Instances: ins, Node: "bench-node-1", Now: benchBase}); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// serverMicros returns Redis's total microseconds spent in EVALSHA and
// EVAL (INFO commandstats), to tell server cost from client and network.
func serverMicros(b *testing.B, c *redis.Client) (usec, calls int64) {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_fcall:", "cmdstat_fcall_ro:"} {
			if v, ok := strings.CutPrefix(line, cmd); ok {
				for _, f := range strings.Split(v, ",") {
					k, val, _ := strings.Cut(f, "=")
					n, _ := strconv.ParseInt(val, 10, 64)
					switch k {
					case "calls":
						calls += n
					case "usec":
						usec += n
					}
				}
			}
		}
	}
	return usec, calls
}

func usedMemory(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}

// BenchmarkMemoryPerPendingJob reports Redis used_memory per pending job
// with 100k jobs queued: the packed record, its ready-list entry, its
// kind-bucket entry and its share of the history stream entry of the
// Enqueue that stored it. batch1000 stores them 1,000 per Enqueue (what
// a cron fan-out or a bulk insert does); single stores each with its own
// Enqueue, 32 in flight, so each carries a stream entry of its own (what
// lone ScheduleJob calls do).
func BenchmarkMemoryPerPendingJob(b *testing.B) {
	for _, per := range []int{1000, 1} {
		name := "batch1000"
		if per == 1 {
			name = "single"
		}
		b.Run(name, func(b *testing.B) {
			c := benchClient(b)
			const n = 100_000
			// One fill whatever b.N is: the metric is per job, not per op.
			ns := fmt.Sprintf("bench_mem_%d", time.Now().UnixNano())
			s := newStore(b, c, ns)
			before := usedMemory(b, c)
			if per == 1 {
				fillSingles(b, s, ns, n)
			} else {
				fill(b, s, ns, n)
			}
			after := usedMemory(b, c)
			b.ReportMetric(float64(after-before)/n, "B/pending-job")
		})
	}
}

// fillSingles enqueues n instances one per call, 32 calls in flight, with
// a node name as long as a Manager's default (host-pid-random): each
// call's history entry carries it.
func fillSingles(b *testing.B, s *redisstore.Store, ns string, n int) {
	b.Helper()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if _, err := s.Enqueue(context.Background(), &store.EnqueueParams{Instances: []*store.Instance{benchInst(ns, i)}, Node: "worker-7f3c-12345-9a8b7c6d", Now: benchBase}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// benchClaim measures one Claim of 10 at a queue depth of depth; the
// claimed attempts are handed back (untimed) so the depth stays put.
func benchClaim(b *testing.B, depth int) {
	c := benchClient(b)
	ns := fmt.Sprintf("bench_claim_%d_%d", depth, time.Now().UnixNano())
	s := newStore(b, c, ns)
	fill(b, s, ns, depth)
	ctx := context.Background()
	now := benchBase
	var serverUsec int64
	b.ResetTimer()
	for range b.N {
		now = now.Add(time.Millisecond)
		u0, _ := serverMicros(b, c)
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "default", Owner: "w", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || len(res.Instances) != 10 {
			b.Fatalf("claim: %v, %d", err, len(res.Instances))
		}
		b.StopTimer()
		u1, _ := serverMicros(b, c)
		serverUsec += u1 - u0
		outs := make([]store.Outcome, len(res.Instances))
		for i, in := range res.Instances {
			outs[i] = store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: in.RunAt, Release: true}
		}
		if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: now, Outcomes: outs}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(serverUsec)/float64(b.N), "server-µs/claim")
}

func BenchmarkClaimDepth1k(b *testing.B) { benchClaim(b, 1_000) }
func BenchmarkClaimDepth1M(b *testing.B) { benchClaim(b, 1_000_000) }

// BenchmarkEnqueueBatch100 enqueues batches of 100 (per-op time is per
// batch; jobs/s is reported).
func BenchmarkEnqueueBatch100(b *testing.B) {
	c := benchClient(b)
	ns := fmt.Sprintf("bench_enq_%d", time.Now().UnixNano())
	s := newStore(b, c, ns)
	ctx := context.Background()
	u0, c0 := serverMicros(b, c)
	b.ResetTimer()
	for i := range b.N {
		ins := make([]*store.Instance, 100)
		for j := range ins {
			ins[j] = benchInst(ns, i*100+j)
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Node: "n", Now: benchBase}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "jobs/s")
	u1, c1 := serverMicros(b, c)
	b.ReportMetric(float64(u1-u0)/float64(c1-c0), "server-µs/batch")
}

// BenchmarkClaimFinishCycle claims 100 and completes them, one round trip
// each, from a deep queue (per-op time is per 100 jobs; jobs/s reported).
func BenchmarkClaimFinishCycle(b *testing.B) {
	c := benchClient(b)
	ns := fmt.Sprintf("bench_cycle_%d", time.Now().UnixNano())
	s := newStore(b, c, ns)
	fill(b, s, ns, b.N*100)
	ctx := context.Background()
	u0, _ := serverMicros(b, c)
	b.ResetTimer()
	for range b.N {
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "default", Owner: "w", Limit: 100, Now: benchBase, LeaseUntil: benchBase.Add(time.Minute)})
		if err != nil || len(res.Instances) != 100 {
			b.Fatalf("claim: %v, %d", err, len(res.Instances))
		}
		outs := make([]store.Outcome, len(res.Instances))
		for i, in := range res.Instances {
			outs[i] = store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed, Result: []byte(`[true]`)}
		}
		if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: benchBase, Outcomes: outs}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "jobs/s")
	u1, _ := serverMicros(b, c)
	b.ReportMetric(float64(u1-u0)/float64(b.N), "server-µs/cycle")
}

// BenchmarkScheduleJobParallel calls Manager.ScheduleJob from 64
// goroutines at once (SetParallelism(32) on 2 CPUs), as a busy service
// would; concurrent calls share store round trips (and history entries:
// B/pending-job is Redis used_memory per stored job).
func BenchmarkScheduleJobParallel(b *testing.B) {
	c := benchClient(b)
	ns := fmt.Sprintf("bench_sched_%d", time.Now().UnixNano())
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
	mem0 := usedMemory(b, c)
	u0, _ := serverMicros(b, c)
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", 42)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	u1, _ := serverMicros(b, c)
	b.ReportMetric(float64(u1-u0)/float64(b.N), "server-µs/job")
	b.ReportMetric(float64(usedMemory(b, c)-mem0)/float64(b.N), "B/pending-job")
}

// BenchmarkLookupByState looks up instances by state in a namespace that
// holds 100k completed instances (created 1 ms apart) besides 20 of each
// other state: the cost of a lookup should follow what it asks for, not
// what the namespace holds. server-µs/op is Redis's own time for all the
// commands of one lookup (INFO commandstats).
func BenchmarkLookupByState(b *testing.B) {
	c := benchClient(b)
	ns := fmt.Sprintf("bench_lookup_%d", time.Now().UnixNano())
	s := newStore(b, c, ns)
	ctx := context.Background()
	const done = 100_000
	mk := func(i int, kind string, runAt time.Time) *store.Instance {
		in := benchInst(ns, i)
		in.Kind = kind
		in.CreatedAt = benchBase.Add(time.Duration(i) * time.Millisecond)
		in.RunAt = runAt
		return in
	}
	now := benchBase.Add(time.Hour)
	enqueue := func(ins []*store.Instance) {
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Node: "n", Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	// run claims every ready instance and gives each the outcome out says.
	run := func(out func(in *store.Instance) store.Outcome) {
		for {
			res, err := s.Claim(ctx, &store.ClaimParams{Queue: "default", Owner: "w", Limit: 1000, Now: now, LeaseUntil: now.Add(time.Hour)})
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Instances) == 0 {
				return
			}
			outs := make([]store.Outcome, len(res.Instances))
			for i, in := range res.Instances {
				outs[i] = out(in)
			}
			if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: now, Outcomes: outs}); err != nil {
				b.Fatal(err)
			}
		}
	}
	for start := 0; start < done; start += 1000 {
		ins := make([]*store.Instance, 1000)
		for i := range ins {
			ins[i] = mk(start+i, "email.send", now)
		}
		enqueue(ins)
	}
	run(func(in *store.Instance) store.Outcome {
		return store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed, Result: []byte(`[true]`)}
	})
	var failed, running, waiting []*store.Instance
	for i := range 20 {
		failed = append(failed, mk(done+i, "report", now))
		running = append(running, mk(done+100+i, "email.send", now))
		waiting = append(waiting, mk(done+200+i, "email.send", now.Add(time.Hour)))
	}
	enqueue(failed)
	run(func(in *store.Instance) store.Outcome {
		return store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Terminated, Error: "boom"}
	})
	enqueue(running)
	if res, err := s.Claim(ctx, &store.ClaimParams{Queue: "default", Owner: "w", Limit: 1000, Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil || len(res.Instances) != 20 {
		b.Fatalf("claim the running ones: %v", err)
	}
	enqueue(waiting)
	cases := []struct {
		name string
		q    store.Query
		want int
	}{
		{"processing", store.Query{States: []store.State{store.Processing}}, 20},
		{"scheduled", store.Query{States: []store.State{store.Scheduled}}, 20},
		{"terminated", store.Query{States: []store.State{store.Terminated}}, 20},
		{"kind_terminated_limit10", store.Query{Kind: "report", States: []store.State{store.Terminated}, Limit: 10}, 10},
		{"completed_limit10", store.Query{States: []store.State{store.Completed}, Limit: 10}, 10},
		{"kind_limit10", store.Query{Kind: "email.send", Limit: 10}, 10},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			u0 := serverMicrosAll(b, c)
			b.ResetTimer()
			for range b.N {
				got, err := s.LookupInstances(ctx, &tc.q)
				if err != nil || len(got) != tc.want {
					b.Fatalf("LookupInstances %+v: %d instances, %v; want %d", tc.q, len(got), err, tc.want)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(serverMicrosAll(b, c)-u0)/float64(b.N), "server-µs/op")
		})
	}
}

// serverMicrosAll returns Redis's total microseconds spent in commands
// (INFO commandstats, every command).
func serverMicrosAll(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec int64
	for _, line := range strings.Split(info, "\r\n") {
		if _, v, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(line, "cmdstat_") {
			for _, f := range strings.Split(v, ",") {
				if val, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseInt(val, 10, 64)
					usec += n
				}
			}
		}
	}
	return usec
}

// BenchmarkClaimFinishSplit claims 16 and completes them, as a manager
// with 64 workers does (it claims a quarter of its pool at a time), and
// reports Redis's time per job for each script apart.
func BenchmarkClaimFinishSplit(b *testing.B) {
	c := benchClient(b)
	ns := fmt.Sprintf("bench_split_%d", time.Now().UnixNano())
	s := newStore(b, c, ns)
	const batch = 16
	fill(b, s, ns, b.N*batch)
	ctx := context.Background()
	var claimUsec, finishUsec int64
	b.ResetTimer()
	for range b.N {
		u0, _ := serverMicros(b, c)
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "default", Owner: "w", Limit: batch, Now: benchBase, LeaseUntil: benchBase.Add(time.Minute)})
		if err != nil || len(res.Instances) != batch {
			b.Fatalf("claim: %v, %d", err, len(res.Instances))
		}
		u1, _ := serverMicros(b, c)
		outs := make([]store.Outcome, len(res.Instances))
		for i, in := range res.Instances {
			outs[i] = store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed, Result: []byte(`[]`)}
		}
		if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: benchBase, Outcomes: outs}); err != nil {
			b.Fatal(err)
		}
		u2, _ := serverMicros(b, c)
		claimUsec += u1 - u0
		finishUsec += u2 - u1
	}
	b.ReportMetric(float64(claimUsec)/float64(b.N*batch), "claim-server-µs/job")
	b.ReportMetric(float64(finishUsec)/float64(b.N*batch), "finish-server-µs/job")
}

// BenchmarkScriptCallCost measures what every script call costs Redis
// before its own work: a bare script (EVALSHA itself), lib.lua's
// top-level definitions, which every script runs first, and a claim on
// an empty queue.
func BenchmarkScriptCallCost(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	keys, err := redisscript.NewKeys(fmt.Sprintf("bench_call_%d", time.Now().UnixNano()))
	if err != nil {
		b.Fatal(err)
	}
	lib, _, ok := strings.Cut(redisscript.Claim.Source, "\n-- ---- claim.lua ----")
	if !ok {
		b.Fatal("no claim.lua marker in the claim script")
	}
	args := []any{keys.Prefix, "1", "w", "2", "16", "default"}
	for _, tc := range []struct{ name, src string }{
		{"bare", "return 1"},
		{"lib", lib + "\nreturn 1"},
		{"empty_claim", redisscript.Claim.Source},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sc := redis.NewScript(tc.src)
			if err := sc.Run(ctx, c, keys.Script, args...).Err(); err != nil {
				b.Fatal(err)
			}
			u0, n0 := serverMicros(b, c)
			for range b.N {
				if err := sc.Run(ctx, c, keys.Script, args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			u1, n1 := serverMicros(b, c)
			b.ReportMetric(float64(u1-u0)/float64(n1-n0), "server-µs/call")
		})
	}
}

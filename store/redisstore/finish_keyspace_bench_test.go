package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store"
)

// BenchmarkFinishKeyspace: what one Finish of 64 outcomes (and one Claim
// of 64) costs redis-server as one namespace fills with completed
// instances, and what one Prune of 1,000 of them costs then
// (doc/benchmarks-appendix.md, "Redis: finish under a large keyspace"). The sizes
// (completed instances in the namespace when measuring) come from
// JOBKIT_FINISH_SIZES, default 0,100000; the namespace is filled through
// the store API (enqueue 1,000, claim and finish 64 at a time, as
// measured), and each size measures 20,000 more jobs:
//
//	JOBKIT_BENCH_REDIS_ADDR=127.0.0.1:PORT JOBKIT_FINISH_SIZES=0,300000,1000000 \
//	  go test -run '^$' -bench FinishKeyspace -benchtime 1x ./store/redisstore/
//
// CPU is redis-server's main thread (/proc/PID/task/PID/schedstat, so
// the server must run on this machine): the time it ran, which other
// processes holding the CPU do not lengthen, unlike SLOWLOG's and
// commandstats' wall-clock figures.
func BenchmarkFinishKeyspace(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	sizes := []int{0, 100_000}
	if v := os.Getenv("JOBKIT_FINISH_SIZES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("JOBKIT_FINISH_SIZES=%q: %v", v, err)
			}
			sizes = append(sizes, n)
		}
	}
	s := newStore(b, c, fmt.Sprintf("bench_fks_%d", time.Now().UnixNano()))
	cpu := mainThreadCPU(b, c)
	const batch = 64
	filled := 0
	// cycle runs n jobs through enqueue, claim and finish; with stats it
	// records the server CPU of each finish and claim.
	cycle := func(n int, fins, claims *[]time.Duration) {
		for done := 0; done < n; done += 1000 {
			now := time.Now()
			ins := make([]*store.Instance, 1000)
			for i := range ins {
				ins[i] = &store.Instance{ID: benchID(), Kind: "noop", Queue: "default", Args: []byte(`[]`), RunAt: now, CreatedAt: now, MaxRetries: 3}
			}
			if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Node: "bench", Now: now}); err != nil {
				b.Fatal(err)
			}
			for k := 0; k < 1000; k += batch {
				now := time.Now()
				c0 := cpu()
				res, err := s.Claim(ctx, &store.ClaimParams{Queue: "default", Owner: "w", Limit: batch, Now: now, LeaseUntil: now.Add(time.Minute), Kinds: []string{"noop"}})
				if err != nil {
					b.Fatal(err)
				}
				c1 := cpu()
				outs := make([]store.Outcome, len(res.Instances))
				for i, in := range res.Instances {
					outs[i] = store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed, Result: []byte(`[1]`)}
				}
				if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: time.Now(), Outcomes: outs}); err != nil {
					b.Fatal(err)
				}
				if fins != nil {
					*fins = append(*fins, cpu()-c1)
					*claims = append(*claims, c1-c0)
				}
			}
		}
		filled += n
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("completed=%d", size), func(b *testing.B) {
			if size > filled {
				cycle(size-filled, nil, nil)
			}
			var fins, claims []time.Duration
			for range b.N {
				cycle(20_000, &fins, &claims)
			}
			slices.Sort(fins)
			mean := func(ds []time.Duration) float64 {
				var t time.Duration
				for _, d := range ds {
					t += d
				}
				return float64(t.Microseconds()) / float64(len(ds))
			}
			b.ReportMetric(mean(fins), "server-µs/finish")
			b.ReportMetric(float64(fins[len(fins)*99/100].Microseconds()), "p99-server-µs/finish")
			b.ReportMetric(float64(fins[len(fins)-1].Microseconds()), "max-server-µs/finish")
			b.ReportMetric(mean(claims), "server-µs/claim")
		})
	}
	b.Run("prune", func(b *testing.B) {
		var ps []time.Duration
		for range b.N {
			for range 10 {
				c0 := cpu()
				now := time.Now()
				if _, err := s.Prune(ctx, &store.PruneParams{Now: now, KeepFinished: 1, Limit: 1000}); err != nil {
					b.Fatal(err)
				}
				ps = append(ps, cpu()-c0)
			}
		}
		slices.Sort(ps)
		var t time.Duration
		for _, d := range ps {
			t += d
		}
		b.ReportMetric(float64(t.Microseconds())/float64(len(ps)), "server-µs/prune")
		b.ReportMetric(float64(ps[len(ps)-1].Microseconds()), "max-server-µs/prune")
	})
}

// mainThreadCPU returns a func that reads how long redis-server's main
// thread has run (schedstat), for a server on this machine.
func mainThreadCPU(b *testing.B, c *redis.Client) func() time.Duration {
	b.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	var pid string
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			pid = v
		}
	}
	path := "/proc/" + pid + "/task/" + pid + "/schedstat"
	return func() time.Duration {
		raw, err := os.ReadFile(path)
		if err != nil {
			b.Fatalf("%v (the benchmark reads redis-server's CPU time from /proc: run it on this machine)", err)
		}
		n, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return time.Duration(n)
	}
}

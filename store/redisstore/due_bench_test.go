package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store"
)

// dueJobs is how many instances one run of BenchmarkClaimDue claims.
const dueJobs = 10_000

// BenchmarkClaimDue: the Redis cost of claiming instances that waited in
// the scheduled set, by claims of 100 once all are due, on a
// redis-server of the benchmark's own (doc/benchmarks-appendix.md, "Redis: finish
// under a large keyspace"):
//
//	go test -run '^$' -bench ClaimDue -benchtime 5x -count 3 ./store/redisstore/
//
// ready: every instance due at enqueue (no move), for comparison;
// scheduled: every instance scheduled for later, none ready before;
// behind-ready: half scheduled for later, half enqueued due after those
// fell due, with later RunAts, so each move goes ahead of ready entries.
// It reports redis-server CPU and Redis commands (those scripts run
// included) per claimed job; the fill is not counted. Under callgrind
// (JOBKIT_PARTS_CALLGRIND=PID:output-file, as BenchmarkEnqueueParts) it
// reports the instructions redis-server executed per claimed job
// instead, which no load on the machine changes.
func BenchmarkClaimDue(b *testing.B) {
	c := benchClient(b)
	cg := os.Getenv("JOBKIT_PARTS_CALLGRIND")
	for _, mode := range []string{"ready", "scheduled", "behind-ready"} {
		b.Run(mode, func(b *testing.B) {
			var cpu, instr float64
			var cmds int64
			for i := range b.N {
				ns := fmt.Sprintf("bench_due_%s_%d_%d", mode, i, time.Now().UnixNano())
				s := newStore(b, c, ns)
				fillDue(b, s, mode)
				now := benchBase.Add(time.Hour)
				var cpu0 float64
				var n0 int64
				if cg != "" {
					callgrindDump(b, cg)
				} else {
					cpu0, n0 = serverCPU(b, c), commandCalls(b, c)
				}
				got := 0
				for got < dueJobs {
					res, err := s.Claim(context.Background(), &store.ClaimParams{Queue: "default", Owner: "w", Limit: 100, Now: now, LeaseUntil: now.Add(time.Minute)})
					if err != nil {
						b.Fatal(err)
					}
					if len(res.Instances) == 0 {
						b.Fatalf("claimed %d of %d, then nothing", got, dueJobs)
					}
					got += len(res.Instances)
				}
				if cg != "" {
					instr += callgrindDump(b, cg)
					continue
				}
				cpu += serverCPU(b, c) - cpu0
				cmds += commandCalls(b, c) - n0
			}
			if cg != "" {
				b.ReportMetric(instr/float64(b.N*dueJobs), "server-instr/job")
				return
			}
			b.ReportMetric(cpu/float64(b.N*dueJobs), "server-µs/job")
			b.ReportMetric(float64(cmds)/float64(b.N*dueJobs), "cmds/job")
		})
	}
}

// fillDue stores dueJobs instances for BenchmarkClaimDue's mode.
func fillDue(b *testing.B, s store.Store, mode string) {
	b.Helper()
	ctx := context.Background()
	enqueue := func(now time.Time, runAt func(j int) time.Time, from, n int) {
		for k := from; k < from+n; k += 1000 {
			recs := make([]*store.Instance, 1000)
			for j := range recs {
				recs[j] = &store.Instance{ID: benchID(), Kind: "noop", Queue: "default", Args: []byte("[1]"),
					RunAt: runAt(k + j), CreatedAt: now, MaxRetries: 3}
			}
			if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: recs, Node: "bench", Now: now}); err != nil {
				b.Fatal(err)
			}
		}
	}
	sched := func(j int) time.Time { return benchBase.Add(time.Second + time.Duration(j)*time.Millisecond) }
	switch mode {
	case "ready":
		enqueue(benchBase, func(int) time.Time { return benchBase }, 0, dueJobs)
	case "scheduled":
		enqueue(benchBase, sched, 0, dueJobs)
	case "behind-ready":
		enqueue(benchBase, sched, 0, dueJobs/2)
		// Due when enqueued, each half a millisecond after a scheduled one.
		enqueue(benchBase.Add(time.Minute), func(j int) time.Time { return sched(j).Add(500 * time.Microsecond) }, 0, dueJobs/2)
	}
}

// commandCalls is the number of commands redis-server ran (INFO
// commandstats calls, those scripts ran included).
func commandCalls(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\r\n") {
		_, v, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if val, ok := strings.CutPrefix(f, "calls="); ok {
				k, _ := strconv.ParseInt(val, 10, 64)
				n += k
			}
		}
	}
	return n
}

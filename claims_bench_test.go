package job_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// kindsJobs is how many jobs one run of BenchmarkClaimKinds burns down.
const kindsJobs = 50000

// BenchmarkClaimKinds: throughput of 64 workers with 1, 10 and 100 kinds
// registered on memdbstore (doc/benchmarks-appendix.md, "Issue 15: claims"):
//
//	go test -run '^$' -bench ClaimKinds -benchtime 3x -count 3 .
func BenchmarkClaimKinds(b *testing.B) {
	benchKinds(b, func(b *testing.B, _ string) store.Store {
		s, err := memdbstore.New()
		if err != nil {
			b.Fatal(err)
		}
		return s
	}, nil)
}

// benchKinds burns down kindsJobs ready no-op jobs with one manager of 64
// workers that registered 1, 10 or 100 kinds, the jobs spread evenly over
// spread of those kinds (spread = kinds: every kind has work, the most
// lanes a claim can meet; spread = 1: many kinds named, one has work), and
// reports jobs per second from Start to the last completion (the fill is
// not timed). It uses only the API that predates kind-aware claims, so the
// same file measures the code before them too.
func benchKinds(b *testing.B, open func(b *testing.B, ns string) store.Store, server func(b *testing.B) int64) {
	for _, c := range []struct{ kinds, spread int }{{1, 1}, {10, 10}, {100, 100}, {100, 1}} {
		kinds := c.kinds
		b.Run(fmt.Sprintf("kinds=%d/spread=%d", c.kinds, c.spread), func(b *testing.B) {
			var total, cpu time.Duration
			var srv int64
			for i := range b.N {
				s := open(b, fmt.Sprintf("kb%d_%d_%d", kinds, i, time.Now().UnixNano()))
				now := time.Now()
				for done := 0; done < kindsJobs; done += 1000 {
					recs := make([]*store.Instance, 1000)
					for j := range recs {
						recs[j] = &store.Instance{
							ID: benchID(), Kind: fmt.Sprintf("kind-%d", (done+j)%c.spread), Queue: job.DefaultQueue,
							Args: []byte("[1]"), RunAt: now, CreatedAt: now, MaxRetries: job.DefaultMaxRetries,
						}
					}
					if _, err := s.Enqueue(context.Background(), &store.EnqueueParams{Instances: recs, Node: "bench", Now: now}); err != nil {
						b.Fatal(err)
					}
				}
				var completed atomic.Int64
				all := make(chan struct{})
				m, err := job.NewManager(job.WithStore(s), job.WithWorkers(64), job.WithClaimBatch(64),
					job.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
				if err != nil {
					b.Fatal(err)
				}
				for k := range kinds {
					j, err := job.NewJob(job.WithKind(fmt.Sprintf("kind-%d", k)), job.WithExecutor(func(int) {}),
						job.WithCompleteProcessor(func(job.Instance, []any) {
							if completed.Add(1) == kindsJobs {
								close(all)
							}
						}))
					if err != nil {
						b.Fatal(err)
					}
					if err := m.RegisterJob(j); err != nil {
						b.Fatal(err)
					}
				}
				var s0 int64
				if server != nil {
					s0 = server(b)
				}
				c0 := cpuTime()
				start := time.Now()
				if err := m.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				select {
				case <-all:
				case <-time.After(2 * time.Minute):
					b.Fatalf("%d of %d jobs completed in 2 minutes", completed.Load(), kindsJobs)
				}
				total += time.Since(start)
				cpu += cpuTime() - c0
				if server != nil {
					srv += server(b) - s0
				}
				if err := m.Stop(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(kindsJobs*b.N)/total.Seconds(), "jobs/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(kindsJobs*b.N), "cpu-µs/job")
			if server != nil {
				b.ReportMetric(float64(srv)/float64(kindsJobs*b.N), "server-µs/job")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchID returns a random version-4 UUID in canonical form, as the engine's
// IDs are (the Redis stores pack those into 17 bytes).
func benchID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// cpuTime is the CPU time (user and system) this process has used: on a
// machine shared with other work, it measures the cost of a job where
// throughput measures the share of the machine the run got.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

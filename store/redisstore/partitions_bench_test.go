package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/redisstore"
)

// benchLayouts are the layouts BenchmarkPartitions compares on one
// redis-server: the unpartitioned store (New), a partitioned store of 1
// partition (the same keys), and one of 16.
func benchLayouts(b *testing.B, c *redis.Client, prefix string) []struct {
	name string
	open func() store.Store
} {
	ns := func() string { return fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano()) }
	part := func(n int) func() store.Store {
		return func() store.Store {
			s, err := redisstore.NewPartitioned(context.Background(), c, n, redisstore.WithNamespace(ns()))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
	}
	return []struct {
		name string
		open func() store.Store
	}{
		{"single-tag", func() store.Store { return newStore(b, c, ns()) }},
		{"partitions=1", part(1)},
		{"partitions=16", part(16)},
	}
}

// BenchmarkPartitions compares schedule and burn-down throughput on one
// redis-server across layouts (see benchLayouts): schedule is
// Manager.ScheduleJob from 64 goroutines, as BenchmarkScheduleJobParallel;
// burn-down claims 100 and completes them, as BenchmarkClaimFinishCycle
// (per-op time is per 100 jobs). server-µs/job is Redis's own script time
// per job (INFO commandstats), which the machine's load moves less than
// jobs/s.
func BenchmarkPartitions(b *testing.B) {
	c := benchClient(b)
	for _, l := range benchLayouts(b, c, "bench_part") {
		b.Run("schedule/"+l.name, func(b *testing.B) {
			m, err := job.NewManager(job.WithStore(l.open()))
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
		})
		b.Run("burndown/"+l.name, func(b *testing.B) {
			s := l.open()
			ctx := context.Background()
			const batch = 1000
			for start := 0; start < b.N*100; start += batch {
				ins := make([]*store.Instance, 0, batch)
				for i := start; i < min(start+batch, b.N*100); i++ {
					ins = append(ins, benchInst("bp", i))
				}
				if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Node: "bench-node-1", Now: benchBase}); err != nil {
					b.Fatal(err)
				}
			}
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
			b.ReportMetric(float64(u1-u0)/float64(b.N*100), "server-µs/job")
		})
	}
}

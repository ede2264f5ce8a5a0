package job_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store/memdbstore"
)

// BenchmarkShardedTask: one op schedules a task of 4 no-op shards on a
// manager with 4 workers (memdb) and waits until its parent completed,
// woken by the last shard's end (the recheck is an hour away).
func BenchmarkShardedTask(b *testing.B) {
	st, err := memdbstore.New()
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{}, 1)
	j, err := job.NewJob(job.WithKind("nop"), job.WithExecutor(func() {}),
		job.WithCompleteProcessor(func(ji job.Instance, _ []any) {
			if _, n := ji.Info().ShardIndex, ji.Info().ShardCount; n > 0 && ji.Info().Parent == "" {
				done <- struct{}{}
			}
		}))
	if err != nil {
		b.Fatal(err)
	}
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(4), job.WithShardRecheck(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.Stop(ctx) }()
	b.ResetTimer()
	for range b.N {
		if _, err := m.ScheduleJob(ctx, "nop", job.WithShards(4)); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Fatal("the task did not complete within 10 s")
		}
	}
}

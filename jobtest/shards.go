package jobtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

func init() {
	register("Sharded", testSharded)
	register("ShardedCancel", testShardedCancel)
	register("ShardedRecheck", testShardedRecheck)
}

// shardsByIndex returns the shards of parent by index, failing unless
// there are n, each with a distinct index.
func shardsByIndex(t *testing.T, m *job.Manager, parent string, n int) []*job.InstanceInfo {
	t.Helper()
	got, err := m.LookupInstances(context.Background(), job.NewQuery(job.WithQueryParent(parent)))
	if err != nil || len(got) != n {
		t.Fatalf("shards of %s: %d (%v), want %d", parent, len(got), err, n)
	}
	out := make([]*job.InstanceInfo, n)
	for _, s := range got {
		i, count := s.ShardIndex, s.ShardCount
		if count != n || i < 0 || i >= n || out[i] != nil || s.Parent != parent {
			t.Fatalf("shard %s: Shard() (%d, %d), Parent() %q; want a distinct index of %d under %s", s.ID, i, count, s.Parent, n, parent)
		}
		out[i] = s
	}
	return out
}

// testSharded: a task of four shards on a cluster of two managers; each
// shard knows its index, one is retried on its own, and the parent
// completes with the results in shard order, woken by the last shard's end
// (its recheck is an hour away). A task whose shard fails for good fails,
// naming it.
func testSharded(t *testing.T, e *env) {
	var runs [4]atomic.Int32
	newJobs := func() []*job.Job {
		return []*job.Job{
			mustJob(t, job.WithKind("sh"), job.WithMaxRetries(2), job.WithBackoff(job.ConstantBackoff(10*time.Millisecond)),
				job.WithExecutor(func(ctx context.Context, ji job.Instance, x int) (int, error) {
					i := ji.Info().ShardIndex
					if runs[i].Add(1) == 1 && i == 1 {
						return 0, errors.New("shard 1's first try fails")
					}
					return x*10 + i, nil
				})),
			mustJob(t, job.WithKind("sh-fail"), job.WithExecutor(func(ji job.Instance) error {
				if i := ji.Info().ShardIndex; i == 3 {
					return job.Permanent(errors.New("shard 3 is broken"))
				}
				return nil
			})),
		}
	}
	m1 := e.manager(t, newJobs(), job.WithShardRecheck(time.Hour))
	m2 := e.manager(t, newJobs(), job.WithShardRecheck(time.Hour))
	start(t, m1)
	start(t, m2)
	p := schedule(t, m1, "sh", job.WithArguments(5), job.WithShards(4))
	got := waitState(t, m2, p.ID, job.Completed, deadline)
	var r [4][]int
	if err := got.ResultsInto(&r[0], &r[1], &r[2], &r[3]); err != nil {
		t.Fatalf("parent results %v: %v", got.Results(), err)
	}
	for i := range r {
		if len(r[i]) != 1 || r[i][0] != 50+i {
			t.Errorf("result of shard %d: %v, want [%d]", i, r[i], 50+i)
		}
	}
	for i, s := range shardsByIndex(t, m2, p.ID, 4) {
		want := 1
		if i == 1 {
			want = 2
		}
		if s.State != job.Completed || s.Attempt != want {
			t.Errorf("shard %d: %v at attempt %d, want completed at attempt %d", i, s.State, s.Attempt, want)
		}
	}
	if got.Attempt != 1 {
		t.Errorf("parent at attempt %d, want 1: waiting counts no attempt", got.Attempt)
	}

	f := schedule(t, m2, "sh-fail", job.WithShards(4))
	got = waitState(t, m1, f.ID, job.Terminated, deadline)
	if msg := got.Error; !strings.Contains(msg, "shard 3 ") || !strings.Contains(msg, "shard 3 is broken") || strings.Contains(msg, "shard 0 ") {
		t.Errorf("failed task's error %q, want it to name shard 3 only", msg)
	}
}

// testShardedCancel: canceling a task's parent on one manager cancels its
// shards, those running on another manager included.
func testShardedCancel(t *testing.T, e *env) {
	var running atomic.Int32
	j := func() []*job.Job {
		return []*job.Job{mustJob(t, job.WithKind("shc"), job.WithExecutor(func(ctx context.Context) error {
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			return context.Cause(ctx)
		}))}
	}
	// A short lease: a cancel reaches the other manager's attempts at its
	// next renewal.
	runner := e.manager(t, j(), job.WithWorkers(2), job.WithLease(3*time.Second), job.WithShardRecheck(time.Hour))
	other := e.manager(t, j(), job.WithWorkers(0), job.WithShardRecheck(time.Hour))
	start(t, runner)
	start(t, other)
	p := schedule(t, other, "shc", job.WithShards(3))
	waitFor(t, deadline, "two shards running", func() bool { return running.Load() == 2 })
	if got, err := other.CancelInstance(context.Background(), p.ID); err != nil || got.State != job.Canceled {
		t.Fatalf("CancelInstance(parent): %v, %v; want canceled", got, err)
	}
	waitFor(t, deadline, "every shard canceled", func() bool {
		for _, s := range shardsByIndex(t, other, p.ID, 3) {
			if s.State != job.Canceled {
				return false
			}
		}
		return true
	})
	waitFor(t, deadline, "the running shards stopped", func() bool { return running.Load() == 0 })
}

// testShardedRecheck: the node that ended a task's shards crashed before
// it woke the parent (its shards were claimed and finished through the
// store, and nothing woke the parent); the parent completes at its
// recheck.
func testShardedRecheck(t *testing.T, e *env) {
	j := mustJob(t, job.WithKind("shr"), job.WithExecutor(func() {}))
	const recheck = 3 * time.Second // long enough for the claim below to come first on a slow store
	m := e.manager(t, []*job.Job{j}, job.WithShardRecheck(recheck))
	p := schedule(t, m, "shr", job.WithShards(2))
	s := e.store(t)
	ctx := context.Background()
	now := time.Now()
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: job.DefaultQueue, Owner: "crashed-node", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Kinds: []string{"shr"}})
	if err != nil || len(res.Instances) != 2 {
		t.Fatalf("claim the shards as the crashed node: %v, %+v; want the 2 shards (the parent is not due)", err, res)
	}
	outs := make([]store.Outcome, 2)
	for k, in := range res.Instances {
		if in.Parent != p.ID {
			t.Fatalf("claimed %s (parent %q), want a shard of %s", in.ID, in.Parent, p.ID)
		}
		outs[k] = store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed, Result: fmt.Appendf(nil, "[%d]", in.ShardIndex)}
	}
	if fr, err := s.Finish(ctx, &store.FinishParams{Owner: "crashed-node", Now: now, Outcomes: outs}); err != nil || fr[0].Err != nil || fr[1].Err != nil {
		t.Fatalf("finish the shards as the crashed node: %v, %+v", err, fr)
	}
	start(t, m)
	got := waitState(t, m, p.ID, job.Completed, deadline)
	var r0, r1 []int
	if err := got.ResultsInto(&r0, &r1); err != nil || len(r0) != 1 || r0[0] != 0 || len(r1) != 1 || r1[0] != 1 {
		t.Fatalf("parent results %v (%v), want [0] [1]", got.Results(), err)
	}
	if got.FinishedAt.Before(p.CreatedAt.Add(recheck)) {
		t.Errorf("parent finished at %v, before its recheck at %v: nothing should have woken it", got.FinishedAt, p.CreatedAt.Add(recheck))
	}
}

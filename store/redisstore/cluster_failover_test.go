package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// TestClusterPrimaryKilled: two managers run jobs on a Redis Cluster of
// three primaries with one replica each while the primary that holds the
// namespace's slot is SIGKILLed. Its replica is promoted (after the
// cluster's node timeout, 2 s here) and the managers go on through
// go-redis's ClusterClient, which follows the new slot map.
//
// Redis replicates asynchronously, so what the dead primary acknowledged
// but had not sent to its replica is lost: jobs scheduled in the last
// moment before the kill may be gone, and outcomes written then may be
// undone (their jobs run again: at-least-once). The test holds what must
// survive:
//   - every job scheduled after the promotion runs and ends Completed;
//   - every job that still exists ends Completed (none is stranded
//     Processing under a lease the new primary keeps);
//   - no job ever runs twice at once;
//   - the schedules that failed during the failover said so (an error),
//     and how many acknowledged ones were lost is reported.
func TestClusterPrimaryKilled(t *testing.T) {
	t.Parallel()
	const (
		before = 300 // scheduled before the kill
		after  = 300 // scheduled once the replica is promoted
		ns     = "failover"
	)
	cl := testserver.StartRedisCluster(t, 3, 1)
	ctx := t.Context()
	ex := newExecutions()
	log := &lineLog{}
	log.reportOnFailure(t)
	newClient := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return c
	}
	admin := newClient()
	look := newStore(t, admin, ns)

	var managers []*job.Manager
	for _, node := range []string{"a", "b"} {
		j, err := job.NewJob(job.WithKind("work"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
			ex.enter(ji.Info().ID)
			defer ex.leave(ji.Info().ID)
			select {
			case <-time.After(20 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		m, err := job.NewManager(
			job.WithStore(newStore(t, newClient(), ns)),
			job.WithNodeID(node),
			job.WithLogger(log.logger()),
			job.WithWorkers(8),
			job.WithLease(3*time.Second),
			job.WithPollInterval(100*time.Millisecond),
			job.WithRescueInterval(250*time.Millisecond),
		)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
		managers = append(managers, m)
	}
	for _, m := range managers {
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := m.Stop(stopCtx); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
	}

	// The primary serving the namespace's one slot.
	owner, err := admin.MasterForKey(ctx, "jobkit:{"+ns+"}:x")
	if err != nil {
		t.Fatal(err)
	}
	var primary *testserver.Process
	for _, p := range cl.Nodes {
		if p.Addr == owner.Options().Addr {
			primary = p
		}
	}
	if primary == nil {
		t.Fatalf("the namespace's primary %s is not one of the cluster's nodes %v", owner.Options().Addr, cl.Addrs())
	}

	schedule := func(n int, ids *[]string) (failed int) {
		for len(*ids) < n {
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			ji, err := managers[len(*ids)%2].ScheduleJob(callCtx, "work")
			cancel()
			if err != nil {
				failed++
				if failed > 10_000 {
					t.Fatalf("ScheduleJob kept failing: %v", err)
				}
				time.Sleep(10 * time.Millisecond) // back off while the cluster fails over
				continue
			}
			*ids = append(*ids, ji.ID)
		}
		return failed
	}

	var early, late []string
	schedule(before, &early)
	waitFor(t, 20*time.Second, "a third of the early jobs to start", func() bool { return ex.started.Load() >= before/3 })
	primary.Kill()
	killed := time.Now()
	// Schedule through the failover: calls fail until the replica is
	// promoted and the clients have learnt the new slot map, which must
	// take seconds, not go-redis's one-minute reload interval.
	promoted := make(chan time.Time, 1)
	go func() {
		for cl.WaitHealthy(time.Millisecond) != nil && time.Since(killed) < time.Minute {
			time.Sleep(20 * time.Millisecond)
		}
		promoted <- time.Now()
	}()
	var promotedAt time.Time
	failed := 0
	for len(late) == 0 {
		select {
		case promotedAt = <-promoted:
		default:
		}
		if !promotedAt.IsZero() && time.Since(promotedAt) > 10*time.Second {
			t.Fatalf("ScheduleJob still fails 10 s after the replica was promoted (%d calls failed since the kill)", failed)
		}
		if time.Since(killed) > time.Minute {
			t.Fatalf("no promotion a minute after the primary was killed: %v", cl.WaitHealthy(time.Millisecond))
		}
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		ji, err := managers[0].ScheduleJob(callCtx, "work")
		cancel()
		if err != nil {
			failed++
			time.Sleep(10 * time.Millisecond) // back off while the cluster fails over
			continue
		}
		late = append(late, ji.ID)
	}
	t.Logf("scheduling resumed %v after the kill; %d calls failed meanwhile", time.Since(killed).Round(time.Millisecond), failed)
	failed += schedule(after, &late)

	// Every late job completes; every early job that still exists does.
	deadline := time.Now().Add(60 * time.Second)
	var lost []string
	all := append(append([]string(nil), early...), late...)
	for {
		ins, err := look.LookupInstances(ctx, &store.Query{IDs: all, Limit: len(all)})
		found := map[string]*store.Instance{}
		for _, in := range ins {
			found[in.ID] = in
		}
		lost = lost[:0]
		pending := 0
		for _, id := range all {
			in := found[id]
			switch {
			case in == nil:
				lost = append(lost, id)
			case !in.State.Final():
				pending++
			case in.State != store.Completed:
				t.Fatalf("instance %s ended %v after %d attempts (%q), want Completed", id, in.State, in.Attempt, in.Error)
			}
		}
		if err == nil && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after the failover, %d jobs still not final, %d not found (last look-up error: %v)", pending, len(lost), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	lateSet := map[string]bool{}
	for _, id := range late {
		lateSet[id] = true
	}
	for _, id := range lost {
		if lateSet[id] {
			t.Errorf("job %s, scheduled (and acknowledged) after the promotion, is gone", id)
		}
	}
	peak, peakID, _ := ex.summary(nil)
	if peak > 1 {
		t.Errorf("instance %s ran %d times at once", peakID, peak)
	}
	reran := 0
	for _, ids := range [][]string{early, late} {
		_, _, notOnce := ex.summary(ids)
		for _, n := range notOnce {
			if n > 1 {
				reran++
			}
		}
	}
	t.Logf("%d early jobs lost with the primary's unreplicated writes, %d jobs ran more than once, of %d acknowledged", len(lost), reran, len(early)+len(late))
}

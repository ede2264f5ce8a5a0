package scripttest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// ClusterHarness opens the plugin under test on a Redis Cluster.
type ClusterHarness struct {
	// Open returns a store in namespace ns on the cluster whose nodes are
	// addrs, with a cluster client of its own that t's cleanup closes.
	Open func(t testing.TB, addrs []string, ns string) store.Store
}

// RunCluster runs the scenarios that need a Redis Cluster of their own.
func RunCluster(t *testing.T, h ClusterHarness) {
	t.Run("PrimaryKilled", func(t *testing.T) {
		t.Parallel()
		testPrimaryKilled(t, h)
	})
}

// runs counts each instance's executions: in all, and at once.
type runs struct {
	mu      sync.Mutex
	running map[string]int
	total   map[string]int
	peak    int
	peakID  string
	started int
}

func (r *runs) enter(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[id]++
	r.total[id]++
	r.started++
	if r.running[id] > r.peak {
		r.peak, r.peakID = r.running[id], id
	}
}

func (r *runs) leave(id string) {
	r.mu.Lock()
	r.running[id]--
	r.mu.Unlock()
}

// testPrimaryKilled: two managers run jobs on a Redis Cluster of three
// primaries with one replica each while the primary that serves the
// namespace's slot is SIGKILLed. Its replica is promoted (after the
// cluster's node timeout, 2 s here) and the managers go on.
//
// Redis replicates asynchronously, so what the dead primary acknowledged
// but had not sent to its replica is lost: jobs scheduled in its last
// moment may be gone, and outcomes written then undone (their jobs run
// again: at-least-once). The test holds what must survive:
//   - scheduling resumes within 10 s of the promotion (go-redis alone
//     waited for its one-minute slot map reload);
//   - every job scheduled after the promotion runs and ends Completed;
//   - every job that still exists ends Completed (none is stranded
//     Processing under a lease the new primary keeps);
//   - no job ever runs twice at once.
//
// It reports how many acknowledged jobs were lost and how many ran again.
func testPrimaryKilled(t *testing.T, h ClusterHarness) {
	const (
		before = 300 // scheduled before the kill
		after  = 300 // scheduled once scheduling resumed
		ns     = "failover"
	)
	cl := testserver.StartRedisCluster(t, 3, 1)
	ctx := t.Context()
	ex := &runs{running: map[string]int{}, total: map[string]int{}}
	look := h.Open(t, cl.Addrs(), ns)
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
			job.WithStore(h.Open(t, cl.Addrs(), ns)),
			job.WithNodeID(node),
			job.WithLogger(slog.New(slog.DiscardHandler)), // the failover's warnings are expected
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
		managers = append(managers, m)
	}
	primary, err := cl.PrimaryOf("jobkit:{" + ns + "}:x")
	if err != nil {
		t.Fatal(err)
	}

	var early, late []string
	for len(early) < before {
		ji, err := managers[len(early)%2].ScheduleJob(ctx, "work")
		if err != nil {
			t.Fatalf("ScheduleJob before the kill: %v", err)
		}
		early = append(early, ji.ID)
	}
	waitUntil(t, 20*time.Second, "a third of the early jobs to start", func() bool {
		ex.mu.Lock()
		defer ex.mu.Unlock()
		return ex.started >= before/3
	})
	primary.Kill()
	killed := time.Now()
	promoted := make(chan time.Time, 1)
	go func() {
		for cl.WaitHealthy(time.Millisecond) != nil && time.Since(killed) < time.Minute {
			time.Sleep(20 * time.Millisecond)
		}
		promoted <- time.Now()
	}()
	var promotedAt time.Time
	failed := 0
	for len(late) < after {
		select {
		case promotedAt = <-promoted:
		default:
		}
		if len(late) == 0 && !promotedAt.IsZero() && time.Since(promotedAt) > 10*time.Second {
			t.Fatalf("ScheduleJob still fails 10 s after the replica was promoted (%d calls failed since the kill)", failed)
		}
		if time.Since(killed) > time.Minute {
			t.Fatalf("a minute after the kill, %d of %d late jobs scheduled (%d calls failed); cluster: %v", len(late), after, failed, cl.WaitHealthy(time.Millisecond))
		}
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		ji, err := managers[len(late)%2].ScheduleJob(callCtx, "work")
		cancel()
		if err != nil {
			failed++
			time.Sleep(10 * time.Millisecond) // back off while the cluster fails over
			continue
		}
		if len(late) == 0 {
			t.Logf("scheduling resumed %v after the kill; %d calls failed meanwhile", time.Since(killed).Round(time.Millisecond), failed)
		}
		late = append(late, ji.ID)
	}

	all := append(append([]string(nil), early...), late...)
	isLate := map[string]bool{}
	for _, id := range late {
		isLate[id] = true
	}
	var lost []string
	deadline := time.Now().Add(time.Minute)
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
			t.Fatalf("a minute after the failover, %d jobs still not final, %d not found (last look-up error: %v)", pending, len(lost), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range lost {
		if isLate[id] {
			t.Errorf("job %s, scheduled (and acknowledged) after the failover, is gone", id)
		}
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.peak > 1 {
		t.Errorf("instance %s ran %d times at once", ex.peakID, ex.peak)
	}
	again := 0
	for _, n := range ex.total {
		if n > 1 {
			again++
		}
	}
	t.Logf("%d early jobs lost with the primary's unreplicated writes, %d jobs ran more than once, of %d acknowledged", len(lost), again, len(all))
}

// waitUntil waits for cond, failing t after within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

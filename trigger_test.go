package job_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// triggerCluster starts n managers on one memdb store, each with the job
// kind "tick" whose executor is run (when run is not nil), and stops them
// at the end of the test. It must be called inside a synctest bubble.
func triggerCluster(t *testing.T, n int, run any, opts ...job.ManagerOption) (store.Store, []*job.Manager) {
	t.Helper()
	s := newMemdb(t)
	ms := make([]*job.Manager, n)
	for i := range ms {
		o := append([]job.ManagerOption{job.WithStore(s), job.WithNodeID(fmt.Sprintf("node%d", i)), job.WithLogger(quietLogger()),
			job.WithTriggerReload(time.Second)}, opts...)
		m, err := job.NewManager(o...)
		if err != nil {
			t.Fatal(err)
		}
		if run != nil {
			if err := m.RegisterJob(mustJob(t, job.WithKind("tick"), job.WithExecutor(run))); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	t.Cleanup(func() {
		for _, m := range ms {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = m.Stop(ctx)
			cancel()
		}
	})
	return s, ms
}

// tickInstances returns the instances of kind, oldest tick first.
func tickInstances(t *testing.T, m *job.Manager, kind string) []*job.InstanceInfo {
	t.Helper()
	insts, err := m.LookupInstances(context.Background(), job.NewQuery(job.WithQueryKind(kind)))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(insts, func(i, k int) bool { return insts[i].RunAt.Before(insts[k].RunAt) })
	return insts
}

// oneRunPerTick fails t when two instances share a tick (RunAt).
func oneRunPerTick(t *testing.T, insts []*job.InstanceInfo) {
	t.Helper()
	seen := map[time.Time]string{}
	for _, in := range insts {
		if other, ok := seen[in.RunAt]; ok {
			t.Fatalf("tick %v has two instances: %s and %s", in.RunAt, other, in.ID)
		}
		seen[in.RunAt] = in.ID
	}
}

// TestTriggerOncePerCluster creates an interval trigger at run time on one
// of three managers sharing a store: every tick runs once in the cluster,
// on time, and the trigger records its last tick.
func TestTriggerOncePerCluster(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Int32
		s, ms := triggerCluster(t, 3, func() { ran.Add(1) })
		ctx := context.Background()
		start := time.Now()
		if _, err := ms[1].Admin().PutTrigger(ctx, &store.Trigger{Name: "every-second", Kind: "tick", Interval: time.Second}, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10*time.Second + 500*time.Millisecond)
		synctest.Wait()
		insts := tickInstances(t, ms[0], "tick")
		oneRunPerTick(t, insts)
		if len(insts) != 10 {
			t.Fatalf("%d instances in 10.5 s of a 1 s trigger, want 10", len(insts))
		}
		for i, in := range insts {
			if want := start.Truncate(time.Second).Add(time.Duration(i+1) * time.Second); !in.RunAt.Equal(want) {
				t.Errorf("instance %d due at %v, want %v", i, in.RunAt, want)
			}
			if in.State != job.Completed {
				t.Errorf("instance %d is %v, want Completed", i, in.State)
			}
		}
		if n := ran.Load(); n != 10 {
			t.Errorf("executor ran %d times, want 10", n)
		}
		tr, err := store.TriggersIn(s).GetTrigger(ctx, "every-second")
		if err != nil {
			t.Fatal(err)
		}
		if last := insts[len(insts)-1]; !tr.LastTick.Equal(last.RunAt) || tr.LastInstanceID != last.ID {
			t.Errorf("trigger records tick %v instance %s, want %v %s", tr.LastTick, tr.LastInstanceID, last.RunAt, last.ID)
		}
	})
}

// TestTriggerPauseResumeDelete pauses a trigger (no ticks), resumes it
// (ticks again, none caught up from the pause) and deletes it (no more
// ticks), each through another manager than the ones firing, so the
// change reaches them through the store.
func TestTriggerPauseResumeDelete(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, ms := triggerCluster(t, 2, func() {})
		// admin is another process's manager that only changes triggers.
		admin, err := job.NewManager(job.WithStore(s), job.WithScheduler(false), job.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// The admin takes kind tick for one a live node runs: wait for the
		// cluster's first heartbeats.
		synctest.Wait()
		if _, err := admin.Admin().PutTrigger(ctx, &store.Trigger{Name: "tr", Kind: "tick", Interval: time.Second}, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3*time.Second + 500*time.Millisecond)
		synctest.Wait()
		if n := len(tickInstances(t, ms[0], "tick")); n != 3 {
			t.Fatalf("%d ticks before the pause, want 3", n)
		}
		if _, err := admin.Admin().PauseTrigger(ctx, "tr"); err != nil {
			t.Fatal(err)
		}
		if next, err := admin.Admin().ListFireTimes(ctx, "tr", 3); err != nil || len(next) != 0 {
			t.Fatalf("next fire times of a paused trigger: %v, %v; want none", next, err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := len(tickInstances(t, ms[0], "tick")); n != 3 {
			t.Fatalf("%d ticks after 5 s paused, want still 3", n)
		}
		resumed := time.Now()
		if _, err := admin.Admin().ResumeTrigger(ctx, "tr"); err != nil {
			t.Fatal(err)
		}
		next, err := admin.Admin().ListFireTimes(ctx, "tr", 3)
		if err != nil || len(next) != 3 || !next[0].Equal(resumed.Truncate(time.Second).Add(time.Second)) || next[2].Sub(next[0]) != 2*time.Second {
			t.Fatalf("next fire times after resume at %v: %v, %v", resumed, next, err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		insts := tickInstances(t, ms[0], "tick")
		oneRunPerTick(t, insts)
		if len(insts) != 6 {
			t.Fatalf("%d ticks after 3 s resumed, want 6 (none caught up from the pause)", len(insts))
		}
		for _, in := range insts[3:] {
			if !in.RunAt.After(resumed) {
				t.Errorf("tick %v fired after the resume at %v: a paused tick was caught up", in.RunAt, resumed)
			}
		}
		if err := admin.Admin().DeleteTrigger(ctx, "tr"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := len(tickInstances(t, ms[0], "tick")); n != 6 {
			t.Fatalf("%d ticks 5 s after the delete, want still 6", n)
		}
	})
}

// TestTriggerDeleteFromStoreStopsWithinReload deletes a trigger in the
// store directly (as another process would): no tick fires after the
// next reload.
func TestTriggerDeleteFromStoreStopsWithinReload(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, ms := triggerCluster(t, 2, func() {})
		ctx := context.Background()
		if _, err := store.TriggersIn(s).PutTrigger(ctx, &store.PutTriggerParams{Trigger: &store.Trigger{Name: "tr", Kind: "tick", Interval: time.Second}, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if n := len(tickInstances(t, ms[0], "tick")); n < 2 {
			t.Fatalf("%d ticks of a trigger created in the store 4 s ago (reload 1 s), want at least 2", n)
		}
		if err := store.TriggersIn(s).DeleteTrigger(ctx, &store.DeleteTriggerParams{Name: "tr"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // one reload
		synctest.Wait()
		n := len(tickInstances(t, ms[0], "tick"))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if m := len(tickInstances(t, ms[0], "tick")); m != n {
			t.Fatalf("%d ticks fired more than one reload after the delete", m-n)
		}
	})
}

// TestTriggerOverlapForbid: while a run blocks, ticks are skipped and
// counted; once it ends, the next tick fires.
func TestTriggerOverlapForbid(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var once sync.Once
		var runs atomic.Int32
		_, ms := triggerCluster(t, 2, func() {
			if runs.Add(1) == 1 {
				<-release
			}
		})
		defer once.Do(func() { close(release) })
		ctx := context.Background()
		if _, err := ms[0].Admin().PutTrigger(ctx, &store.Trigger{Name: "tr", Kind: "tick", Interval: time.Second, Overlap: store.OverlapForbid}, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4*time.Second + 500*time.Millisecond)
		synctest.Wait()
		insts := tickInstances(t, ms[0], "tick")
		if len(insts) != 1 || insts[0].State != job.Processing {
			t.Fatalf("%d instances while the first blocks, want 1 Processing", len(insts))
		}
		tr, err := ms[0].Admin().GetTrigger(ctx, "tr")
		if err != nil {
			t.Fatal(err)
		}
		if tr.Skipped != 3 || !tr.LastSkipped.Equal(insts[0].RunAt.Add(3*time.Second)) {
			t.Fatalf("trigger skipped %d ticks, last %v; want 3, the last at %v", tr.Skipped, tr.LastSkipped, insts[0].RunAt.Add(3*time.Second))
		}
		logs, err := ms[0].LookupInstanceLogs(ctx, job.NewQuery(job.WithQueryInstance(insts[0])))
		if err != nil {
			t.Fatal(err)
		}
		if len(logs) != 3 {
			t.Fatalf("the blocking run has %d log records, want one per tick it made skip (3)", len(logs))
		}
		for _, l := range logs {
			if !strings.Contains(l.Message, "skipped") || !strings.Contains(l.Message, `"tr"`) {
				t.Errorf("log of a skipped tick: %q, want it to name the trigger and the skip", l.Message)
			}
		}
		once.Do(func() { close(release) })
		time.Sleep(2 * time.Second)
		synctest.Wait()
		insts = tickInstances(t, ms[0], "tick")
		oneRunPerTick(t, insts)
		if len(insts) != 3 {
			t.Fatalf("%d instances 2 s after the first run ended, want 3", len(insts))
		}
		for _, in := range insts {
			if in.State != job.Completed {
				t.Errorf("instance due %v is %v, want Completed", in.RunAt, in.State)
			}
		}
	})
}

// TestTriggerOverlapReplace: each tick cancels the previous run, which
// blocks until canceled; a run on another manager ends at that manager's
// next lease renewal.
func TestTriggerOverlapReplace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		_, ms := triggerCluster(t, 2, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}, job.WithLease(3*time.Second))
		ctx := context.Background()
		if _, err := ms[0].Admin().PutTrigger(ctx, &store.Trigger{Name: "tr", Kind: "tick", Interval: time.Second, Overlap: store.OverlapReplace}, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3*time.Second + 500*time.Millisecond)
		if err := ms[0].Admin().DeleteTrigger(ctx, "tr"); err != nil {
			t.Fatal(err)
		}
		// A run on the other manager sees the cancel at its next lease
		// renewal (a third of the lease).
		time.Sleep(2 * time.Second)
		synctest.Wait()
		insts := tickInstances(t, ms[0], "tick")
		oneRunPerTick(t, insts)
		if len(insts) != 3 {
			t.Fatalf("%d instances, want 3", len(insts))
		}
		for i, in := range insts[:2] {
			if in.State != job.Canceled {
				t.Errorf("run %d is %v, want Canceled by the next tick", i, in.State)
			}
		}
		if st := insts[2].State; st != job.Processing {
			t.Errorf("latest run is %v, want Processing", st)
		}
	})
}

// TestTriggerMissedTicks stores triggers while no scheduler runs, lets
// time pass, then starts one: MissedSkip fires only from then on;
// MissedCatchUpOnce fires the latest missed tick once when it is within
// its deadline, and not when it is older.
func TestTriggerMissedTicks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemdb(t)
		ctx := context.Background()
		t0 := time.Now() // synctest starts at midnight: a minute boundary
		for _, tr := range []*store.Trigger{
			{Name: "skip", Kind: "skip", Interval: time.Minute},
			{Name: "catch-up", Kind: "catch-up", Interval: time.Minute, Missed: store.MissedCatchUpOnce, CatchUpWithin: 45 * time.Second},
			{Name: "too-old", Kind: "too-old", Interval: time.Minute, Missed: store.MissedCatchUpOnce, CatchUpWithin: 20 * time.Second},
		} {
			if _, err := store.TriggersIn(s).PutTrigger(ctx, &store.PutTriggerParams{Trigger: tr, Now: t0}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10*time.Minute + 30*time.Second) // every scheduler is down
		start := time.Now()
		var ms []*job.Manager
		for i := range 2 { // two start at once: the catch-up still runs once
			m, err := job.NewManager(job.WithStore(s), job.WithNodeID(fmt.Sprintf("node%d", i)), job.WithLogger(quietLogger()), job.WithQueues("none"))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		defer func() {
			for _, m := range ms {
				_ = m.Stop(ctx)
			}
		}()
		time.Sleep(45 * time.Second) // the next tick is 30 s after the start
		synctest.Wait()
		for kind, want := range map[string][]time.Time{
			"skip":     {start.Add(30 * time.Second)},
			"catch-up": {start.Add(-30 * time.Second), start.Add(30 * time.Second)},
			"too-old":  {start.Add(30 * time.Second)},
		} {
			insts := tickInstances(t, ms[0], kind)
			var got []time.Time
			for _, in := range insts {
				got = append(got, in.RunAt)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: ticks %v, want %v", kind, got, want)
			}
		}
	})
}

// TestTriggerKindNobodyRuns: the ticks of a kind no manager registers wait
// in the queue, handed back, never failed. (PutTrigger refuses such a
// trigger; one is left when the nodes that ran its kind go away, or
// written to the store directly, as here.)
func TestTriggerKindNobodyRuns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, ms := triggerCluster(t, 2, func() {})
		ctx := context.Background()
		if _, err := store.TriggersIn(s).PutTrigger(ctx, &store.PutTriggerParams{Trigger: &store.Trigger{Name: "orphan", Kind: "nobody", Interval: time.Minute}, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5*time.Minute + 30*time.Second)
		synctest.Wait()
		insts := tickInstances(t, ms[0], "nobody")
		if len(insts) != 5 {
			t.Fatalf("%d instances of the orphan kind after 5 ticks, want 5", len(insts))
		}
		for _, in := range insts {
			if in.State != job.Scheduled && in.State != job.Processing {
				t.Errorf("orphan tick %v is %v (%v), want waiting", in.RunAt, in.State, in.Error)
			}
			if in.Attempt > 1 {
				t.Errorf("orphan tick %v used %d attempts", in.RunAt, in.Attempt)
			}
		}
	})
}

// TestTriggerInvalid: a bad trigger is refused with ErrInvalid, arguments
// that do not fit the local executor with ErrInvalidArguments, and
// nothing is stored.
func TestTriggerInvalid(t *testing.T) {
	t.Parallel()
	m, err := job.NewManager(job.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(mustJob(t, job.WithKind("add"), job.WithExecutor(func(a, b int) int { return a + b }))); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tr := range []*store.Trigger{
		nil,
		{Name: "bad-cron", Kind: "add", Cron: "* * *", Args: []byte("[1,2]")},
		{Name: "bad-zone", Kind: "add", Cron: "0 9 * * *", TimeZone: "Nowhere/City", Args: []byte("[1,2]")},
		{Name: "short", Kind: "add", Interval: time.Millisecond, Args: []byte("[1,2]")},
		{Name: "both", Kind: "add", Interval: time.Minute, Cron: "@hourly", Args: []byte("[1,2]")},
		{Name: "neither", Kind: "add", Args: []byte("[1,2]")},
		{Name: "policy", Kind: "add", Interval: time.Minute, Overlap: "maybe", Args: []byte("[1,2]")},
	} {
		if _, err := m.Admin().PutTrigger(ctx, tr, 0); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutTrigger(%+v): %v, want ErrInvalid", tr, err)
		}
	}
	if _, err := m.Admin().PutTrigger(ctx, &store.Trigger{Name: "args", Kind: "add", Interval: time.Minute, Args: []byte(`["x"]`)}, 0); !errors.Is(err, job.ErrInvalidArguments) {
		t.Errorf("PutTrigger with arguments the executor cannot take: %v, want ErrInvalidArguments", err)
	}
	if trs, err := m.Admin().ListTriggers(ctx, "", 0); err != nil || len(trs.Items) != 0 {
		t.Fatalf("after refused puts: %d triggers stored, %v", len(trs.Items), err)
	}
	tr, err := m.Admin().PutTrigger(ctx, &store.Trigger{Name: "ok", Kind: "add", Cron: "0 9 * * 1-5", TimeZone: "Europe/Paris", Args: []byte("[1,2]")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	next, err := tr.Spec().NextTimes(time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC), 3, nil) // a Friday
	if err != nil {
		t.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	want := []time.Time{
		time.Date(2026, 3, 30, 9, 0, 0, 0, paris), // Monday, after the switch to summer time
		time.Date(2026, 3, 31, 9, 0, 0, 0, paris),
		time.Date(2026, 4, 1, 9, 0, 0, 0, paris),
	}
	for i := range want {
		if !next[i].Equal(want[i]) {
			t.Errorf("next fire time %d: %v, want %v", i, next[i], want[i])
		}
	}
}

// TestRecurringOverlapPolicies: the same policies on jobs registered in
// code. forbid schedules no tick while a run blocks; replace cancels the
// earlier run at each tick.
func TestRecurringOverlapPolicies(t *testing.T) {
	t.Parallel()
	for _, policy := range []job.OverlapPolicy{job.OverlapForbid, job.OverlapReplace} {
		t.Run(string(policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newMemdb(t)
				release := make(chan struct{})
				var ms []*job.Manager
				for i := range 2 {
					m, err := job.NewManager(job.WithStore(s), job.WithNodeID(fmt.Sprintf("node%d", i)), job.WithLogger(quietLogger()))
					if err != nil {
						t.Fatal(err)
					}
					j := mustJob(t, job.WithKind("tick"), job.WithInterval(time.Second), job.WithOverlapPolicy(policy),
						job.WithExecutor(func(ctx context.Context) error {
							select {
							case <-release:
								return nil
							case <-ctx.Done():
								return ctx.Err()
							}
						}))
					if err := m.RegisterJob(j); err != nil {
						t.Fatal(err)
					}
					if err := m.Start(context.Background()); err != nil {
						t.Fatal(err)
					}
					ms = append(ms, m)
				}
				defer func() {
					close(release)
					for _, m := range ms {
						_ = m.Stop(context.Background())
					}
				}()
				time.Sleep(3*time.Second + 500*time.Millisecond)
				synctest.Wait()
				insts := tickInstances(t, ms[0], "tick")
				oneRunPerTick(t, insts)
				switch policy {
				case job.OverlapForbid:
					if len(insts) != 1 || insts[0].State != job.Processing {
						t.Fatalf("forbid: %d instances while the first blocks, want 1 Processing", len(insts))
					}
				case job.OverlapReplace:
					if len(insts) != 3 {
						t.Fatalf("replace: %d instances, want 3", len(insts))
					}
					for i, in := range insts[:2] {
						if in.State != job.Canceled {
							t.Errorf("replace: run %d is %v, want Canceled", i, in.State)
						}
					}
				}
			})
		})
	}
}

// TestRecurringMissedTickPolicy: a manager starting 30 s after a minute
// tick schedules it under MissedCatchUpOnce with a deadline that covers
// it (once, with two managers starting together), and not otherwise.
func TestRecurringMissedTickPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		opt   job.JobOption
		catch bool
	}{
		{"default", nil, false},
		{"skip", job.WithMissedTickPolicy(job.MissedSkip, 0), false},
		{"catch-up", job.WithMissedTickPolicy(job.MissedCatchUpOnce, 45*time.Second), true},
		{"too-old", job.WithMissedTickPolicy(job.MissedCatchUpOnce, 20*time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newMemdb(t)
				time.Sleep(30 * time.Second)
				start := time.Now()
				var ms []*job.Manager
				for i := range 2 {
					m, err := job.NewManager(job.WithStore(s), job.WithNodeID(fmt.Sprintf("node%d", i)), job.WithLogger(quietLogger()))
					if err != nil {
						t.Fatal(err)
					}
					opts := []job.JobOption{job.WithKind("tick"), job.WithInterval(time.Minute), job.WithExecutor(func() {})}
					if tc.opt != nil {
						opts = append(opts, tc.opt)
					}
					if err := m.RegisterJob(mustJob(t, opts...)); err != nil {
						t.Fatal(err)
					}
					if err := m.Start(context.Background()); err != nil {
						t.Fatal(err)
					}
					ms = append(ms, m)
				}
				defer func() {
					for _, m := range ms {
						_ = m.Stop(context.Background())
					}
				}()
				time.Sleep(time.Second)
				synctest.Wait()
				var got []time.Time
				for _, in := range tickInstances(t, ms[0], "tick") {
					got = append(got, in.RunAt)
				}
				want := []time.Time{start.Add(30 * time.Second)} // the next tick, scheduled ahead
				if tc.catch {
					want = append([]time.Time{start.Add(-30 * time.Second)}, want...)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("ticks %v, want %v", got, want)
				}
			})
		})
	}
	if _, err := job.NewJob(job.WithKind("k"), job.WithExecutor(func() {}), job.WithInterval(time.Minute), job.WithMissedTickPolicy(job.MissedCatchUpOnce, 0)); !errors.Is(err, job.ErrInvalidJob) {
		t.Errorf("catch-up without a deadline: %v, want ErrInvalidJob", err)
	}
	if _, err := job.NewJob(job.WithKind("k"), job.WithExecutor(func() {}), job.WithOverlapPolicy(job.OverlapForbid)); !errors.Is(err, job.ErrInvalidJob) {
		t.Errorf("an overlap policy without a schedule: %v, want ErrInvalidJob", err)
	}
}

// TestTriggerKindByDefinition: the ticks of a kind no firing manager
// registers take the queue, priority, retries and timeout of the kind's
// stored definition.
func TestTriggerKindByDefinition(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		_, ms := triggerCluster(t, 2, nil, job.WithWorkers(0))
		ctx := context.Background()
		if _, err := ms[0].Admin().PutDefinition(ctx, job.Definition{Kind: "remote", Queue: "remote-q", Priority: 5, MaxRetries: 7, Timeout: time.Minute}, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := ms[0].Admin().PutTrigger(ctx, &store.Trigger{Name: "remote", Kind: "remote", Interval: time.Second, Args: []byte(`[1]`)}, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2*time.Second + 500*time.Millisecond)
		synctest.Wait()
		insts := tickInstances(t, ms[0], "remote")
		if len(insts) != 2 {
			t.Fatalf("%d instances, want 2", len(insts))
		}
		for _, in := range insts {
			if in.Queue != "remote-q" || in.Priority != 5 || in.MaxRetries != 7 || in.Timeout != time.Minute || in.State != job.Scheduled {
				t.Errorf("tick %v: queue %q priority %d retries %d timeout %v state %v; want the definition's, waiting",
					in.RunAt, in.Queue, in.Priority, in.MaxRetries, in.Timeout, in.State)
			}
		}
	})
}

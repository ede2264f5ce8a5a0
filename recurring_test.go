package job_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/fakeclock"
)

// TestBadScheduleSpecsRejected checks that a schedule spec robfig/cron
// cannot parse, or one that would tick more often than once a second,
// is an ErrInvalidJob from NewJob, never a panic.
func TestBadScheduleSpecsRejected(t *testing.T) {
	t.Parallel()
	newJob := func(o job.JobOption) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panicked: %v", p)
			}
		}()
		_, err = job.NewJob(job.WithKind("k"), job.WithExecutor(func() {}), o)
		return err
	}
	for _, spec := range []string{
		"TZ=", "TZ=UTC", "CRON_TZ=Europe/Paris", "CRON_TZ=", "TZ= ", "TZ=Nowhere/City 0 9 * * *",
		"@every 1ns", "@every 999ms", "@every 0s", "@every -1s", "TZ=UTC @every 1ns", "TZ=UTC @every 1m",
		"0 0 30 2 *", // February 30th: never fires
		"", " ", "@", "@never",
	} {
		if err := newJob(job.WithCronSpec(spec)); !errors.Is(err, job.ErrInvalidJob) {
			t.Errorf("WithCronSpec(%q): %v, want ErrInvalidJob", spec, err)
		}
	}
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, 999 * time.Millisecond, -time.Second} {
		if err := newJob(job.WithInterval(d)); !errors.Is(err, job.ErrInvalidJob) {
			t.Errorf("WithInterval(%v): %v, want ErrInvalidJob", d, err)
		}
	}
	for _, spec := range []string{"@every 1s", "@every 1m30s", "* * * * * *", "TZ=UTC 0 9 * * *", "CRON_TZ=Europe/Paris 0 9 * * 1-5", "@daily"} {
		if err := newJob(job.WithCronSpec(spec)); err != nil {
			t.Errorf("WithCronSpec(%q): %v, want accepted", spec, err)
		}
	}
	if err := newJob(job.WithInterval(time.Second)); err != nil {
		t.Errorf("WithInterval(MinInterval): %v", err)
	}
}

// TestUnregisterRecurringAcrossManagers runs a recurring job on two
// managers sharing one store and unregisters it from one, then the other.
// While one manager still has the kind, ticks go on; a tick the other
// claims is handed back without using an attempt, and ends Completed or,
// if it kept landing on the manager without the kind for a minute,
// Canceled, never failed. Once neither has the kind no new tick is
// scheduled, and the tick already enqueued waits, Scheduled: claims name
// the kinds a manager runs, so no manager claims it (it used to be
// claimed by a manager without the kind and end Canceled a minute later).
func TestUnregisterRecurringAcrossManagers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemdb(t)
		var ran [2]atomic.Int32
		ms := make([]*job.Manager, 2)
		for i := range ms {
			j := mustJob(t, job.WithKind("tick"), job.WithInterval(time.Second),
				job.WithExecutor(func() { ran[i].Add(1) }))
			m, err := job.NewManager(job.WithStore(s), job.WithNodeID(fmt.Sprintf("node%d", i)), job.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.RegisterJob(j); err != nil {
				t.Fatal(err)
			}
			if err := m.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			ms[i] = m
		}
		defer func() {
			for _, m := range ms {
				if err := m.Stop(context.Background()); err != nil {
					t.Error(err)
				}
			}
		}()
		ctx := context.Background()
		ticks := func() []*job.InstanceInfo {
			t.Helper()
			insts, err := ms[0].LookupInstances(ctx, job.NewQuery(job.WithQueryKind("tick")))
			if err != nil {
				t.Fatal(err)
			}
			return insts
		}
		time.Sleep(5*time.Second + 500*time.Millisecond)
		synctest.Wait()
		if err := ms[0].UnregisterJob("tick"); err != nil {
			t.Fatal(err)
		}
		before := ran[1].Load()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if n := ran[1].Load() - before; n < 5 {
			t.Errorf("node1 ran %d ticks in the 20 s after node0 unregistered the kind: ticks must go on where the kind is registered", n)
		}
		if err := ms[1].UnregisterJob("tick"); err != nil {
			t.Fatal(err)
		}
		last := time.Now()
		total := len(ticks())
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		all := ticks()
		if len(all) != total {
			t.Errorf("%d tick instances 5 min after no manager has the kind, %d when the last one unregistered it: ticks go on", len(all), total)
		}
		var latest *job.InstanceInfo
		for _, in := range all {
			if latest == nil || in.CreatedAt.After(latest.CreatedAt) {
				latest = in
			}
			switch in.State {
			case job.Completed:
				if in.Attempt != 1 {
					t.Errorf("tick %s completed at attempt %d, want 1: a manager without the kind must not use an attempt", in.UniqueKey, in.Attempt)
				}
			case job.Canceled:
			case job.Scheduled:
				if in.RunAt.Before(last.Add(-time.Second)) {
					t.Errorf("tick %s is still scheduled, but it was due before the last unregister", in.UniqueKey)
				}
			default:
				t.Errorf("tick %s ended %v (%v), want Completed or Canceled", in.UniqueKey, in.State, in.Error)
			}
		}
		if latest == nil || latest.State != job.Scheduled || latest.Attempt != 0 || latest.RunAt.Before(last.Add(-time.Second)) {
			t.Errorf("latest tick %v: want the one enqueued before the last unregister, still scheduled and never attempted", latest)
		}
	})
}

// TestRecurringCatchesUpLateWake: a ticker that wakes late (a starved
// process, a paused VM) still schedules the ticks it slept through, as
// long as they are recent enough for the tick's unique key to keep them
// once per cluster; after a long pause it does not flood the queue with
// every tick it missed.
func TestRecurringCatchesUpLateWake(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 22, 12, 0, 0, 300_000_000, time.UTC)
	clk := fakeclock.New(start)
	j := mustJob(t, job.WithKind("tick"), job.WithExecutor(func() {}), job.WithInterval(time.Second))
	m := newManager(t, job.WithClock(clk), job.WithPollInterval(time.Hour), job.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ticks := func() map[time.Time]bool {
		ins, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("tick")))
		if err != nil {
			t.Fatal(err)
		}
		got := map[time.Time]bool{}
		for _, in := range ins {
			got[in.RunAt.UTC()] = true
		}
		return got
	}
	at := func(sec int) time.Time { return time.Date(2026, 11, 22, 12, 0, sec, 0, time.UTC) }
	waitFor(t, "first tick scheduled", func() bool { return ticks()[at(1)] })
	// The ticker sleeps until 12:00:01 and wakes only at 12:00:03.8.
	waitFor(t, "ticker asleep", func() bool { return clk.Timers() > 0 })
	clk.Advance(3500 * time.Millisecond)
	waitFor(t, "ticks 2, 3 and 4 scheduled", func() bool {
		got := ticks()
		return got[at(2)] && got[at(3)] && got[at(4)]
	})
	// A pause far longer than the ticks' hold: no flood of old ticks.
	before := len(ticks())
	waitFor(t, "ticker asleep", func() bool { return clk.Timers() > 0 })
	clk.Advance(10 * time.Minute)
	waitFor(t, "a tick after the pause", func() bool {
		for tk := range ticks() {
			if tk.After(clk.Now()) {
				return true
			}
		}
		return false
	})
	if added := len(ticks()) - before; added > 3 {
		t.Errorf("%d ticks scheduled after a 10-minute pause, want the next one or two, not every missed tick", added)
	}
}

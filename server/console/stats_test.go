package console_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/server/console"
	"github.com/jobkit/job/store/memdbstore"
)

func TestStatsKeepTheLastHourByMinute(t *testing.T) {
	now := time.Date(2026, 11, 23, 21, 0, 30, 0, time.UTC)
	s := console.NewStatsAt(func() time.Time { return now })
	for i := 1; i <= 100; i++ {
		s.AttemptStarted(job.AttemptStartedEvent{Kind: "k", Wait: time.Duration(i) * time.Millisecond})
		s.AttemptFinished(job.AttemptFinishedEvent{Kind: "k", State: job.Completed, Duration: time.Duration(i) * time.Second})
	}
	s.AttemptFinished(job.AttemptFinishedEvent{Kind: "k", State: job.Scheduled, Retry: true, Duration: time.Second})
	s.AttemptFinished(job.AttemptFinishedEvent{Kind: "k", State: job.Terminated, Duration: time.Second})
	s.AttemptFinished(job.AttemptFinishedEvent{Kind: "k", State: job.Scheduled, HandedBack: true})
	s.AttemptFinished(job.AttemptFinishedEvent{Kind: "k", State: job.Canceled})

	h := s.LastHour()
	if len(h) != 60 {
		t.Fatalf("%d minutes, want 60", len(h))
	}
	last := h[59]
	if !last.Start.Equal(now.Truncate(time.Minute)) {
		t.Errorf("the last minute starts %v, want %v", last.Start, now.Truncate(time.Minute))
	}
	if last.Completed != 100 || last.Failed != 2 {
		t.Errorf("completed %d, failed %d; want 100 and 2 (a retry and a termination; not the hand-back or the cancel)", last.Completed, last.Failed)
	}
	if last.WaitP50 != 50*time.Millisecond || last.WaitP99 != 99*time.Millisecond {
		t.Errorf("wait p50 %v p99 %v, want 50ms and 99ms", last.WaitP50, last.WaitP99)
	}
	if last.RunP99 != 99*time.Second {
		t.Errorf("run p99 %v, want 99s", last.RunP99)
	}

	now = now.Add(5 * time.Minute)
	if h := s.LastHour(); h[54].Completed != 100 || h[59].Completed != 0 {
		t.Errorf("5 minutes on: minute -5 has %d, this minute %d; want 100 and 0", h[54].Completed, h[59].Completed)
	}
	now = now.Add(55 * time.Minute)
	for i, m := range s.LastHour() {
		if m.Completed != 0 || m.Failed != 0 || m.RunP50 != 0 {
			t.Fatalf("an hour on, minute %d still holds %+v", i, m)
		}
	}
	s.AttemptFinished(job.AttemptFinishedEvent{Kind: "k", State: job.Completed})
	if h := s.LastHour(); h[59].Completed != 1 {
		t.Errorf("the reused bucket holds %d completed, want 1 (its old minute dropped)", h[59].Completed)
	}
}

func TestStatsBoundTheirSamples(t *testing.T) {
	now := time.Date(2026, 11, 23, 21, 0, 0, 0, time.UTC)
	s := console.NewStatsAt(func() time.Time { return now })
	for i := range 100_000 {
		s.AttemptFinished(job.AttemptFinishedEvent{Kind: "k", State: job.Completed, Duration: time.Duration(i%1000) * time.Millisecond})
	}
	last := s.LastHour()[59]
	if last.Completed != 100_000 {
		t.Fatalf("completed %d", last.Completed)
	}
	// A uniform sample of 0..999 ms: p50 near 500 ms, p99 near 990 ms.
	if last.RunP50 < 400*time.Millisecond || last.RunP50 > 600*time.Millisecond || last.RunP99 < 950*time.Millisecond {
		t.Errorf("run p50 %v p99 %v from a bounded sample of 0..999 ms", last.RunP50, last.RunP99)
	}
}

// TestStatsFollowCountsTheClustersAttempts: a Stats that follows the change
// feed through a manager that runs nothing counts the attempts another
// manager on the same store ran: completed, failed (a retried failure and
// a final one), with their run times and wait times (from the events'
// ready times); as that manager's observer too, it counts none twice.
func TestStatsFollowCountsTheClustersAttempts(t *testing.T) {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stats := console.NewStats()
	watcher, err := job.NewManager(job.WithStore(st), job.WithWorkers(0))
	if err != nil {
		t.Fatal(err)
	}
	followed := make(chan error, 1)
	go func() { followed <- stats.Follow(ctx, watcher) }()

	worker, err := job.NewManager(job.WithStore(st), job.WithWorkers(2), job.WithObserver(stats))
	if err != nil {
		t.Fatal(err)
	}
	var once atomic.Bool
	for _, j := range []struct {
		kind string
		run  func() error
	}{
		{"ok", func() error { return nil }},
		{"bad", func() error { return job.Permanent(errors.New("no")) }},
		{"flaky", func() error {
			if once.CompareAndSwap(false, true) {
				return errors.New("first time")
			}
			return nil
		}},
	} {
		jj, err := job.NewJob(job.WithKind(j.kind), job.WithExecutor(j.run), job.WithBackoff(job.ConstantBackoff(time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		if err := worker.RegisterJob(jj); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-stats.Following():
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not open its feed within 10 s")
	}
	if err := worker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = worker.Stop(sctx)
	}()
	total := func() (completed, failed, runs int64, wait99 time.Duration) {
		for _, m := range stats.LastHour() {
			completed += m.Completed
			failed += m.Failed
			if m.RunP50 > 0 {
				runs++
			}
			wait99 = max(wait99, m.WaitP99)
		}
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range []string{"ok", "ok", "bad", "flaky"} {
		var opts []job.ScheduleOption
		if k == "bad" { // ready for 30 s already: its wait is 30 s
			opts = append(opts, job.WithScheduleAt(time.Now().Add(-30*time.Second)))
		}
		if _, err := worker.ScheduleJob(ctx, k, opts...); err != nil {
			t.Fatal(err)
		}
	}
	const want = 3 // two ok, flaky's second attempt
	// The wait is the claim's time minus RunAt; a claimer may stamp its
	// claim with a time read a moment before this test read time.Now for
	// RunAt (seen: 29.999997 s), so allow a millisecond.
	const waited = 30*time.Second - time.Millisecond
	for {
		c, f, runs, wait99 := total()
		if c == want && f == 2 && runs > 0 && wait99 >= waited {
			if wait99 > 40*time.Second {
				t.Fatalf("wait p99 %v, want the 30 s the instance waited", wait99)
			}
			break
		}
		if c > want || f > 2 || time.Now().After(deadline) {
			t.Fatalf("counted %d completed and %d failed (run times in %d minutes; wait p99 %v), want %d and 2 (and 30 s)", c, f, runs, wait99, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-followed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow returned %v, want context.Canceled", err)
	}
}

// TestStatsFollowSamplesTheLag: a following Stats samples the store's lag
// (the oldest ready instance of any queue, whoever enqueued it) into the
// minute's bucket, keeping the largest sample.
func TestStatsFollowSamplesTheLag(t *testing.T) {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stats := console.NewStats()
	stats.SetLagEvery(20 * time.Millisecond)
	watcher, err := job.NewManager(job.WithStore(st), job.WithWorkers(0))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = stats.Follow(ctx, watcher) }()
	// Another node enqueues an instance that has been ready for 90 s;
	// nobody runs it.
	other, err := job.NewManager(job.WithStore(st), job.WithWorkers(0))
	if err != nil {
		t.Fatal(err)
	}
	jj, err := job.NewJob(job.WithKind("late"), job.WithExecutor(func() error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.RegisterJob(jj); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ScheduleJob(ctx, "late", job.WithScheduleAt(time.Now().Add(-90*time.Second))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h := stats.LastHour()
		if lag := h[len(h)-1].Lag; lag >= 90*time.Second && lag < 100*time.Second {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the minute's lag is %v after 10 s, want about 90 s", lag)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

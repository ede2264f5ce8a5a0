package job_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/fakeclock"
)

// A user's unique key never collides with a recurring tick's key: before,
// a user key spelled like a tick's ("jobkit:tick:<kind>:<nanos>") held
// that tick's place and the tick was never scheduled.
func TestUserUniqueKeyCannotTakeATick(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 22, 12, 0, 30, 0, time.UTC)
	clk := fakeclock.New(start)
	tick := time.Date(2026, 11, 22, 12, 1, 0, 0, time.UTC) // the next minute
	rec := mustJob(t, job.WithKind("rec"), job.WithInterval(time.Minute), job.WithExecutor(func() {}))
	m := newManager(t, job.WithClock(clk), job.WithPollInterval(time.Hour))
	if err := m.RegisterJob(rec); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := fmt.Sprintf("jobkit:tick:rec:%d", tick.UnixNano())
	mine, err := m.ScheduleJob(ctx, "rec", job.WithScheduleAt(tick.Add(time.Hour)), job.WithUniqueKey(key, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if mine.UniqueKey != key {
		t.Fatalf("UniqueKey() = %q, want the key given, %q", mine.UniqueKey, key)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the tick at "+tick.String()+" scheduled", func() bool {
		got, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("rec")))
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range got {
			if in.ID != mine.ID && in.RunAt.Equal(tick) {
				return true
			}
		}
		return false
	})
}

// Wait tells pending work from recurring ticks by what the ticks are, not
// by a key prefix a user key can have too: before, a future instance whose
// user key started with "jobkit:tick:" was taken for a tick, and Wait
// returned while it was pending.
func TestWaitDoesNotTakeAUserKeyForATick(t *testing.T) {
	t.Parallel()
	m := newManager(t, job.WithPollInterval(20*time.Millisecond))
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := m.ScheduleJob(ctx, "k", job.WithScheduleAfter(time.Hour), job.WithUniqueKey("jobkit:tick:k:1", time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := m.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with an instance pending for an hour: %v, want context.DeadlineExceeded", err)
	}
}

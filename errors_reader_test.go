package job_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// The errors of issue 33 item 6, as a Go caller reads them: each names
// what it is about once and the fix that fits a Go caller once.

// TestDuplicateUniqueKeyError: the user's key (not the stored "u:k1"),
// the holder once, when it is released, and the fix.
func TestDuplicateUniqueKeyError(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	holder, err := m.ScheduleJob(ctx, "k", job.WithUniqueKey("k1", time.Hour), job.WithScheduleAfter(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.ScheduleJob(ctx, "k", job.WithUniqueKey("k1", time.Hour))
	if !errors.Is(err, job.ErrDuplicate) || got == nil || got.ID != holder.ID {
		t.Fatalf("duplicate: %v, %v", got, err)
	}
	want := fmt.Sprintf(`job: schedule "k": unique key "k1" is held by instance %s until %s; use another unique key, or wait until it is released`,
		holder.ID, holder.UniqueUntil.UTC().Format(time.RFC3339))
	if err.Error() != want {
		t.Errorf("duplicate:\n got %s\nwant %s", err, want)
	}
}

// TestRetryAndCancelErrors: the instance ID once, its state, and one fix.
func TestRetryAndCancelErrors(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ji, err := m.ScheduleJob(ctx, "k", job.WithScheduleAfter(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.RetryInstance(ctx, ji.ID)
	if want := "job: retry " + ji.ID + ": the instance is scheduled, not finished; cancel it first, or wait for it to finish"; !errors.Is(err, job.ErrNotFinished) || err.Error() != want {
		t.Errorf("retry of a scheduled instance:\n got %v\nwant %s", err, want)
	}
	if _, err := m.CancelInstance(ctx, ji.ID); err != nil {
		t.Fatal(err)
	}
	_, err = m.CancelInstance(ctx, ji.ID)
	if want := "job: cancel " + ji.ID + ": the instance is canceled already: there is nothing to cancel"; !errors.Is(err, job.ErrFinished) || err.Error() != want {
		t.Errorf("cancel of a canceled instance:\n got %v\nwant %s", err, want)
	}
	const nope = "0194c6a0-0000-7000-8000-000000000000"
	for _, op := range []string{"retry", "cancel"} {
		var err error
		if op == "retry" {
			_, err = m.RetryInstance(ctx, nope)
		} else {
			_, err = m.CancelInstance(ctx, nope)
		}
		if want := "job: " + op + " " + nope + ": no such instance"; !errors.Is(err, store.ErrNotFound) || err.Error() != want {
			t.Errorf("%s of no instance:\n got %v\nwant %s", op, err, want)
		}
	}
}

// TestUnknownKindError names the Go fix: RegisterJob or PutDefinition.
func TestUnknownKindError(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	_, err := m.ScheduleJob(context.Background(), "nosuch")
	want := `job: schedule "nosuch": unknown kind "nosuch": the store holds no definition of it and this node does not register it (it registers k); register it with Manager.RegisterJob, or store a definition of it with Manager.PutDefinition`
	if !errors.Is(err, job.ErrUnknownKind) || err.Error() != want {
		t.Errorf("unknown kind:\n got %v\nwant %s", err, want)
	}
}

// TestQueuePausedExplanation names Manager.ResumeQueue.
func TestQueuePausedExplanation(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Admin().PauseQueue(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := m.ExplainWaiting(ctx, ji.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := `queue "default" is paused; resume it with Manager.ResumeQueue to run its instances`; ex.Reason != job.WaitQueuePaused || ex.Message != want {
		t.Errorf("paused queue: %s %q, want %s %q", ex.Reason, ex.Message, job.WaitQueuePaused, want)
	}
}

package job_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobkit/job"
)

// TestPolicyOptionsOnJobAndSchedule: WithPriority, WithMaxRetries,
// WithTimeout and WithQueue set a job's defaults on NewJob and override
// them on one ScheduleJob call, under one name each.
func TestPolicyOptionsOnJobAndSchedule(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	policy := []job.PolicyOption{
		job.WithQueue("mail"), job.WithPriority(job.LowPriority), job.WithMaxRetries(1), job.WithTimeout(time.Minute),
	}
	opts := []job.JobOption{job.WithKind("k"), job.WithExecutor(func() {})}
	for _, p := range policy {
		opts = append(opts, p)
	}
	if err := m.RegisterJob(mustJob(t, opts...)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	def, err := m.ScheduleJob(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if def.Queue != "mail" || def.Priority != job.LowPriority || def.MaxRetries != 1 || def.Timeout != time.Minute {
		t.Errorf("job defaults: queue %q priority %d retries %d timeout %v; want mail, %d, 1, 1m",
			def.Queue, def.Priority, def.MaxRetries, def.Timeout, job.LowPriority)
	}
	over, err := m.ScheduleJob(ctx, "k", job.WithQueue("urgent"), job.WithPriority(job.HighPriority),
		job.WithMaxRetries(job.RetryForever), job.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if over.Queue != "urgent" || over.Priority != job.HighPriority || over.MaxRetries != job.RetryForever || over.Timeout != 2*time.Second {
		t.Errorf("overrides: queue %q priority %d retries %d timeout %v; want urgent, %d, %d, 2s",
			over.Queue, over.Priority, over.MaxRetries, over.Timeout, job.HighPriority, job.RetryForever)
	}
	// The overrides reached the store, not only the returned snapshot.
	got, err := m.GetInstance(ctx, over.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Queue != "urgent" || got.Priority != job.HighPriority || got.Timeout != 2*time.Second {
		t.Errorf("stored: queue %q priority %d timeout %v", got.Queue, got.Priority, got.Timeout)
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	exec := job.WithExecutor(func() {})
	for name, opt := range map[string]job.JobOption{
		"zero PolicyOption": job.PolicyOption{},
		"empty queue":       job.WithQueue(""),
		"negative retries":  job.WithMaxRetries(-2),
		"nil option":        nil,
	} {
		_, err := job.NewJob(job.WithKind("k"), exec, opt)
		if !errors.Is(err, job.ErrInvalidJob) {
			t.Errorf("NewJob with %s: %v, want ErrInvalidJob", name, err)
		}
	}
	m := newManager(t)
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), exec)); err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]job.ScheduleOption{
		"zero PolicyOption": job.PolicyOption{},
		"empty queue":       job.WithQueue(""),
		"negative timeout":  job.WithTimeout(-time.Second),
		"nil option":        nil,
	} {
		if _, err := m.ScheduleJob(context.Background(), "k", opt); !errors.Is(err, job.ErrInvalidOption) {
			t.Errorf("ScheduleJob with %s: %v, want ErrInvalidOption", name, err)
		}
	}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	b := job.DefaultBackoff()
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 30: 10 * time.Minute} {
		if d := b(attempt); d < want/2 || d > want {
			t.Errorf("DefaultBackoff()(%d) = %v, want in [%v, %v]", attempt, d, want/2, want)
		}
	}
}

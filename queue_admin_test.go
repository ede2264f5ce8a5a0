package job_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jobkit/job"
)

// A paused queue's instances wait while other queues run; resuming runs
// them. Scheduling into a paused queue works, and ListQueues shows the
// flag, also for a queue created by pausing it.
func TestPauseResumeQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memStore(t)
	m := newManager(t, job.WithStore(s), job.WithQueues("held", "free"), job.WithWorkers(2))
	ran := make(chan string, 4)
	if err := m.RegisterJob(mustJob(t, job.WithKind("note"), job.WithExecutor(func(s string) { ran <- s }))); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Admin().PauseQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if err := m.Admin().PauseQueue(ctx, "never-used"); err != nil {
		t.Fatal(err)
	}
	held, err := m.ScheduleJob(ctx, "note", job.WithArguments("held"), job.WithQueue("held"))
	if err != nil {
		t.Fatalf("scheduling into a paused queue: %v", err)
	}
	if _, err := m.ScheduleJob(ctx, "note", job.WithArguments("free"), job.WithQueue("free")); err != nil {
		t.Fatal(err)
	}
	// The free queue's instance was scheduled after the held one and runs
	// first: by then the held one has been passed over by the claimer.
	if got := <-ran; got != "free" {
		t.Fatalf("first run %q, want the free queue's", got)
	}
	waitFor(t, "the free instance to finish", func() bool {
		c, _ := m.Admin().CountInstances(ctx, "free", "")
		return len(c) == 1 && c[0].States[job.Completed] == 1
	})
	if in, err := m.GetInstance(ctx, held.ID); err != nil || in.State != job.Scheduled {
		t.Fatalf("held instance %v (%v), want scheduled while its queue is paused", in, err)
	}
	qs, err := m.Admin().ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []job.QueueInfo{{Name: "free"}, {Name: "held", Paused: true}, {Name: "never-used", Paused: true}}
	if len(qs) != len(want) {
		t.Fatalf("ListQueues = %+v, want %+v", qs, want)
	}
	for i := range want {
		if qs[i] != want[i] {
			t.Fatalf("ListQueues = %+v, want %+v", qs, want)
		}
	}
	if err := m.Admin().ResumeQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if got := <-ran; got != "held" {
		t.Fatalf("after resume ran %q, want held", got)
	}
	if err := m.Admin().PauseQueue(ctx, ""); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("PauseQueue(\"\") = %v, want ErrInvalidOption", err)
	}
}

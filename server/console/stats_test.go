package console_test

import (
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/server/console"
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

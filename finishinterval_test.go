package job_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// finishCalls is a memdb store that records when each Finish call came
// and how many outcomes it carried.
type finishCalls struct {
	store.Store
	mu    sync.Mutex
	calls []finishCall
}

type finishCall struct {
	at time.Time
	n  int
}

func (s *finishCalls) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	s.mu.Lock()
	s.calls = append(s.calls, finishCall{at: time.Now(), n: len(p.Outcomes)})
	s.mu.Unlock()
	return s.Store.Finish(ctx, p)
}

func (s *finishCalls) took() []finishCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]finishCall(nil), s.calls...)
}

// steadyRun runs n jobs on a manager over s, one every gap, each ending
// at once while no other runs (a low steady rate), and returns when each
// executor returned.
func steadyRun(t *testing.T, m *job.Manager, n int, gap time.Duration) []time.Time {
	t.Helper()
	ctx := context.Background()
	var ends []time.Time
	for range n {
		if _, err := m.ScheduleJob(ctx, "quick"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ends = append(ends, time.Now())
		time.Sleep(gap) // the rate, on the bubble's clock
	}
	return ends
}

// At a low steady rate, where each job ends while no other runs (the
// linger never applies), the outcomes are written at most one call per
// finish interval, several per call; the first after a quiet spell and a
// drain's are written at once; no worker waits for it.
func TestFinishInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opts     []job.ManagerOption
		interval time.Duration
	}{
		{"default", nil, job.DefaultFinishInterval},
		{"200ms", []job.ManagerOption{job.WithFinishInterval(200 * time.Millisecond)}, 200 * time.Millisecond},
		{"0", []job.ManagerOption{job.WithFinishInterval(0)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := &finishCalls{Store: newMemdb(t)}
				m := newManager(t, append([]job.ManagerOption{job.WithStore(s), job.WithWorkers(4), job.WithLogger(quietLogger())}, tc.opts...)...)
				var ran atomic.Int64
				if err := m.RegisterJob(mustJob(t, job.WithKind("quick"), job.WithExecutor(func() { ran.Add(1) }))); err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if err := m.Start(ctx); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = m.Stop(ctx) }()

				const n, gap = 40, 10 * time.Millisecond
				ends := steadyRun(t, m, n, gap)
				if got := ran.Load(); got != n {
					t.Fatalf("%d jobs ran, want %d (each started while the last outcomes were held)", got, n)
				}
				calls := s.took()
				got := 0
				for i, c := range calls {
					got += c.n
					if i > 0 && c.at.Sub(calls[i-1].at) < tc.interval {
						t.Errorf("Finish call %d came %v after the one before, want at least the interval %v", i, c.at.Sub(calls[i-1].at), tc.interval)
					}
				}
				if calls[0].at != ends[0] {
					t.Errorf("the first outcome was written %v after its executor returned, want at once", calls[0].at.Sub(ends[0]))
				}
				if err := m.Wait(ctx); err != nil {
					t.Fatal(err)
				}
				calls = s.took()
				got = 0
				for _, c := range calls {
					got += c.n
				}
				if got != n {
					t.Fatalf("Finish calls carried %d outcomes after Wait, want %d", got, n)
				}
				if want := int(n*gap/max(tc.interval, gap)) + 2; len(calls) > want {
					t.Errorf("%d Finish calls for %d jobs %v apart, want at most %d (interval %v)", len(calls), n, gap, want, tc.interval)
				}
				if tc.interval > 0 && len(calls) >= n/2 {
					t.Errorf("%d Finish calls for %d jobs, want several outcomes per call", len(calls), n)
				}
				// Wait wrote what was held at once (Wait looks again every
				// 20 ms at most, so a held outcome would show as a later
				// call).
				if last := calls[len(calls)-1].at; last.Sub(ends[n-1]) > gap+time.Millisecond {
					t.Errorf("the last outcome was written %v after its executor returned, want at the drain (%v)", last.Sub(ends[n-1]), gap)
				}

				// After a quiet spell, a lone outcome is written at once.
				time.Sleep(2 * max(tc.interval, gap))
				before := len(calls)
				lone := steadyRun(t, m, 1, 0)
				calls = s.took()
				if len(calls) != before+1 || calls[before].at != lone[0] {
					t.Errorf("after a quiet spell a lone outcome was not written at once: %d calls (want %d), the last %v after its executor returned",
						len(calls), before+1, calls[len(calls)-1].at.Sub(lone[0]))
				}
			})
		})
	}
}

package job_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// finishTimes is a memdb store that records when each instance's outcome
// reached Finish.
type finishTimes struct {
	store.Store
	mu sync.Mutex
	at map[string]time.Time
}

func newFinishTimes(t *testing.T) *finishTimes {
	return &finishTimes{Store: newMemdb(t), at: map[string]time.Time{}}
}

func (s *finishTimes) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	s.mu.Lock()
	for _, o := range p.Outcomes {
		s.at[o.ID] = time.Now()
	}
	s.mu.Unlock()
	return s.Store.Finish(ctx, p)
}

func (s *finishTimes) finishedAt(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[id]
}

// lingerRun runs, on a manager over s with opts, a "block" job that runs
// until released and, while it runs, a "quick" one. It returns how long
// quick's outcome waited for its Finish call (the finish linger in
// effect: another attempt still runs). Then twice more a quick one beside
// a block one, block released while quick's outcome may be lingering:
// once followed by Wait (a drain), once by Stop called before the
// release. It returns how long each of those outcomes waited after block
// ended, and how long Wait and Stop took after it.
func lingerRun(t *testing.T, s *finishTimes, opts ...job.ManagerOption) (quickWait time.Duration, drain, stop [2]time.Duration) {
	t.Helper()
	release, blockStarted, quickDone := make(chan struct{}), make(chan struct{}, 1), make(chan time.Time, 1)
	m := newManager(t, append([]job.ManagerOption{job.WithStore(s), job.WithWorkers(2), job.WithLogger(quietLogger())}, opts...)...)
	for _, j := range []*job.Job{
		mustJob(t, job.WithKind("block"), job.WithExecutor(func() { blockStarted <- struct{}{}; <-release })),
		mustJob(t, job.WithKind("quick"), job.WithExecutor(func() { quickDone <- time.Now() })),
	} {
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// blockAndQuick runs block, then quick beside it, and returns quick's
	// ID once its executor returned and the manager is idle (lingering).
	blockAndQuick := func() (string, time.Time) {
		t.Helper()
		if _, err := m.ScheduleJob(ctx, "block"); err != nil {
			t.Fatal(err)
		}
		<-blockStarted
		q, err := m.ScheduleJob(ctx, "quick")
		if err != nil {
			t.Fatal(err)
		}
		done := <-quickDone
		synctest.Wait()
		return q.ID, done
	}
	written := func(id string) time.Time {
		t.Helper()
		at := s.finishedAt(id)
		if at.IsZero() {
			t.Fatal("quick's outcome was not written")
		}
		return at
	}

	id, done := blockAndQuick()
	// Longer than any linger: an outcome still held now would be held by
	// something else than the linger.
	time.Sleep(2 * time.Second)
	synctest.Wait()
	quickWait = written(id).Sub(done)
	release <- struct{}{}

	// A drain: block ends, Wait returns.
	id, _ = blockAndQuick()
	release <- struct{}{}
	end := time.Now()
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	drain = [2]time.Duration{written(id).Sub(end), time.Since(end)}

	// Stop while block runs, then block ends.
	id, _ = blockAndQuick()
	stopped := make(chan error, 1)
	go func() { stopped <- m.Stop(ctx) }()
	synctest.Wait()
	release <- struct{}{}
	end = time.Now()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	stop = [2]time.Duration{written(id).Sub(end), time.Since(end)}
	return quickWait, drain, stop
}

// The finish linger holds an outcome while another attempt of the
// manager runs, for exactly the linger (the default's too), and never
// past the end of the last running attempt: neither a drain (Wait) nor
// Stop waits for it.
func TestFinishLinger(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []job.ManagerOption
		want time.Duration
	}{
		{"default", nil, job.DefaultFinishLinger},
		{"20ms", []job.ManagerOption{job.WithFinishLinger(20 * time.Millisecond)}, 20 * time.Millisecond},
		{"1s", []job.ManagerOption{job.WithFinishLinger(time.Second)}, time.Second},
		{"0", []job.ManagerOption{job.WithFinishLinger(0)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				quickWait, drain, stop := lingerRun(t, newFinishTimes(t), tc.opts...)
				if quickWait != tc.want {
					t.Errorf("an outcome waited %v for its Finish call while another attempt ran, want the linger %v", quickWait, tc.want)
				}
				// Wait looks again every 20 ms at most.
				if drain[0] != 0 || drain[1] > 20*time.Millisecond {
					t.Errorf("drain: the last attempt ended, then the lingering outcome waited %v and Wait returned after %v, want at once (linger %v)",
						drain[0], drain[1], tc.want)
				}
				if stop[0] != 0 || stop[1] != 0 {
					t.Errorf("Stop: the last attempt ended, then the lingering outcome waited %v and Stop returned after %v, want at once (linger %v)",
						stop[0], stop[1], tc.want)
				}
			})
		})
	}
}

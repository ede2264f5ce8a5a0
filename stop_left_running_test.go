package job_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// leaveFails fails the first n heartbeats that record the node leaving
// (a timeout, a dropped connection), and passes every other call.
type leaveFails struct {
	store.Store
	mu sync.Mutex
	n  int
}

func (s *leaveFails) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if p.Leaving {
		s.mu.Lock()
		fail := s.n > 0
		s.n--
		s.mu.Unlock()
		if fail {
			return nil, errors.New("heartbeat timed out")
		}
	}
	return s.Store.Heartbeat(ctx, p)
}

func (s *leaveFails) Subscribe(ctx context.Context, q string) (<-chan struct{}, error) {
	return s.Store.(store.Notifier).Subscribe(ctx, q)
}

// TestStopLeftRunningNotRunTwice: Stop's ctx ends while an executor
// ignores its cancel, so Stop leaves it running with its lease, which it
// no longer renews; the instance must not run elsewhere before that lease
// lapses. Stop then records that the node left, so that no other node
// declares it dead and rescues what it still runs. When that one write
// failed (the store busy for a moment), the node was declared dead a
// second later and another node ran the instance alongside the executor
// still running, long before its lease lapsed. Stop now retries the
// write, as heartbeats are retried, until the node could be declared
// dead.
func TestStopLeftRunningNotRunTwice(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem := newMemdb(t)
		var ov overlap
		newJob := func() *job.Job {
			return mustJob(t, job.WithKind("k"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
				ov.enter(ji.Info().ID)
				defer ov.leave(ji.Info().ID)
				time.Sleep(20 * time.Second) // ignores its context
				return nil
			}))
		}
		a := newManager(t, job.WithStore(&leaveFails{Store: mem, n: 1}), job.WithNodeID("a"), job.WithLease(30*time.Second), job.WithLogger(quietLogger()))
		b := newManager(t, job.WithStore(mem), job.WithNodeID("b"), job.WithLease(30*time.Second), job.WithLogger(quietLogger()))
		for _, m := range []*job.Manager{a, b} {
			if err := m.RegisterJob(newJob()); err != nil {
				t.Fatal(err)
			}
		}
		ctx := context.Background()
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ji, err := a.ScheduleJob(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if _, runs := ov.stats(); runs != 1 {
			t.Fatalf("%d runs before Stop, want a's one", runs)
		}
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := a.Stop(sctx); err == nil {
			t.Fatal("Stop returned nil with an executor left running")
		}
		// a's executor runs until 21 s, its lease until about 31 s.
		time.Sleep(25 * time.Second)
		synctest.Wait()
		if peak, runs := ov.stats(); peak != 1 {
			t.Errorf("the instance ran %d times at once (%d runs): another node ran it while a's executor still ran, before its lease lapsed", peak, runs)
		}
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Minute)
		defer wcancel()
		if err := b.Wait(wctx); err != nil {
			t.Fatal(err)
		}
		if got := stateOf(t, b, ji.ID); got.State != job.Completed || got.Attempt != 2 {
			t.Errorf("%v attempt %d, want Completed attempt 2 (rescued once a's lease lapsed)", got.State, got.Attempt)
		}
	})
}

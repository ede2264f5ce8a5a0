package job_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// cutStore fails every call a manager makes while cut, as a partition
// between that manager and the store does.
type cutStore struct {
	store.Store
	cut atomic.Bool
}

var errCut = errors.New("partitioned from the store")

func (s *cutStore) err() error {
	if s.cut.Load() {
		return errCut
	}
	return nil
}

func (s *cutStore) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.Store.Heartbeat(ctx, p)
}

func (s *cutStore) RescueNodes(ctx context.Context, p *store.RescueNodesParams) (*store.RescueNodesResult, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.Store.RescueNodes(ctx, p)
}

func (s *cutStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.Store.Claim(ctx, p)
}

func (s *cutStore) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.Store.Renew(ctx, p)
}

func (s *cutStore) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.Store.Finish(ctx, p)
}

func (s *cutStore) Rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.Store.Rescue(ctx, p)
}

func (s *cutStore) Subscribe(ctx context.Context, q string) (<-chan struct{}, error) {
	return s.Store.(store.Notifier).Subscribe(ctx, q)
}

// sleepJob registers on m a job whose executor runs d unless its context
// ends first, counting overlapping runs in ov and completed ones in done.
func sleepJob(t *testing.T, m *job.Manager, ov *overlap, d time.Duration, done *sync.Map) {
	t.Helper()
	j := mustJob(t, job.WithKind("work"), job.WithMaxRetries(job.RetryForever), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
		ov.enter(ji.Info().ID)
		defer ov.leave(ji.Info().ID)
		select {
		case <-time.After(d):
			if done != nil {
				done.Store(ji.Info().ID, true)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
}

// TestNodeRegistry checks that a running manager is listed live with what
// it runs, knows its clock skew, and is listed as left after Stop.
func TestNodeRegistry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemdb(t)
		m, err := job.NewManager(job.WithStore(s), job.WithNodeID("n1"), job.WithWorkers(3), job.WithQueues("a", "b"), job.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		sleepJob(t, m, &overlap{}, time.Second, nil)
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(job.DefaultHeartbeatInterval)
		ns, err := m.Admin().ListNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ns) != 1 || ns[0].ID != "n1" || ns[0].Status != store.NodeLive || ns[0].Workers != 3 ||
			len(ns[0].Kinds) != 1 || ns[0].Kinds[0] != "work" || len(ns[0].Queues) != 2 || ns[0].Version != job.Version || ns[0].Started.IsZero() {
			t.Fatalf("ListNodes = %+v, want n1 live with 3 workers, kind work, queues a and b, version and start time", ns[0])
		}
		h := m.Health()
		if !h.SkewKnown || h.ClockSkew != 0 || h.Skewed || h.Fenced || h.LastHeartbeat.IsZero() {
			t.Errorf("Health = %+v, want a known zero skew, neither skewed nor fenced", h)
		}
		if err := m.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		ns, err = s.ListNodes(ctx, &store.ListNodesParams{Now: time.Now(), DeadAfter: time.Second})
		if err != nil || len(ns) != 1 || ns[0].Status != store.NodeLeft {
			t.Fatalf("after Stop: %v %v, want n1 left", ns, err)
		}
	})
}

// TestFenceBeforeRescue cuts a manager off the store while it runs jobs
// that last 10 s: it cancels them within its fence window (half the dead
// threshold), before the other manager declares it dead (the threshold)
// and runs them again, so no job runs twice at once; and every job
// completes, within about a second of the cut, not the 30 s lease.
func TestFenceBeforeRescue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem := newMemdb(t)
		cs := &cutStore{Store: mem}
		var ov overlap
		var done sync.Map
		a, err := job.NewManager(job.WithStore(cs), job.WithNodeID("a"), job.WithWorkers(20), job.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		b, err := job.NewManager(job.WithStore(mem), job.WithNodeID("b"), job.WithWorkers(20), job.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		sleepJob(t, a, &ov, 10*time.Second, &done)
		sleepJob(t, b, &ov, 10*time.Second, &done)
		ctx := context.Background()
		for range 10 {
			if _, err := a.ScheduleJob(ctx, "work"); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // a claims all ten
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if _, busy := a.Workers(); busy != 10 {
			t.Fatalf("a runs %d jobs, want all 10", busy)
		}
		cut := time.Now()
		cs.cut.Store(true)
		time.Sleep(job.DefaultDeadAfter / 2)
		synctest.Wait()
		if h := a.Health(); !h.Fenced {
			t.Errorf("a is not fenced half the dead threshold after it was cut off: %+v", h)
		}
		if _, busy := a.Workers(); busy != 0 {
			t.Errorf("a still runs %d jobs after fencing, want 0", busy)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := b.Wait(wctx); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(cut); took > 12*time.Second {
			t.Errorf("the jobs of the cut-off node completed %v after the cut, want about the dead threshold plus their 10 s", took)
		}
		n := 0
		done.Range(func(any, any) bool { n++; return true })
		if n != 10 {
			t.Errorf("%d of 10 jobs completed", n)
		}
		if peak, _ := ov.stats(); peak > 1 {
			t.Errorf("a job ran %d times at once, want never twice", peak)
		}
		cs.cut.Store(false)
		for _, m := range []*job.Manager{a, b} {
			if err := m.Stop(ctx); err != nil {
				t.Error(err)
			}
		}
	})
}

// TestFencedHandedBack cuts a lone manager off for longer than its fence
// window but shorter than the dead threshold: it cancels its jobs, and once
// it can heartbeat again hands them back and runs them, instead of leaving
// them to their 30 s leases.
func TestFencedHandedBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cs := &cutStore{Store: newMemdb(t)}
		var ov overlap
		var done sync.Map
		m, err := job.NewManager(job.WithStore(cs), job.WithNodeID("a"), job.WithWorkers(10), job.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		sleepJob(t, m, &ov, 3*time.Second, &done)
		ctx := context.Background()
		for range 5 {
			if _, err := m.ScheduleJob(ctx, "work"); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		cs.cut.Store(true)
		time.Sleep(700 * time.Millisecond)
		synctest.Wait()
		if h := m.Health(); !h.Fenced || h.Fences != 1 {
			t.Fatalf("not fenced after 700 ms cut off: %+v", h)
		}
		cs.cut.Store(false)
		restored := time.Now()
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := m.Wait(wctx); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(restored); took > 5*time.Second {
			t.Errorf("fenced jobs completed %v after the store came back, want a rerun of 3 s at once", took)
		}
		n := 0
		done.Range(func(any, any) bool { n++; return true })
		if n != 5 {
			t.Errorf("%d of 5 jobs completed", n)
		}
		if h := m.Health(); h.Fenced {
			t.Errorf("still fenced after the store came back: %+v", h)
		}
		if err := m.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
}

func TestNodeOptionsInvalid(t *testing.T) {
	t.Parallel()
	for _, o := range []job.ManagerOption{
		job.WithHeartbeat(time.Millisecond, time.Second),
		job.WithHeartbeat(300*time.Millisecond, time.Second),
		job.WithMaxClockSkew(0),
	} {
		if _, err := job.NewManager(o); !errors.Is(err, job.ErrInvalidOption) {
			t.Errorf("NewManager: %v, want ErrInvalidOption", err)
		}
	}
}

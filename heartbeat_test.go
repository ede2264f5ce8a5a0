package job_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// slowBeatStore answers heartbeats after delay; with ignoreCtx it also
// ignores the call's ctx, as a store client may. It counts the calls in
// flight and the most there ever were.
type slowBeatStore struct {
	store.Store
	delay     time.Duration
	ignoreCtx bool
	inFlight  atomic.Int32
	most      atomic.Int32
}

func (s *slowBeatStore) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	if s.ignoreCtx {
		time.Sleep(s.delay)
	} else {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Heartbeat(ctx, p)
}

// A store that ignores ctx and takes longer than the heartbeat's deadline
// gets one heartbeat call at a time, not a new one at every retry, and
// Stop still returns.
func TestHeartbeatOneCallInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &slowBeatStore{Store: newMemdb(t), delay: 3 * time.Second, ignoreCtx: true}
		m, err := job.NewManager(job.WithStore(s), job.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second)
		if most := s.most.Load(); most != 1 {
			t.Errorf("at most %d heartbeat calls were in flight at once, want 1", most)
		}
		if h := m.Health(); h.LastHeartbeat.IsZero() {
			t.Errorf("Health = %+v, want the slow heartbeats to have succeeded", h)
		}
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := m.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(s.delay) // a call Stop gave up on ends in the background
	})
}

// A heartbeat whose round trip is too long to measure the clock skew
// leaves the manager idle; it says so in the log and in Health.
func TestHeartbeatTooSlowToMeasureSkew(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// A 3 s lease bounds the skew at 125 ms, so a round trip over
		// 250 ms cannot measure it; 300 ms is within the fence window.
		s := &slowBeatStore{Store: newMemdb(t), delay: 300 * time.Millisecond}
		var logs logBuf
		m, err := job.NewManager(job.WithStore(s), job.WithLease(3*time.Second), job.WithLogger(logs.logger()))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		h := m.Health()
		if h.SkewKnown || h.HeartbeatRTT < 300*time.Millisecond || h.LastHeartbeat.IsZero() {
			t.Errorf("Health = %+v, want heartbeats that succeed with a round trip of 300 ms and no known skew", h)
		}
		if n := logs.count("heartbeat round trip too long to measure the clock skew"); n != 1 {
			t.Errorf("logged the slow round trip %d times, want once:\n%s", n, logs.String())
		}
		if err := m.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// leaveHangs is a store whose Heartbeat recording that the node leaves
// never answers within the hour and ignores its ctx, as a store client
// stuck on a dead connection may.
type leaveHangs struct{ store.Store }

func (s leaveHangs) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if p.Leaving {
		time.Sleep(time.Hour)
	}
	return s.Store.Heartbeat(ctx, p)
}

// Stop does not wait for a store that ignores ctx while it records that
// the node left: it returns by its ctx's deadline (plus the registry
// write's own second), as it does for heartbeats.
func TestStopLeaveIgnoringCtxReturns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m, err := job.NewManager(job.WithStore(leaveHangs{newMemdb(t)}), job.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		_ = m.Stop(stopCtx)
		if took := time.Since(start); took > 6*time.Second {
			t.Fatalf("Stop took %v with a store that never answered the leave, want at most its ctx's 5 s and the write's 1 s", took)
		}
		time.Sleep(time.Hour) // the call given up on ends in the background
	})
}

package job_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// startLog records when executors of a kind start.
type startLog struct {
	mu     sync.Mutex
	starts []time.Time
}

func (s *startLog) run(context.Context) error {
	s.mu.Lock()
	s.starts = append(s.starts, time.Now())
	s.mu.Unlock()
	return nil
}

func (s *startLog) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.starts)
}

// A rate limit set from Go holds across managers, and idle workers sleep
// until the claim says it lets the next start: with a poll interval of a
// minute, only RetryAfter wakes them.
func TestRateLimitAcrossManagers(t *testing.T) {
	t.Parallel()
	st := mustMemdb(t)
	admin, err := job.NewManager(job.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	const rate, period, burst, n = 5, 500 * time.Millisecond, 2, 20
	if err := admin.Admin().SetRateLimit(t.Context(), job.RateLimit{Kind: "rated", Rate: rate, Period: period, Burst: burst}); err != nil {
		t.Fatal(err)
	}
	var rated, free startLog
	var ms []*job.Manager
	for i := range 3 {
		m, err := job.NewManager(job.WithStore(st), job.WithWorkers(4), job.WithNodeID(fmt.Sprintf("rate-%d", i)), job.WithPollInterval(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for kind, l := range map[string]*startLog{"rated": &rated, "free": &free} {
			if err := m.RegisterJob(mustJob(t, job.WithKind(kind), job.WithExecutor(l.run))); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
		ms = append(ms, m)
	}
	began := time.Now()
	scheduleN(t, ms[0], "rated", n)
	scheduleN(t, ms[1], "free", n)
	waitFor(t, "every free job started", func() bool { return free.n() == n })
	freeDone := time.Since(began)
	waitFor(t, "every rated job started", func() bool { return rated.n() == n })
	took := time.Since(began)
	least := time.Duration(n-burst-1) * period / rate // 1.7 s
	t.Logf("%d rated jobs started in %v (the limit allows no less than %v); %d free ones in %v", n, took, least, n, freeDone)
	if took < least-50*time.Millisecond {
		t.Errorf("%d jobs started in %v under a limit of %d per %v, burst %d: faster than the %v it allows", n, took, rate, period, burst, least)
	}
	if took > least+3*time.Second {
		t.Errorf("%d jobs started in %v; the limit allows them in %v (workers did not wake when it let the next start)", n, took, least)
	}
	rated.mu.Lock()
	starts := slices.Clone(rated.starts)
	rated.mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	// Over the whole run, no more than the limit (the executors start a
	// little after their claims, so a window is checked whole only).
	if k := len(starts); starts[k-1].Sub(starts[0]) < time.Duration(k-burst-1)*period/rate-50*time.Millisecond {
		t.Errorf("%d starts in %v", k, starts[k-1].Sub(starts[0]))
	}
}

// An executor that returns RateLimited puts its instance back to wait
// until the time it gave, its attempt not counted (a job allowed no
// retry is not failed); with SlowSharedLimit the matching rate limit lets
// nothing start until then, on any handle.
func TestRateLimitedHandsBack(t *testing.T) {
	t.Parallel()
	st := mustMemdb(t)
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	lim := job.RateLimit{Kind: "api", Rate: 100, Period: time.Second, Burst: 10}
	if err := m.Admin().SetRateLimit(t.Context(), lim); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	until := time.Now().Add(time.Hour)
	cause := errors.New("429 Too Many Requests")
	j := mustJob(t, job.WithKind("api"), job.WithMaxRetries(0), job.WithExecutor(func(context.Context) error {
		runs.Add(1)
		return job.RateLimited(until, job.SlowSharedLimit(), job.WithCause(cause))
	}))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	in, err := m.ScheduleJob(t.Context(), "api")
	if err != nil {
		t.Fatal(err)
	}
	var got *job.InstanceInfo
	waitFor(t, "the instance handed back", func() bool {
		got, err = m.GetInstance(t.Context(), in.ID)
		return err == nil && runs.Load() == 1 && got.State == job.Scheduled && got.UpdatedAt.After(got.CreatedAt)
	})
	if got.Attempt != 0 {
		t.Errorf("rate limited instance: attempt %d, want 0 (not counted)", got.Attempt)
	}
	if d := got.RunAt.Sub(until); d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("rate limited instance: RunAt %v, want %v", got.RunAt, until)
	}
	// The shared limit now holds every start of the kind, on any handle.
	st.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{{ID: "other", Kind: "api", Queue: got.Queue, RunAt: time.Unix(0, 0), CreatedAt: time.Unix(0, 0)}}, Now: time.Unix(0, 0)})
	now := time.Now()
	res, err := st.Claim(t.Context(), &store.ClaimParams{Queue: got.Queue, Owner: "probe", Limit: 5, Now: now, LeaseUntil: now.Add(time.Minute),
		RateLimits: []store.RateLimit{{Kind: "api", Rate: 100, Period: time.Second, Burst: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Instances) != 0 || res.RetryAfter < 59*time.Minute {
		t.Fatalf("claim of kind api after SlowSharedLimit for 1h: took %d, RetryAfter %v; want nothing and about 1h", len(res.Instances), res.RetryAfter)
	}
	var ex *job.WaitExplanation
	waitFor(t, "ExplainWaiting to name the rate limit", func() bool {
		ex, err = m.ExplainWaiting(t.Context(), "other")
		if err != nil {
			t.Fatal(err)
		}
		return ex.Reason == job.WaitRateLimit
	})
	t.Logf("ExplainWaiting: %s: %s", ex.Reason, ex.Message)
}

// hideCaps is a store without its optional capabilities.
type hideCaps struct{ store.Store }

// A store that cannot enforce rate limits refuses to set one.
func TestRateLimitUnsupported(t *testing.T) {
	t.Parallel()
	m, err := job.NewManager(job.WithStore(hideCaps{mustMemdb(t)}))
	if err != nil {
		t.Fatal(err)
	}
	err = m.Admin().SetRateLimit(t.Context(), job.RateLimit{Kind: "k", Rate: 1, Period: time.Second})
	if !errors.Is(err, job.ErrRateLimitsUnsupported) {
		t.Fatalf("SetRateLimit on a store that cannot enforce it: %v, want ErrRateLimitsUnsupported", err)
	}
	m2, err := job.NewManager(job.WithStore(mustMemdb(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Admin().SetRateLimit(t.Context(), job.RateLimit{Kind: "k", Rate: 0, Period: time.Second}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("SetRateLimit with rate 0: %v, want ErrInvalid", err)
	}
	if err := m2.Admin().DeleteRateLimit(t.Context(), "k", ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteRateLimit of none: %v, want ErrNotFound", err)
	}
}

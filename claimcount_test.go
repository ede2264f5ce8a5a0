package job_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// claimCounter counts the claims made on a real store, keeping its
// wake-ups (store.Notifier).
type claimCounter struct {
	store.Store
	claims atomic.Int64
}

func (s *claimCounter) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, p)
}

func (s *claimCounter) Subscribe(ctx context.Context, queue string) (<-chan struct{}, error) {
	return s.Store.(store.Notifier).Subscribe(ctx, queue)
}

// At low rates (one job at a time, idle workers waiting) a job costs one
// claim (issue 39). Before, it cost two to three: the local wake-up of
// the schedule claimed it, the store's notification of the same write
// woke a second claim that found nothing, and so did the worker freed at
// its end.
func TestOneClaimPerJobAtLowRates(t *testing.T) {
	t.Parallel()
	st := &claimCounter{Store: mustMemdb(t)}
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(8), job.WithPollInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	j, err := job.NewJob(job.WithKind("one"), job.WithExecutor(func() { ran.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	waitFor(t, "the claim loop's first claim", func() bool { return st.claims.Load() > 0 })
	base := st.claims.Load()
	const n = 20
	for i := range n {
		if _, err := m.ScheduleJob(ctx, "one"); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := m.Wait(wctx)
		cancel()
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}
	if got := ran.Load(); got != n {
		t.Fatalf("%d runs; want %d", got, n)
	}
	claims := st.claims.Load() - base
	t.Logf("%d claims for %d jobs", claims, n)
	if claims > n+n/4 {
		t.Fatalf("%d claims for %d jobs scheduled one at a time; want at most %d (about one each)", claims, n, n+n/4)
	}
}

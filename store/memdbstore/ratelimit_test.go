package memdbstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// On an injected clock the rate is exact: a limit of 1,000 a second with
// a burst of 10, claimed every 100 µs of store time for 10 s with work to
// spare, starts no more than 1,010 in any second and 10,010 in all (the
// burst, then one a millisecond); RetryAfter is the time to the next
// allowed start, to the microsecond.
func TestRateLimitOnInjectedClock(t *testing.T) {
	var clock atomic.Int64
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock.Store(base.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	s := newStore(t, memdbstore.WithClock(now))
	const n = 12000
	for i := 0; i < n; i += 1000 {
		ins := make([]*store.Instance, 1000)
		for j := range ins {
			ins[j] = &store.Instance{ID: fmt.Sprintf("r%05d", i+j), Kind: "k", Queue: "q", RunAt: base, CreatedAt: base}
		}
		if _, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: ins, Now: base}); err != nil {
			t.Fatal(err)
		}
	}
	lim := store.RateLimit{Kind: "k", Rate: 1000, Period: time.Second, Burst: 10}
	var starts []int64 // store time of each start
	step := 100 * time.Microsecond
	for d := time.Duration(0); d < 10*time.Second; d += step {
		clock.Store(base.Add(d).UnixNano())
		res, err := s.Claim(t.Context(), &store.ClaimParams{Queue: "q", Owner: "w", Limit: 50, Now: base.Add(time.Hour), LeaseUntil: base.Add(2 * time.Hour), RateLimits: []store.RateLimit{lim}})
		if err != nil {
			t.Fatal(err)
		}
		for range res.Instances {
			starts = append(starts, clock.Load())
		}
		if len(res.Instances) == 0 {
			// The next start is allowed at a whole millisecond of the
			// run: RetryAfter says how far that is.
			if want := time.Millisecond - d%time.Millisecond; res.RetryAfter != want {
				t.Fatalf("at %v: claim held back with RetryAfter %v, want %v", d, res.RetryAfter, want)
			}
		}
	}
	worst := 0
	for i := range starts {
		k := 0
		for j := i; j < len(starts) && starts[j] < starts[i]+int64(time.Second); j++ {
			k++
		}
		worst = max(worst, k)
	}
	t.Logf("%d starts in 10s of store time; at most %d in a second", len(starts), worst)
	if worst > lim.Rate+lim.Burst {
		t.Errorf("%d starts in one second; the limit allows %d + %d", worst, lim.Rate, lim.Burst)
	}
	if want := 10*lim.Rate + lim.Burst; len(starts) != want {
		t.Errorf("%d starts in 10 s; want %d (1,000 a second and the burst)", len(starts), want)
	}
}

package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// rateLimitTests pin ClaimParams.RateLimits and ClaimResult.RetryAfter
// (issue 36 items 2 and 3). The rate is counted on the store's clock,
// which the suite cannot set: the checks use a limit so slow that the
// clock does not matter, or real time with deadlines, bounding the
// store's time of each start by the wall clock read before and after the
// claim (a store whose clock is offset from the test's by a constant
// shifts every window alike).
var rateLimitTests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"RateLimitsHold", testRateLimitsHold},
	{"RateLimitsDelay", testRateLimitsDelay},
	{"RateLimitsWindow", testRateLimitsWindow},
	{"RateLimitsInvalid", testRateLimitsInvalid},
}

// rateSetup is setup for a rate limits check: it fails when the store's
// capabilities disagree with the harness, and says whether to go on.
func rateSetup(t *testing.T, h Harness) (*env, bool) {
	t.Helper()
	e := setup(t, h)
	if got := store.EnforcesRateLimits(e.s); got != h.RateLimits {
		t.Fatalf("store.EnforcesRateLimits = %v, Harness.RateLimits = %v; a store that enforces ClaimParams.RateLimits implements store.RateLimitEnforcer and its harness sets RateLimits", got, h.RateLimits)
	}
	if _, ok := e.s.(store.RateLimitDelayer); h.RateLimits && !ok {
		t.Fatalf("the store enforces rate limits but is not a store.RateLimitDelayer")
	}
	return e, h.RateLimits
}

func (e *env) claimRated(s store.Store, queue, owner string, limit int, now time.Time, ls ...store.RateLimit) *store.ClaimResult {
	e.t.Helper()
	res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: queue, Owner: owner, Limit: limit, Now: now, LeaseUntil: now.Add(lease), RateLimits: ls})
	if err != nil {
		e.t.Fatalf("Claim(queue %s, rate limits %v): %v", queue, ls, err)
	}
	if len(res.Instances) > limit {
		e.t.Fatalf("Claim(queue %s, limit %d) returned %d instances", queue, limit, len(res.Instances))
	}
	return res
}

// testRateLimitsHold: a limit of 1 start an hour with a burst of 2 lets 3
// start, then holds the rest of its kind in place (Scheduled, attempt
// not spent) on every handle, says when the next may start, and never
// holds back another kind or a claim that does not pass it.
func testRateLimitsHold(t *testing.T, h Harness) {
	e, ok := rateSetup(t, h)
	if !ok {
		return
	}
	const q = "q-rate"
	var ins []*store.Instance
	for i := range 6 { // kind-a first in claim order
		ins = append(ins, kindInst(fmt.Sprintf("a%d", i), q, "kind-a", time.Duration(i)*time.Millisecond))
	}
	for i := range 2 {
		ins = append(ins, kindInst(fmt.Sprintf("b%d", i), q, "kind-b", time.Duration(10+i)*time.Millisecond))
	}
	e.enqueue(e.s, base, ins...)
	lim := store.RateLimit{Kind: "kind-a", Rate: 1, Period: time.Hour, Burst: 2}
	now := at(time.Second)
	res := e.claimRated(e.s, q, "w1", 2, now, lim)
	if got, want := fmt.Sprint(idsOf(res.Instances)), "[a0 a1]"; got != want {
		t.Fatalf("claim of 2 under a burst of 2 took %s, want %s", got, want)
	}
	if res.RetryAfter != 0 {
		t.Errorf("claim the limit held nothing back from: RetryAfter %v, want 0", res.RetryAfter)
	}
	res = e.claimRated(e.open(), q, "w2", 10, now, lim)
	if got, want := fmt.Sprint(idsOf(res.Instances)), "[a2 b0 b1]"; got != want {
		t.Fatalf("claim on another handle took %s, want %s (the burst's last start, then the other kind)", got, want)
	}
	if res.RetryAfter <= 50*time.Minute || res.RetryAfter > time.Hour {
		t.Errorf("claim that left a3 for the limit: RetryAfter %v, want just under 1h", res.RetryAfter)
	}
	if res.Limited {
		t.Errorf("claim held back by a rate limit alone: Limited true (that speaks of concurrency limits)")
	}
	res = e.claimRated(e.open(), q, "w3", 10, now, lim)
	if len(res.Instances) != 0 || res.RetryAfter <= 50*time.Minute {
		t.Fatalf("claim over the limit took %v (RetryAfter %v), want nothing and RetryAfter near 1h", idsOf(res.Instances), res.RetryAfter)
	}
	for _, id := range []string{"a3", "a4", "a5"} {
		got := e.get(e.s, id)
		if got.State != store.Scheduled || got.Attempt != 0 {
			t.Errorf("%s held by the rate limit: state %v attempt %d, want Scheduled attempt 0", id, got.State, got.Attempt)
		}
	}
	// A claim that does not pass the limit is not held by it, nor is a
	// limit of another queue.
	res = e.claimRated(e.s, q, "w4", 1, now, store.RateLimit{Queue: "other", Rate: 1, Period: time.Hour})
	if got := fmt.Sprint(idsOf(res.Instances)); got != "[a3]" {
		t.Fatalf("claim with a rate limit of another queue took %s, want [a3]", got)
	}
	// A limit of the queue holds every kind in it.
	res = e.claimRated(e.s, q, "w4", 5, now, store.RateLimit{Queue: q, Rate: 1, Period: time.Hour})
	if got := fmt.Sprint(idsOf(res.Instances)); got != "[a4]" || res.RetryAfter <= 50*time.Minute {
		t.Fatalf("claim with a fresh limit of 1 an hour on the queue took %s (RetryAfter %v), want [a4] and RetryAfter near 1h", got, res.RetryAfter)
	}
}

// testRateLimitsDelay: DelayRateLimit pushes a limit's next start back for
// every handle, burst included.
func testRateLimitsDelay(t *testing.T, h Harness) {
	e, ok := rateSetup(t, h)
	if !ok {
		return
	}
	const q = "q-rdelay"
	e.enqueue(e.s, base, kindInst("d0", q, "kind-d", 0), kindInst("d1", q, "kind-d", time.Millisecond))
	lim := store.RateLimit{Kind: "kind-d", Rate: 100, Period: time.Second, Burst: 10}
	if err := e.open().(store.RateLimitDelayer).DelayRateLimit(e.ctx, lim, time.Hour); err != nil {
		t.Fatalf("DelayRateLimit: %v", err)
	}
	res := e.claimRated(e.s, q, "w1", 5, at(time.Second), lim)
	if len(res.Instances) != 0 || res.RetryAfter <= 50*time.Minute || res.RetryAfter > time.Hour {
		t.Fatalf("claim after a delay of 1h took %v (RetryAfter %v), want nothing and RetryAfter near 1h", idsOf(res.Instances), res.RetryAfter)
	}
	// A shorter delay leaves the longer one.
	if err := e.s.(store.RateLimitDelayer).DelayRateLimit(e.ctx, lim, time.Second); err != nil {
		t.Fatalf("DelayRateLimit: %v", err)
	}
	if res = e.claimRated(e.s, q, "w1", 5, at(time.Second), lim); res.RetryAfter <= 50*time.Minute {
		t.Fatalf("a delay of 1s after one of 1h: RetryAfter %v, want near 1h still", res.RetryAfter)
	}
	err := e.s.(store.RateLimitDelayer).DelayRateLimit(e.ctx, store.RateLimit{Kind: "kind-d", Period: time.Second}, time.Second)
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("DelayRateLimit of a limit of rate 0: %v, want ErrInvalid", err)
	}
}

// testRateLimitsWindow: 4 handles with 3 claimers each claim under one
// limit for 6 s of real time, sleeping RetryAfter when held. The starts
// in any window of the period stay within rate + burst, and the long-run
// rate is within 2 % of the limit's.
func testRateLimitsWindow(t *testing.T, h Harness) {
	e, ok := rateSetup(t, h)
	if !ok {
		return
	}
	const (
		q      = "q-rwin"
		period = time.Second
		// A claimer stalled (a loaded machine, the race detector) for
		// less than burst/rate loses no rate: the limit saves it up.
		burstFor = 2 // the burst is the rate of half a period
		run      = 6 * time.Second
		claimers = 3
	)
	rate := cmp.Or(h.RateLimitRate, 200)
	burst := rate / burstFor
	total := rate*int(run/period) + 2*burst // more than the limit lets start in run
	lim := store.RateLimit{Kind: "kind-w", Rate: rate, Period: period, Burst: burst}
	var batch []*store.Instance
	for i := range total {
		batch = append(batch, kindInst(fmt.Sprintf("w%05d", i), q, "kind-w", time.Duration(i)*time.Microsecond))
	}
	for i := 0; i < len(batch); i += 100 {
		e.enqueue(e.s, base, batch[i:min(i+100, len(batch))]...)
	}
	ss := []store.Store{e.s, e.open(), e.open(), e.open()}
	type start struct{ before, after time.Time }
	var (
		mu     sync.Mutex
		starts []start
		wg     sync.WaitGroup
		errs   = make(chan error, len(ss)*claimers)
		noWait int // claims that took nothing and said no RetryAfter
		empty  int // claims that took nothing
	)
	wall := func() time.Time { return time.Now().Round(0) }
	end := time.Now().Add(run)
	for hi, s := range ss {
		for c := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("rw%d-%d", hi, c)
				for time.Now().Before(end) {
					before := wall()
					res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: q, Owner: owner, Limit: 32, Now: at(time.Hour), LeaseUntil: at(time.Hour + lease), RateLimits: []store.RateLimit{lim}})
					if err != nil {
						errs <- err
						return
					}
					after := wall()
					mu.Lock()
					for range res.Instances {
						starts = append(starts, start{before, after})
					}
					if len(res.Instances) == 0 {
						empty++
						if res.RetryAfter == 0 {
							noWait++
						}
					}
					mu.Unlock()
					if len(res.Instances) == 0 {
						d := min(max(res.RetryAfter, 100*time.Microsecond), 50*time.Millisecond)
						time.Sleep(d) // sleep until the limit lets one start, as a claimer does
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("claim: %v", err)
	}
	n := len(starts)
	if n == 0 {
		t.Fatalf("no start in %s", run)
	}
	// Work always waits, so a claim that takes nothing was held by the
	// limit and says when it lets the next start. (A claim of PostgreSQL
	// may now and then find nothing in its round for another reason, so
	// one in a hundred is let pass.)
	if noWait > empty/100 {
		t.Errorf("%d of %d claims took nothing while work waited for the rate limit, with RetryAfter 0", noWait, empty)
	}
	// Every start whose store time surely lies in [s_i, s_i + period):
	// those claimed after before_i and returned before before_i + period.
	slices.SortFunc(starts, func(a, b start) int { return a.before.Compare(b.before) })
	worst := 0
	for i, si := range starts {
		k := 0
		for _, sj := range starts[i:] {
			if sj.after.Before(si.before.Add(period)) {
				k++
			}
		}
		worst = max(worst, k)
	}
	if worst > rate+burst {
		t.Errorf("%d starts within one window of %s; the limit allows %d + burst %d", worst, period, rate, burst)
	}
	// The long-run rate: the starts after the first burst over the time
	// from the first start to the last. Each start's store time is within
	// its claim's call, so the wall clock bounds the rate both ways (tight
	// when calls are quick; wide on a loaded machine): the check fails
	// when the whole range is more than 2 % off the limit.
	// The first store time is within [min before, min after], the last
	// within [max before, max after].
	minB, minA, maxB, maxA := starts[0].before, starts[0].after, starts[0].before, starts[0].after
	for _, s := range starts {
		minB, maxB = minTime(minB, s.before), maxTime(maxB, s.before)
		minA, maxA = minTime(minA, s.after), maxTime(maxA, s.after)
	}
	want := float64(rate) / period.Seconds()
	k := float64(n - burst - 1)
	low, high := k/maxA.Sub(minB).Seconds(), k/maxB.Sub(minA).Seconds()
	t.Logf("%d starts in %s on %d handles × %d claimers: at most %d in a window of %s (limit %d + %d); long-run rate between %.1f/s and %.1f/s (limit %.0f/s); %d claims took nothing, %d of them without RetryAfter",
		n, run, len(ss), claimers, worst, period, rate, burst, low, high, want, empty, noWait)
	if high < 0.98*want || low > 1.02*want {
		t.Errorf("long-run rate between %.1f/s and %.1f/s; want within 2%% of %.0f/s", low, high, want)
	}
}

// testRateLimitsInvalid: an unusable rate limit is refused as ErrInvalid,
// before anything is claimed.
func testRateLimitsInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	const q = "q-rinv"
	e.enqueue(e.s, base, kindInst("i0", q, "kind-i", 0))
	for _, ls := range [][]store.RateLimit{
		{{Kind: "kind-i", Rate: 0, Period: time.Second}},
		{{Kind: "kind-i", Rate: 1, Period: time.Microsecond}},
		{{Kind: "kind-i", Rate: 1, Period: time.Second, Burst: -1}},
		{{Kind: "kind-i", Rate: 2_000_000, Period: time.Second}},
		{{Kind: "kind-i", Rate: 1, Period: time.Second}, {Kind: "kind-i", Rate: 2, Period: time.Second}},
	} {
		_, err := e.s.Claim(e.ctx, &store.ClaimParams{Queue: q, Owner: "w", Limit: 1, Now: at(time.Second), LeaseUntil: at(time.Second + lease), RateLimits: ls})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Claim with rate limits %v: %v, want ErrInvalid", ls, err)
		}
	}
	if got := e.get(e.s, "i0"); got.State != store.Scheduled || got.Attempt != 0 {
		t.Errorf("after refused claims i0 is %v attempt %d, want Scheduled attempt 0", got.State, got.Attempt)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

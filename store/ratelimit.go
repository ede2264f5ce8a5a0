package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// RateLimit bounds how often instances start across the whole cluster
// (every node sharing the store's namespace): at most Rate starts of the
// instances it matches per Period, plus Burst, in any window of Period.
// It matches as ConcurrencyLimit does: instances of Kind (every kind when
// empty) in Queue (every queue when empty).
//
// A rate limit is the generic cell rate algorithm (GCRA): the store keeps
// one time per limit, its theoretical arrival time (TAT). A start at
// store time now conforms when max(TAT, now) - now <= Tolerance(); it sets
// TAT to max(TAT, now) + Interval(). So starts are spaced Interval() apart
// on average, and up to Burst more may start at once after a quiet spell.
// The time is the store's clock (see each store's documentation), never
// the claimer's, so nodes whose clocks differ share one limit.
//
// A limit is enforced inside the atomic Claim (ClaimParams.RateLimits):
// an instance over the limit is left Scheduled, in its place, its attempt
// not counted, and the claim reports in ClaimResult.RetryAfter when the
// limit next lets one start.
type RateLimit struct {
	// Kind is the kind the limit bounds; empty: every kind.
	Kind string `json:"kind,omitempty"`
	// Queue is the queue the limit bounds; empty: every queue.
	Queue string `json:"queue,omitempty"`
	// Rate is how many starts the limit allows per Period; at least 1.
	Rate int `json:"rate"`
	// Period is the window Rate is counted over; at least a millisecond.
	Period time.Duration `json:"period"`
	// Burst is how many starts more than Rate a window may hold (those a
	// quiet spell saved up); 0 spaces every start Interval() apart.
	Burst int `json:"burst,omitempty"`
}

// MaxRateLimits bounds ClaimParams.RateLimits.
const MaxRateLimits = 256

// Matches reports whether the limit bounds instances of kind in queue.
func (l RateLimit) Matches(kind, queue string) bool {
	return (l.Kind == "" || l.Kind == kind) && (l.Queue == "" || l.Queue == queue)
}

// Scope names what the limit bounds, as ConcurrencyLimit.Scope does.
func (l RateLimit) Scope() string {
	return ConcurrencyLimit{Kind: l.Kind, Queue: l.Queue}.Scope()
}

// String names the limit as messages show it: "kind email (at most 100
// starts per 1s, burst 10)".
func (l RateLimit) String() string {
	return fmt.Sprintf("%s (at most %d starts per %s, burst %d)", l.Scope(), l.Rate, l.Period, l.Burst)
}

// Interval is the time a start takes from the limit: Period / Rate,
// rounded up to a whole microsecond (every store keeps the limit's time
// to the microsecond), so a store never lets more than Rate start per
// Period.
func (l RateLimit) Interval() time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	iv := (l.Period + time.Duration(l.Rate) - 1) / time.Duration(l.Rate)
	return (iv + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

// Tolerance is how far ahead of the store's clock the limit's time may
// run when a start conforms: Burst * Interval().
func (l RateLimit) Tolerance() time.Duration {
	return time.Duration(l.Burst) * l.Interval()
}

// Validate reports an unusable limit as ErrInvalid.
func (l RateLimit) Validate() error {
	switch {
	case l.Rate < 1:
		return fmt.Errorf("%w: rate limit of %s: rate %d; want 1 or more starts per period (a concurrency limit of 0 stops starts altogether)", ErrInvalid, l.Scope(), l.Rate)
	case l.Period < time.Millisecond:
		return fmt.Errorf("%w: rate limit of %s: period %s; want at least 1ms", ErrInvalid, l.Scope(), l.Period)
	case l.Period > 366*24*time.Hour:
		return fmt.Errorf("%w: rate limit of %s: period %s; want at most a year", ErrInvalid, l.Scope(), l.Period)
	case l.Burst < 0 || l.Burst > 1_000_000:
		return fmt.Errorf("%w: rate limit of %s: burst %d; want 0 to 1000000", ErrInvalid, l.Scope(), l.Burst)
	case l.Period < time.Duration(l.Rate)*time.Microsecond:
		return fmt.Errorf("%w: rate limit of %s: %d starts per %s is more than one a microsecond; use a longer period", ErrInvalid, l.Scope(), l.Rate, l.Period)
	case l.Tolerance() > 10*366*24*time.Hour:
		return fmt.Errorf("%w: rate limit of %s: burst %d spans more than ten years; lower it", ErrInvalid, l.Scope(), l.Burst)
	}
	return nil
}

// validateRateLimits checks ClaimParams.RateLimits: each valid, at most
// MaxRateLimits, no two for the same kind and queue.
func validateRateLimits(ls []RateLimit) error {
	if len(ls) > MaxRateLimits {
		return fmt.Errorf("%w: claim with %d rate limits; at most %d", ErrInvalid, len(ls), MaxRateLimits)
	}
	for i, l := range ls {
		if err := l.Validate(); err != nil {
			return err
		}
		if slices.ContainsFunc(ls[:i], func(o RateLimit) bool { return o.Kind == l.Kind && o.Queue == l.Queue }) {
			return fmt.Errorf("%w: claim names the rate limit of %s twice; keep one", ErrInvalid, l.Scope())
		}
	}
	return nil
}

// RateState is the GCRA state of one rate limit in a store written in Go:
// its theoretical arrival time, in nanoseconds of the store's clock. The
// zero value is a limit nothing started under yet.
type RateState struct {
	TAT int64
}

// Room returns how many instances limit l lets start at now (nanoseconds
// of the store's clock) and, when none, how long until one may.
func (st RateState) Room(l RateLimit, now int64) (room int, wait time.Duration) {
	iv, tol := int64(l.Interval()), int64(l.Tolerance())
	ahead := max(st.TAT, now) - now
	if ahead > tol {
		return 0, time.Duration(ahead - tol)
	}
	return int((tol-ahead)/iv) + 1, 0
}

// Delay makes the limit let nothing start before now + d.
func (st *RateState) Delay(l RateLimit, now int64, d time.Duration) {
	st.TAT = max(st.TAT, now+int64(d)+int64(l.Tolerance()))
}

// Take counts one start at now.
func (st *RateState) Take(l RateLimit, now int64) {
	st.TAT = max(st.TAT, now) + int64(l.Interval())
}

// RateLimitEnforcer is an optional capability: a store whose Claim
// enforces ClaimParams.RateLimits. A store without it ignores them, so
// the engine refuses to set a rate limit on it.
type RateLimitEnforcer interface {
	// EnforcesRateLimits reports whether Claim enforces
	// ClaimParams.RateLimits (a wrapper reports what the store it wraps
	// does).
	EnforcesRateLimits() bool
}

// EnforcesRateLimits reports whether s enforces ClaimParams.RateLimits.
func EnforcesRateLimits(s Store) bool {
	e, ok := s.(RateLimitEnforcer)
	return ok && e.EnforcesRateLimits()
}

// RateLimitDelayer is an optional capability of a RateLimitEnforcer: it
// pushes a rate limit's next start back, for every node (a job told by an
// API it calls to slow down: job.RateLimited with a shared delay).
type RateLimitDelayer interface {
	// DelayRateLimit makes limit l (known by its kind and queue) let
	// nothing start for d from now on the store's clock: its TAT becomes
	// at least now + d + l.Tolerance(), so no saved-up burst starts early
	// when d ends. A later TAT is left as it is.
	DelayRateLimit(ctx context.Context, l RateLimit, d time.Duration) error
}

package job

import (
	"math/rand/v2"
	"time"
)

// Priority orders instances in a queue: higher runs first. Instances of
// equal priority run in order of their run time, then first in, first out.
// Any int is a valid priority; the constants name the usual levels.
type Priority int

// The usual priority levels.
const (
	LowPriority    Priority = -10
	NormalPriority Priority = 0
	HighPriority   Priority = 10
)

// RetryForever, as a max retry count, retries a failing job without limit.
const RetryForever = -1

// Defaults of a job's policy.
const (
	// DefaultMaxRetries is how many times a failed attempt is retried when
	// WithMaxRetries is not given.
	DefaultMaxRetries = 3
	// DefaultUniqueTTL is how long a unique key is held when
	// WithUniqueKey is given a TTL of 0.
	DefaultUniqueTTL = 24 * time.Hour
)

// Backoff returns how long to wait before the next attempt, given the
// number of the attempt that just failed (1 for the first).
type Backoff func(attempt int) time.Duration

// ConstantBackoff waits d before every retry.
func ConstantBackoff(d time.Duration) Backoff {
	return func(int) time.Duration { return d }
}

// ExponentialBackoff waits base after the first failure and doubles the wait
// after each further one, up to limit. Half of each wait is random ("equal
// jitter"), so instances that failed together do not retry in lockstep.
func ExponentialBackoff(base, limit time.Duration) Backoff {
	return func(attempt int) time.Duration {
		d := base
		for i := 1; i < attempt && d < limit; i++ {
			d *= 2
		}
		d = min(d, limit)
		if d <= 1 {
			return d
		}
		half := d / 2
		return half + rand.N(d-half+1)
	}
}

// DefaultBackoff is the backoff of a job that sets none: exponential from
// one second to ten minutes.
var DefaultBackoff = ExponentialBackoff(time.Second, 10*time.Minute)

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

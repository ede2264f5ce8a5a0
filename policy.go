package job

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jobkit/job/store"
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

// MaxRetriesLimit is the largest retry count WithMaxRetries takes (stores
// keep it in 32 bits); beyond it, use RetryForever.
const MaxRetriesLimit = store.MaxRetriesLimit

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

// DefaultBackoff returns the backoff of a job that sets none: exponential
// from one second to ten minutes (ExponentialBackoff(time.Second,
// 10*time.Minute)).
func DefaultBackoff() Backoff { return ExponentialBackoff(time.Second, 10*time.Minute) }

// defaultBackoff is the DefaultBackoff every job without WithBackoff shares.
var defaultBackoff = DefaultBackoff()

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// PolicyOption sets one part of an instance's policy: its priority, retry
// limit, timeout or queue. It is both a JobOption and a ScheduleOption:
// given to NewJob it sets the job's default, and given to ScheduleJob (or
// to a recurring schedule) it overrides that default for the instances
// scheduled with it.
//
//	job.NewJob(job.WithKind("mail"), job.WithExecutor(send), job.WithPriority(job.LowPriority))
//	mgr.ScheduleJob(ctx, "mail", job.WithArguments(to), job.WithPriority(job.HighPriority))
type PolicyOption struct {
	set func(*policyOverride) error
}

// policyOverride holds the policy fields a PolicyOption set; nil means
// not set.
type policyOverride struct {
	priority   *Priority
	maxRetries *int
	timeout    *time.Duration
	queue      *string
}

// applyJob sets the job's defaults. Errors wrap ErrInvalidJob as well as
// ErrInvalidOption, as NewJob promises.
func (o PolicyOption) applyJob(j *Job) error {
	var p policyOverride
	if err := o.apply(&p); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if p.priority != nil {
		j.priority = *p.priority
	}
	if p.maxRetries != nil {
		j.maxRetries = *p.maxRetries
	}
	if p.timeout != nil {
		j.timeout = *p.timeout
	}
	if p.queue != nil {
		j.queue = *p.queue
	}
	return nil
}

// applySchedule overrides the job's defaults for one schedule call.
func (o PolicyOption) applySchedule(c *scheduleConfig) error { return o.apply(&c.policy) }

func (o PolicyOption) apply(p *policyOverride) error {
	if o.set == nil {
		return fmt.Errorf("%w: zero PolicyOption; build one with job.WithPriority, WithMaxRetries, WithTimeout or WithQueue", ErrInvalidOption)
	}
	return o.set(p)
}

// WithPriority sets the priority of the instances: the job's default on
// NewJob (NormalPriority when not given), an override on ScheduleJob.
func WithPriority(p Priority) PolicyOption {
	return PolicyOption{func(o *policyOverride) error { o.priority = &p; return nil }}
}

// WithMaxRetries sets how many times a failed attempt is retried: 0 never,
// RetryForever without limit. The job's default on NewJob
// (DefaultMaxRetries when not given), an override on ScheduleJob.
func WithMaxRetries(n int) PolicyOption {
	return PolicyOption{func(o *policyOverride) error {
		if n < RetryForever || n > MaxRetriesLimit {
			return fmt.Errorf("%w: max retries %d; use 0 for none, up to job.MaxRetriesLimit (%d), or job.RetryForever", ErrInvalidOption, n, MaxRetriesLimit)
		}
		o.maxRetries = &n
		return nil
	}}
}

// WithTimeout bounds each attempt: its context is canceled after d and the
// attempt counts as timed out. 0 means no limit. The job's default on
// NewJob (no limit when not given), an override on ScheduleJob.
func WithTimeout(d time.Duration) PolicyOption {
	return PolicyOption{func(o *policyOverride) error {
		if d < 0 {
			return fmt.Errorf("%w: negative timeout %v", ErrInvalidOption, d)
		}
		o.timeout = &d
		return nil
	}}
}

// WithQueue puts the instances in the named queue: the job's default on
// NewJob (DefaultQueue when not given), an override on ScheduleJob. A
// manager runs the queues named by its WithQueues.
func WithQueue(name string) PolicyOption {
	return PolicyOption{func(o *policyOverride) error {
		if name == "" {
			return fmt.Errorf("%w: empty queue name", ErrInvalidOption)
		}
		o.queue = &name
		return nil
	}}
}

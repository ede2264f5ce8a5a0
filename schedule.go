package job

import (
	"fmt"
	"time"
)

// ScheduleOption configures one instance scheduled with
// Manager.ScheduleJob, or the instances of a recurring job.
type ScheduleOption func(*scheduleConfig) error

type scheduleConfig struct {
	args        []any
	runAt       time.Time
	after       time.Duration
	jitter      time.Duration
	priority    *Priority
	maxRetries  *int
	timeout     *time.Duration
	uniqueKey   string
	uniqueTTL   time.Duration
	hasArgs     bool
	queue       string
	tickKey     string
	tickHoldTil time.Time
}

// WithArguments sets the executor's arguments (those after any injected
// context.Context and Instance). They must fit the executor's parameters in
// count and type; ScheduleJob checks that before it stores anything.
func WithArguments(args ...any) ScheduleOption {
	return func(c *scheduleConfig) error {
		c.args = args
		c.hasArgs = true
		return nil
	}
}

// WithScheduleAt makes the instance due at t.
func WithScheduleAt(t time.Time) ScheduleOption {
	return func(c *scheduleConfig) error {
		if t.IsZero() {
			return fmt.Errorf("%w: zero schedule time", ErrInvalidOption)
		}
		c.runAt = t
		return nil
	}
}

// WithScheduleAfter makes the instance due d from now.
func WithScheduleAfter(d time.Duration) ScheduleOption {
	return func(c *scheduleConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative delay %v", ErrInvalidOption, d)
		}
		c.after = d
		return nil
	}
}

// WithJitter delays the instance by a random duration in [0, d), spreading
// instances scheduled together.
func WithJitter(d time.Duration) ScheduleOption {
	return func(c *scheduleConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative jitter %v", ErrInvalidOption, d)
		}
		c.jitter = d
		return nil
	}
}

// WithSchedulePriority overrides the job's priority for this instance.
func WithSchedulePriority(p Priority) ScheduleOption {
	return func(c *scheduleConfig) error { c.priority = &p; return nil }
}

// WithScheduleMaxRetries overrides the job's max retries for this
// instance.
func WithScheduleMaxRetries(n int) ScheduleOption {
	return func(c *scheduleConfig) error {
		if n < RetryForever {
			return fmt.Errorf("%w: max retries %d; use 0 for none or job.RetryForever", ErrInvalidOption, n)
		}
		c.maxRetries = &n
		return nil
	}
}

// WithScheduleTimeout overrides the job's timeout for this instance.
func WithScheduleTimeout(d time.Duration) ScheduleOption {
	return func(c *scheduleConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative timeout %v", ErrInvalidOption, d)
		}
		c.timeout = &d
		return nil
	}
}

// WithUniqueKey makes the instance unique by key for ttl (DefaultUniqueTTL
// when 0): while another instance holds the key, ScheduleJob returns that
// instance and an error wrapping ErrDuplicate. The key is held for the
// whole ttl, whatever happens to the instance.
func WithUniqueKey(key string, ttl time.Duration) ScheduleOption {
	return func(c *scheduleConfig) error {
		if key == "" {
			return fmt.Errorf("%w: empty unique key", ErrInvalidOption)
		}
		if ttl < 0 {
			return fmt.Errorf("%w: negative unique key TTL %v", ErrInvalidOption, ttl)
		}
		if ttl == 0 {
			ttl = DefaultUniqueTTL
		}
		c.uniqueKey, c.uniqueTTL = key, ttl
		return nil
	}
}

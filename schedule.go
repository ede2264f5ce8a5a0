package job

import (
	"fmt"
	"time"
)

// ScheduleOption configures one instance scheduled with
// Manager.ScheduleJob, or each tick of a recurring job (WithCronSpec,
// WithInterval). The options of this package implement it; see the
// package documentation for how options are named.
type ScheduleOption interface {
	applySchedule(*scheduleConfig) error
}

// scheduleOption is a ScheduleOption that is nothing else.
type scheduleOption func(*scheduleConfig) error

func (o scheduleOption) applySchedule(c *scheduleConfig) error { return o(c) }

type scheduleConfig struct {
	policy      policyOverride
	args        []any
	runAt       time.Time
	after       time.Duration
	jitter      time.Duration
	uniqueKey   string
	uniqueTTL   time.Duration
	hasArgs     bool
	typedArgs   bool // the arguments came from a TypedJob's Schedule
	tickKey     string
	tickHoldTil time.Time
}

// apply applies opts in order, stopping at the first error.
func (c *scheduleConfig) apply(opts []ScheduleOption) error {
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil schedule option", ErrInvalidOption)
		}
		if err := o.applySchedule(c); err != nil {
			return err
		}
	}
	return nil
}

// WithArguments sets the executor's arguments (those after any injected
// context.Context and Instance). They must fit the executor's parameters in
// count and type; ScheduleJob checks that before it stores anything.
func WithArguments(args ...any) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if c.typedArgs {
			return fmt.Errorf("%w: WithArguments on a typed job; pass the arguments to its Schedule instead", ErrInvalidOption)
		}
		c.args = args
		c.hasArgs = true
		return nil
	})
}

// WithScheduleAt makes the instance due at t.
func WithScheduleAt(t time.Time) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if t.IsZero() {
			return fmt.Errorf("%w: zero schedule time", ErrInvalidOption)
		}
		c.runAt = t
		return nil
	})
}

// WithScheduleAfter makes the instance due d from now.
func WithScheduleAfter(d time.Duration) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative delay %v", ErrInvalidOption, d)
		}
		c.after = d
		return nil
	})
}

// WithJitter delays the instance by a random duration in [0, d), spreading
// instances scheduled together.
func WithJitter(d time.Duration) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative jitter %v", ErrInvalidOption, d)
		}
		c.jitter = d
		return nil
	})
}

// WithUniqueKey makes the instance unique by key for ttl (DefaultUniqueTTL
// when 0): while another instance holds the key, ScheduleJob returns that
// instance and an error wrapping ErrDuplicate. The key is held for the
// whole ttl, whatever happens to the instance.
func WithUniqueKey(key string, ttl time.Duration) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
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
	})
}

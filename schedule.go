package job

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
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
	fromTick    bool // enqueued by a recurring schedule
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

// recurrence is a recurring job's schedule.
type recurrence struct {
	spec     string
	next     func(after time.Time) time.Time
	period   time.Duration // the interval, or an estimate of a cron period
	args     []any
	opts     []ScheduleOption
	interval bool
}

// cronParser accepts five fields, an optional leading seconds field,
// descriptors (@hourly, @daily, ...) and CRON_TZ= / TZ= prefixes.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// WithCronSpec makes the job recurring on a cron schedule: "*/5 * * * *",
// with an optional leading seconds field ("*/10 * * * * *"), a descriptor
// ("@hourly"), or a time zone prefix ("CRON_TZ=Europe/Paris 0 9 * * *").
// "@every d" is an interval (see WithInterval). Each tick is scheduled as
// one instance with opts (WithArguments, priority, ...), once per cluster:
// every manager that registers the job schedules the same tick under the
// same unique key, and the store keeps one.
func WithCronSpec(spec string, opts ...ScheduleOption) JobOption {
	return func(j *Job) error {
		if d, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
			iv, err := time.ParseDuration(strings.TrimSpace(d))
			if err != nil {
				return fmt.Errorf("%w: cron spec %q: %v", ErrInvalidJob, spec, err)
			}
			return WithInterval(iv, opts...)(j)
		}
		sched, err := cronParser.Parse(spec)
		if err != nil {
			return fmt.Errorf("%w: cron spec %q: %v", ErrInvalidJob, spec, err)
		}
		r := &recurrence{spec: spec, next: sched.Next, opts: opts}
		// Estimate the period from two consecutive ticks, for how long a
		// tick's unique key must be held.
		t0 := sched.Next(time.Unix(0, 0).UTC())
		r.period = sched.Next(t0).Sub(t0)
		if err := r.collectArgs(); err != nil {
			return err
		}
		j.recurring = r
		return nil
	}
}

// WithInterval makes the job recurring every d (sub-second allowed). Ticks
// fall on multiples of d since the Unix epoch, so every manager computes
// the same ticks and the cluster runs each once.
func WithInterval(d time.Duration, opts ...ScheduleOption) JobOption {
	return func(j *Job) error {
		if d <= 0 {
			return fmt.Errorf("%w: interval %v, want > 0", ErrInvalidJob, d)
		}
		r := &recurrence{
			spec:     "@every " + d.String(),
			period:   d,
			interval: true,
			opts:     opts,
			next: func(after time.Time) time.Time {
				n := after.UnixNano()
				return time.Unix(0, (n/int64(d)+1)*int64(d)).In(after.Location())
			},
		}
		if err := r.collectArgs(); err != nil {
			return err
		}
		j.recurring = r
		return nil
	}
}

func (r *recurrence) collectArgs() error {
	var c scheduleConfig
	for _, o := range r.opts {
		if err := o(&c); err != nil {
			return fmt.Errorf("%w: recurring schedule option: %w", ErrInvalidJob, err)
		}
	}
	if c.uniqueKey != "" {
		return fmt.Errorf("%w: a recurring job cannot take WithUniqueKey; each tick is unique already", ErrInvalidJob)
	}
	if !c.runAt.IsZero() || c.after != 0 {
		return fmt.Errorf("%w: a recurring job cannot take WithScheduleAt or WithScheduleAfter; its schedule sets the run time", ErrInvalidJob)
	}
	r.args = c.args
	return nil
}

// tickKeyPrefix starts the unique key of every recurring tick.
const tickKeyPrefix = "jobkit:tick:"

// tickKey is the unique key of a recurring job's tick: the same on every
// manager, so the store keeps one instance per tick per cluster.
func tickKey(kind string, tick time.Time) string {
	return fmt.Sprintf("%s%s:%d", tickKeyPrefix, kind, tick.UnixNano())
}

// tickHold is how long past its tick a tick's key is held: long enough that
// no manager with a slow clock schedules it again.
func (r *recurrence) tickHold() time.Duration {
	return max(time.Minute, 2*r.period)
}

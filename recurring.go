package job

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
	"github.com/robfig/cron/v3"
)

// startRecurringLocked starts the ticker of recurring job j. m.mu is held.
func (m *Manager) startRecurringLocked(j *Job) {
	if _, ok := m.recurring[j.kind]; ok {
		return
	}
	stop := make(chan struct{})
	m.recurring[j.kind] = stop
	m.bg.Add(1)
	go m.recur(j, stop)
}

// recur keeps the next tick of j scheduled. A tick is scheduled as soon as
// the previous one is due, with RunAt at the tick, so the claim loop starts
// it on time; its unique key (kind + tick time) is the same on every
// manager, so the store keeps one instance per tick per cluster, and a
// manager that dies loses nothing the others do not schedule.
func (m *Manager) recur(j *Job, stop <-chan struct{}) {
	defer m.bg.Done()
	r := j.recurring
	failures := 0
	for {
		now := m.clock.Now()
		tick := r.next(now)
		if tick.IsZero() { // a cron spec that never fires again
			m.log.Warn("recurring job has no next tick", "kind", j.kind, "spec", r.spec)
			return
		}
		if err := m.scheduleTick(j, tick); err != nil {
			failures++
			d := retryDelay(failures - 1)
			m.log.Warn("schedule recurring tick; retrying", "kind", j.kind, "tick", tick, "err", err, "in", d)
			select {
			case <-stop:
				return
			case <-m.stopCh:
				return
			case <-time.After(d):
			}
			continue
		}
		failures = 0
		t := m.clock.NewTimer(tick.Sub(now))
		select {
		case <-t.C():
		case <-stop:
			t.Stop()
			return
		case <-m.stopCh:
			t.Stop()
			return
		}
	}
}

func (m *Manager) scheduleTick(j *Job, tick time.Time) error {
	var c scheduleConfig
	if err := c.apply(j.recurring.opts); err != nil {
		return err
	}
	c.runAt = tick
	c.tickKey = tickKey(j.kind, tick)
	c.tickHoldTil = tick.Add(j.recurring.tickHold())
	rec, err := m.newRecord(j, &c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(m.runCtx, 30*time.Second)
	defer cancel()
	res, err := m.store.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{rec}, Node: m.node, Now: m.clock.Now()})
	if err != nil {
		return err
	}
	if len(res) == 1 && res[0].Err != nil && !errors.Is(res[0].Err, store.ErrDuplicate) {
		return res[0].Err
	}
	if len(res) == 1 && res[0].Err == nil {
		m.notifyLocal()
	}
	return nil
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
// one instance with opts (WithArguments, WithPriority, ...), once per cluster:
// every manager that registers the job schedules the same tick under the
// same unique key, and the store keeps one.
func WithCronSpec(spec string, opts ...ScheduleOption) JobOption {
	return jobOption(func(j *Job) error {
		if d, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
			iv, err := time.ParseDuration(strings.TrimSpace(d))
			if err != nil {
				return fmt.Errorf("%w: cron spec %q: %v", ErrInvalidJob, spec, err)
			}
			return WithInterval(iv, opts...).applyJob(j)
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
	})
}

// WithInterval makes the job recurring every d (sub-second allowed). Ticks
// fall on multiples of d since the Unix epoch, so every manager computes
// the same ticks and the cluster runs each once.
func WithInterval(d time.Duration, opts ...ScheduleOption) JobOption {
	return jobOption(func(j *Job) error {
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
	})
}

func (r *recurrence) collectArgs() error {
	var c scheduleConfig
	if err := c.apply(r.opts); err != nil {
		return fmt.Errorf("%w: recurring schedule option: %w", ErrInvalidJob, err)
	}
	if c.uniqueKey != "" {
		return fmt.Errorf("%w: a recurring job cannot take WithUniqueKey; each tick is unique already", ErrInvalidJob)
	}
	if c.idemKey != "" {
		return fmt.Errorf("%w: a recurring job cannot take WithIdempotencyKey; each tick is scheduled once per cluster already", ErrInvalidJob)
	}
	if !c.runAt.IsZero() || c.after != 0 {
		return fmt.Errorf("%w: a recurring job cannot take WithScheduleAt or WithScheduleAfter; its schedule sets the run time", ErrInvalidJob)
	}
	r.args = c.args
	return nil
}

// Stored unique keys live in two namespaces, so a user's key can never
// take a recurring tick's place: a user key (WithUniqueKey) is stored
// behind userKeyPrefix, a tick's key behind tickKeyPrefix.
const (
	userKeyPrefix = "u:"
	tickKeyPrefix = "t:"
)

// tickKey is the stored unique key of a recurring job's tick: the same on
// every manager, so the store keeps one instance per tick per cluster.
func tickKey(kind string, tick time.Time) string {
	return fmt.Sprintf("%s%s:%d", tickKeyPrefix, kind, tick.UnixNano())
}

// isTick reports whether in is a recurring tick: its stored unique key is
// tickKey of its own kind and some time. No user key can be one, since
// user keys are stored behind userKeyPrefix.
func isTick(in *store.Instance) bool {
	rest, ok := strings.CutPrefix(in.UniqueKey, tickKeyPrefix+in.Kind+":")
	if !ok || rest == "" {
		return false
	}
	_, err := strconv.ParseInt(rest, 10, 64)
	return err == nil
}

// userUniqueKey returns the key a user gave WithUniqueKey from its stored
// form, and a tick's stored key as it is.
func userUniqueKey(stored string) string {
	if k, ok := strings.CutPrefix(stored, userKeyPrefix); ok {
		return k
	}
	return stored
}

// tickHold is how long past its tick a tick's key is held: long enough that
// no manager with a slow clock schedules it again.
func (r *recurrence) tickHold() time.Duration {
	return max(time.Minute, 2*r.period)
}

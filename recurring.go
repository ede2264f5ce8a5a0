package job

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
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
	m.bg.goLoop(func(quit <-chan struct{}) { m.recur(j, stop, quit) })
}

// recur keeps the next tick of j scheduled. A tick is scheduled as soon as
// the previous one is due, with RunAt at the tick, so the claim loop starts
// it on time; its unique key (kind + tick time) and its instance ID are
// the same on every manager, so the store keeps one instance per tick per
// cluster, and a manager that dies loses nothing the others do not
// schedule. With an overlap policy other than OverlapAllow a tick is
// scheduled only once it is due, after the policy looked at the runs of
// earlier ticks.
//
// The next tick follows the last one scheduled, not the time the ticker
// woke: a ticker that wakes late (a starved process, a paused VM) still
// schedules the ticks it slept through, due at once. It catches up only
// on ticks less than half their unique key's hold old, so another
// manager that scheduled the same tick still holds its key and the store
// keeps one; after a longer pause it goes on from now. When it starts,
// it goes on from now (MissedSkip), or first schedules the latest tick
// missed within the job's deadline (MissedCatchUpOnce).
func (m *Manager) recur(j *Job, stop, quit <-chan struct{}) {
	r := j.recurring
	atTick := j.overlap != "" && j.overlap != OverlapAllow
	failures := 0
	var last time.Time // the last tick scheduled
	if j.missed == MissedCatchUpOnce {
		last = m.catchUpTick(j, stop)
	}
	for {
		// No ticks while the clock is skewed or unknown (node.go).
		if !m.nodes.waitOK(stop, quit) {
			return
		}
		now := m.clock.Now()
		from := now
		if !last.IsZero() && now.Sub(last) < r.tickHold()/2 {
			from = last
		}
		tick, err := m.recurNext(j, from)
		if err != nil { // its calendar is not stored, or cannot be read
			m.log.Warn("recurring job schedules no tick until its calendar can be read", "kind", j.kind, "calendar", j.calendar, "err", err, "retry_in", m.cfg.triggerReload)
			if !m.sleepUntil(now.Add(m.cfg.triggerReload), stop, quit) {
				return
			}
			continue
		}
		if tick.IsZero() { // a cron spec that never fires again
			m.log.Warn("recurring job has no next tick", "kind", j.kind, "spec", r.spec)
			return
		}
		if atTick && tick.After(now) {
			if !m.sleepUntil(tick, stop, quit) {
				return
			}
		}
		if err := m.scheduleTick(j, tick); err != nil {
			failures++
			d := retryDelay(failures - 1)
			m.log.Warn("schedule recurring tick; retrying", "kind", j.kind, "tick", tick, "err", err, "in", d)
			// The retry backs off on the real clock, as the claim loop's
			// does: it paces calls to a failing store and decides nothing
			// about the schedule, so a test's fake clock need not drive it.
			t := time.NewTimer(d)
			select {
			case <-stop:
				t.Stop()
				return
			case <-quit:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		failures = 0
		last = tick
		if atTick || !tick.After(now) {
			continue // scheduled at its time, or slept through: on to the next
		}
		if !m.sleepUntil(tick, stop, quit) {
			return
		}
	}
}

// sleepUntil waits on the manager's clock until t; false when the ticker
// or the manager stops first.
func (m *Manager) sleepUntil(t time.Time, stop, quit <-chan struct{}) bool {
	d := t.Sub(m.clock.Now())
	if d <= 0 {
		return true
	}
	tm := m.clock.NewTimer(d)
	select {
	case <-tm.C():
		return true
	case <-stop:
		tm.Stop()
		return false
	case <-quit:
		tm.Stop()
		return false
	}
}

// catchUpTick schedules, under MissedCatchUpOnce, the latest tick of j
// before now when it is at most j.catchUpWithin old, and returns it (zero
// when there is none, or it could not be scheduled). Its instance ID is
// the tick's, so a manager that scheduled it already, or several starting
// at once, store one.
func (m *Manager) catchUpTick(j *Job, stop <-chan struct{}) time.Time {
	now := m.clock.Now()
	latest := latestTick(m.recurNextFunc(j), now, now.Add(-j.catchUpWithin-time.Nanosecond))
	if latest.IsZero() {
		return time.Time{}
	}
	m.log.Info("recurring job catches up its latest missed tick", "kind", j.kind, "tick", latest)
	if err := m.scheduleTick(j, latest); err != nil {
		m.log.Warn("schedule the catch-up tick of a recurring job; going on from now", "kind", j.kind, "tick", latest, "err", err)
		return time.Time{}
	}
	return latest
}

// scheduleTick schedules j's tick, once per cluster, after applying j's
// overlap policy.
func (m *Manager) scheduleTick(j *Job, tick time.Time) error {
	var c scheduleConfig
	if err := c.apply(j.recurring.opts); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(m.run.ctx, 30*time.Second)
	defer cancel()
	if j.overlap == OverlapForbid || j.overlap == OverlapReplace {
		prev, err := m.activeTicks(ctx, j.kind, tick)
		if err != nil {
			return err
		}
		if len(prev) > 0 && j.overlap == OverlapForbid {
			m.log.Info("recurring job skipped a tick: an earlier run is still active (overlap policy forbid)", "kind", j.kind, "tick", tick, "previous", prev[0])
			return nil
		}
		for _, id := range prev {
			if _, err := m.CancelInstance(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrFinished) {
				return fmt.Errorf("cancel the earlier run %s (overlap policy replace): %w", id, err)
			}
			m.log.Info("recurring job canceled an earlier run (overlap policy replace)", "kind", j.kind, "tick", tick, "previous", id)
		}
	}
	now := m.clock.Now()
	c.runAt = tick
	c.tickKey = tickKey(j.kind, tick)
	c.tickHoldTil = later(tick, now).Add(j.recurring.tickHold())
	// The instance ID is the tick's (see idempotentID), the same on every
	// manager, so the store keeps one instance per tick even after the
	// tick's key expired.
	c.idemKey = tickKeyPrefix + strconv.FormatInt(tick.UnixNano(), 10)
	rec, err := m.newRecord(j, &c)
	if err != nil {
		return err
	}
	res, err := m.store.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{rec}, Node: m.node, Now: now})
	if err != nil {
		return err
	}
	if len(res) == 1 && res[0].Err != nil && !errors.Is(res[0].Err, store.ErrDuplicate) {
		return res[0].Err
	}
	if len(res) == 1 && res[0].Err == nil && !res[0].Existed {
		m.notifyLocal()
	}
	return nil
}

// activeTicks returns the IDs of the Scheduled or Processing instances of
// kind's code-registered ticks before tick.
func (m *Manager) activeTicks(ctx context.Context, kind string, tick time.Time) ([]string, error) {
	ins, err := m.store.LookupInstances(ctx, &store.Query{Kind: kind, States: []store.State{store.Scheduled, store.Processing}, Limit: 256})
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return nil, err
	}
	var ids []string
	for _, in := range ins {
		if t, ok := tickOf(in); ok && t.Before(tick) {
			if _, trig := triggerOf(in); !trig {
				ids = append(ids, in.ID)
			}
		}
	}
	return ids, nil
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

// MinInterval is the shortest period a recurring job may have, by
// WithInterval or a cron spec. It is cron's own resolution (its finest
// field is seconds), so both ways of making a job recurring share one
// bound. Each tick is a stored instance with its history, claimed and
// finished like any other, and kept by retention: at one a second a
// recurring job makes 86,400 instances a day, close to DefaultFinishedMax
// alone; a shorter interval is almost always a mistake (a 1ns interval
// made 10 to 19 thousand instances a second). Work that must run more
// often than this belongs in one long-running job that loops, or in
// ScheduleJob calls.
const MinInterval = time.Second

// cronParser accepts five fields, an optional leading seconds field and
// descriptors (@hourly, @daily, ...). Time zone prefixes are split off by
// parseCron before it sees a spec.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// WithCronSpec makes the job recurring on a cron schedule: "*/5 * * * *",
// with an optional leading seconds field ("*/10 * * * * *"), a descriptor
// ("@hourly"), or a time zone prefix followed by a space
// ("CRON_TZ=Europe/Paris 0 9 * * *"; TZ= works too). Without a prefix the
// fields are read in the process's local time zone, so the managers of a
// cluster that runs in several zones should name one. "@every d" is an
// interval (see WithInterval) and takes no time zone. Each tick is
// scheduled as one instance with opts (WithArguments, WithPriority, ...), once
// per cluster: every manager that registers the job schedules the same
// tick under the same unique key, and the store keeps one. A spec that
// does not parse, never fires or fires more often than MinInterval is an
// error wrapping ErrInvalidJob.
func WithCronSpec(spec string, opts ...ScheduleOption) JobOption {
	return jobOption(func(j *Job) error {
		if d, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
			iv, err := time.ParseDuration(strings.TrimSpace(d))
			if err != nil {
				return fmt.Errorf("%w: cron spec %q: %v", ErrInvalidJob, spec, err)
			}
			return WithInterval(iv, opts...).applyJob(j)
		}
		next, err := parseCron(spec)
		if err != nil {
			return fmt.Errorf("%w: cron spec %q: %v", ErrInvalidJob, spec, err)
		}
		r := &recurrence{spec: spec, next: next, opts: opts}
		// Estimate the period from two consecutive ticks, for how long a
		// tick's unique key must be held.
		t0 := next(time.Unix(0, 0).UTC())
		t1 := next(t0)
		if t0.IsZero() || t1.IsZero() {
			return fmt.Errorf("%w: cron spec %q never fires (no such date)", ErrInvalidJob, spec)
		}
		r.period = t1.Sub(t0)
		if r.period < MinInterval {
			return fmt.Errorf("%w: cron spec %q fires every %v, more often than job.MinInterval (%v)", ErrInvalidJob, spec, r.period, MinInterval)
		}
		if err := r.collectArgs(); err != nil {
			return err
		}
		j.recurring = r
		return nil
	})
}

// parseCron parses a cron spec with an optional time zone prefix and
// returns its next-tick function. It checks the prefix itself, and
// recovers a panic of the parser, because robfig/cron slices the spec out
// of range on a prefix that no space follows ("TZ=UTC") and would take the
// process down. The function reads the fields in the spec's zone (the
// local one without a prefix) whatever the location of the time it is
// given: robfig/cron reads a spec without a zone in the location of that
// time, so two managers whose clocks report different locations would
// compute different ticks.
func parseCron(spec string) (next func(after time.Time) time.Time, err error) {
	s := strings.TrimSpace(spec)
	loc := time.Local
	if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		prefix, rest, ok := strings.Cut(s, " ")
		if !ok {
			return nil, errors.New(`a time zone prefix must be followed by a space and the schedule, as in "CRON_TZ=Europe/Paris 0 9 * * *"`)
		}
		_, name, _ := strings.Cut(prefix, "=")
		if name == "" {
			return nil, errors.New(`empty time zone; name one, as in "CRON_TZ=Europe/Paris 0 9 * * *"`)
		}
		if loc, err = time.LoadLocation(name); err != nil {
			return nil, fmt.Errorf("time zone %q: %v", name, err)
		}
		s = strings.TrimSpace(rest)
		if strings.HasPrefix(s, "@every") {
			return nil, errors.New("@every is an interval and takes no time zone; drop the prefix")
		}
	}
	if s == "" {
		return nil, errors.New("no schedule; want five or six fields or a descriptor such as @hourly")
	}
	defer func() {
		if p := recover(); p != nil {
			next, err = nil, fmt.Errorf("cron parser panicked: %v", p)
		}
	}()
	sched, err := cronParser.Parse(s)
	if err != nil {
		return nil, err
	}
	return func(after time.Time) time.Time { return sched.Next(after.In(loc)) }, nil
}

// WithInterval makes the job recurring every d, at least MinInterval.
// Ticks fall on multiples of d since the Unix epoch, so every manager
// computes the same ticks and the cluster runs each once.
func WithInterval(d time.Duration, opts ...ScheduleOption) JobOption {
	return jobOption(func(j *Job) error {
		if d < MinInterval {
			return fmt.Errorf("%w: interval %v is shorter than job.MinInterval (%v); run more frequent work in a loop inside one job", ErrInvalidJob, d, MinInterval)
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
	if c.shards > 0 {
		return fmt.Errorf("%w: a recurring job cannot take WithShards; schedule the sharded task from the job's executor with ScheduleJob", ErrInvalidJob)
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
	_, ok := tickOf(in)
	return ok
}

// userUniqueKey returns the key a user gave WithUniqueKey from its stored
// form, and a tick's stored key as it is.
func userUniqueKey(stored string) string {
	if k, ok := strings.CutPrefix(stored, userKeyPrefix); ok {
		return k
	}
	return stored
}

// tickOf returns the tick time of a recurring tick's record: the time in
// its unique key. ok is false for an instance that is not a tick. A
// stored trigger's tick (see triggerTickKey) is a tick too; triggerOf
// tells the two apart.
func tickOf(rec *store.Instance) (tick time.Time, ok bool) {
	rest, ok := strings.CutPrefix(rec.UniqueKey, tickKeyPrefix+rec.Kind+":")
	if !ok {
		return time.Time{}, false
	}
	rest, _, _ = strings.Cut(rest, "@")
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// foreignTickRetry is how long a manager that claimed a tick of a kind it
// does not run puts it off before any manager may claim it again, and
// foreignTickGrace how long past its tick such a tick is put off before it
// is canceled.
const (
	foreignTickRetry = time.Second
	foreignTickGrace = time.Minute
	// foreignTriggerRetry is how long a stored trigger's tick of a kind the
	// claiming manager does not run is put off (spread over 0.5 to 1.5
	// times it).
	foreignTriggerRetry = 10 * time.Second
)

// triggerOf returns the name of the stored trigger whose tick rec is; ok
// is false for any other instance, a code-registered job's tick included.
func triggerOf(rec *store.Instance) (name string, ok bool) {
	rest, ok := strings.CutPrefix(rec.UniqueKey, tickKeyPrefix+rec.Kind+":")
	if !ok {
		return "", false
	}
	_, name, ok = strings.Cut(rest, "@")
	return name, ok
}

// foreignTickOutcome decides the outcome of a claimed attempt of a
// recurring tick whose kind this manager does not run, so the tick never
// fails for it. Claims name the kinds a manager runs, so this happens only
// when the job was unregistered between the claim and the start:
//
//   - until foreignTickGrace (a minute) past the tick it is handed back
//     without counting the attempt, due again 0.5 to 1.5 s later (spread,
//     so handed-back ticks do not all fall due at one instant), so a
//     manager that still runs the kind may claim and run it, a little late;
//   - after that it is Canceled, not Terminated: no manager that claimed it
//     in that minute runs the kind, most likely because none has it
//     registered any more.
//
// ok is false for an attempt that is not a tick.
func (m *Manager) foreignTickOutcome(a *attempt) (out store.Outcome, ok bool) {
	tick, ok := tickOf(a.rec)
	if !ok {
		return store.Outcome{}, false
	}
	now := m.clock.Now()
	out = store.Outcome{ID: a.rec.ID, Attempt: a.rec.Attempt}
	if name, ok := triggerOf(a.rec); ok {
		// A stored trigger's tick waits for a manager that runs its kind,
		// however long that takes: it is handed back, never failed nor
		// canceled, at a slower pace than a code tick.
		out.State, out.RunAt, out.Release = store.Scheduled, now.Add(foreignTriggerRetry/2+time.Duration(rand.Int64N(int64(foreignTriggerRetry)))), true
		out.Error = fmt.Sprintf("handed back: kind %q of stored trigger %q is not registered on node %s; waits for a manager that runs it", a.rec.Kind, name, m.node)
		return out, true
	}
	if now.Before(tick.Add(foreignTickGrace)) {
		out.State, out.RunAt, out.Release = store.Scheduled, now.Add(foreignTickRetry/2+time.Duration(rand.Int64N(int64(foreignTickRetry)))), true
		out.Error = fmt.Sprintf("handed back: recurring kind %q is not registered on node %s; left for a manager that runs it", a.rec.Kind, m.node)
		return out, true
	}
	out.State = store.Canceled
	out.Error = fmt.Sprintf("canceled: no manager that claimed recurring kind %q's tick of %s within %v runs the kind (unregistered everywhere?)",
		a.rec.Kind, tick.UTC().Format(time.RFC3339Nano), foreignTickGrace)
	m.log.Info("canceled a tick of a recurring kind no claiming manager runs", "kind", a.rec.Kind, "tick", tick, "instance", a.rec.ID)
	return out, true
}

// tickHold is how long past its tick a tick's key is held: long enough that
// no manager with a slow clock schedules it again.
func (r *recurrence) tickHold() time.Duration {
	if r.period > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return max(time.Minute, 2*r.period)
}

package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/jobkit/job/schedule"
	"github.com/jobkit/job/store"
)

// Stored triggers (store.Triggers) are cron or interval schedules kept in
// the store, created, paused, resumed and deleted at run time by any
// process. Every running manager with the scheduler role (the default;
// see WithScheduler) reads them every trigger reload interval and fires
// their ticks. Each tick is fired once per cluster: its instance has an ID
// derived from the trigger and the tick, and the tick's unique key, so
// managers that fire the same tick store one instance; the trigger then
// records the tick (LastTick, LastInstanceID) with a compare-and-set.

// OverlapPolicy says what a recurring job or a stored trigger does at a
// tick while the run of its previous tick is still pending or running;
// see store.OverlapPolicy.
type OverlapPolicy = store.OverlapPolicy

// MissedTickPolicy says what a recurring job or a stored trigger does
// with ticks missed while no scheduler ran; see store.MissedTickPolicy.
type MissedTickPolicy = store.MissedTickPolicy

// The overlap and missed-tick policies.
const (
	// OverlapAllow fires every tick (the default).
	OverlapAllow = store.OverlapAllow
	// OverlapForbid skips a tick while the previous tick's instance is
	// still Scheduled or Processing, and logs the skip.
	OverlapForbid = store.OverlapForbid
	// OverlapReplace cancels the previous tick's instance, then fires.
	OverlapReplace = store.OverlapReplace
	// MissedSkip drops ticks missed while no scheduler ran (the default).
	MissedSkip = store.MissedSkip
	// MissedCatchUpOnce fires one instance for the latest missed tick when
	// it is recent enough.
	MissedCatchUpOnce = store.MissedCatchUpOnce
)

// DefaultTriggerReload is how often a manager with the scheduler role
// reads the stored triggers (WithTriggerReload).
const DefaultTriggerReload = 5 * time.Second

// WithScheduler turns the scheduler role on or off. Defaults to on: the
// manager fires the ticks of stored triggers. A manager with the role off
// still schedules its own recurring jobs (WithCronSpec, WithInterval).
func WithScheduler(on bool) ManagerOption {
	return func(c *config) error {
		c.schedulerOff = !on
		return nil
	}
}

// WithTriggerReload sets how often the scheduler reads the stored
// triggers, so a trigger created, changed or deleted by another process
// takes effect within d (changes made through this manager take effect at
// once, and a pause or a delete is seen at the next tick whatever d is).
// A tick fired more than 2*d late counts as missed (see
// MissedTickPolicy). Defaults to DefaultTriggerReload; at least 10 ms.
func WithTriggerReload(d time.Duration) ManagerOption {
	return func(c *config) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: trigger reload interval %v, want at least 10ms", ErrInvalidOption, d)
		}
		c.triggerReload = d
		return nil
	}
}

// WithOverlapPolicy sets what a recurring job (WithCronSpec, WithInterval)
// does at a tick while the instance of an earlier tick is still Scheduled
// or Processing: OverlapAllow (the default) schedules it anyway,
// OverlapForbid skips the tick (logged), OverlapReplace cancels the
// earlier instance first. With a policy other than OverlapAllow each tick
// is scheduled when it is due rather than ahead of it, so the check sees
// the run that is active at the tick.
func WithOverlapPolicy(p OverlapPolicy) JobOption {
	return jobOption(func(j *Job) error {
		switch p {
		case OverlapAllow, OverlapForbid, OverlapReplace:
		default:
			return fmt.Errorf("%w: unknown overlap policy %q; want job.OverlapAllow, OverlapForbid or OverlapReplace", ErrInvalidJob, p)
		}
		j.overlap = p
		return nil
	})
}

// WithMissedTickPolicy sets what a recurring job does, when a manager
// starts, with the ticks missed while no manager ran it: MissedSkip (the
// default) goes on from now; MissedCatchUpOnce schedules one instance for
// the latest missed tick if it is at most within old (within must be
// positive), once per cluster.
func WithMissedTickPolicy(p MissedTickPolicy, within time.Duration) JobOption {
	return jobOption(func(j *Job) error {
		switch {
		case p == MissedSkip:
		case p == MissedCatchUpOnce && within > 0:
		case p == MissedCatchUpOnce:
			return fmt.Errorf("%w: job.MissedCatchUpOnce needs a positive deadline, got %v", ErrInvalidJob, within)
		default:
			return fmt.Errorf("%w: unknown missed-tick policy %q; want job.MissedSkip or MissedCatchUpOnce", ErrInvalidJob, p)
		}
		j.missed, j.catchUpWithin = p, within
		return nil
	})
}

// PutTrigger creates (ifVersion 0) or replaces (ifVersion: the stored
// Version; store.AnyVersion: whatever is stored) a stored trigger and
// returns it as stored. The trigger is
// checked first: an invalid one is an error wrapping store.ErrInvalid,
// and when its kind is registered on this manager its arguments must fit
// the executor (ErrInvalidArguments); otherwise a live node must run the
// kind or the store define it (ErrUnknownKind), so that no tick leaves an
// instance nothing can run. A stale ifVersion is an error
// wrapping store.ErrConflict: read the trigger again and retry. The
// manager's scheduler sees the change at once; others within their
// reload interval.
func (a *Admin) PutTrigger(ctx context.Context, t *Trigger, ifVersion int64) (*Trigger, error) {
	m := a.m
	if t == nil {
		return nil, fmt.Errorf("job: put trigger: %w: nil trigger", store.ErrInvalid)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("job: put trigger: %w", err)
	}
	if err := m.checkTriggerCalendar(ctx, t); err != nil {
		return nil, fmt.Errorf("job: put trigger: %w", err)
	}
	if t.Workflow != "" {
		if err := m.checkTriggerTemplate(ctx, t); err != nil { // trigger_workflow.go
			return nil, fmt.Errorf("job: put trigger %q: %w", t.Name, err)
		}
	} else if j, ok := m.reg.get(t.Kind); ok {
		if _, err := j.exec.decodeArgs(t.Args); err != nil {
			return nil, fmt.Errorf("job: put trigger %q: arguments for kind %q: %w", t.Name, t.Kind, err)
		}
	} else if err := m.checkKindKnown(ctx, t.Kind); err != nil {
		return nil, fmt.Errorf("job: put trigger %q: %w", t.Name, err)
	}
	stored, err := store.TriggersIn(m.store).PutTrigger(ctx, &store.PutTriggerParams{Trigger: t, IfVersion: ifVersion, Now: m.clock.Now()})
	if err != nil {
		return nil, fmt.Errorf("job: put trigger %q: %w", t.Name, err)
	}
	m.triggersChanged()
	return stored, nil
}

// checkKindKnown returns an error wrapping ErrUnknownKind when no node can
// run kind: it is not registered here, no live node reports it, and the
// store holds no definition of it. (Registered here is checked by the
// caller.)
func (m *Manager) checkKindKnown(ctx context.Context, kind string) error {
	_, err := m.store.GetDefinition(ctx, kind)
	if err == nil {
		return nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("read the definition of kind %q: %w", kind, err)
	}
	nodes, err := m.Admin().ListNodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if !n.Status.Gone() && slices.Contains(n.Kinds, kind) {
			return nil
		}
	}
	return unknownKind(kind, "no live node runs it and the store holds no definition of it")
}

// triggersWhere returns `trigger "<name>"` for each stored trigger that
// match accepts, in name order.
func (m *Manager) triggersWhere(ctx context.Context, match func(*store.Trigger) bool) ([]string, error) {
	var names []string
	after := ""
	for {
		page, err := store.TriggersIn(m.store).ListTriggers(ctx, &store.ListTriggersParams{After: after, Limit: store.MaxTriggerPage})
		if err != nil {
			return nil, err
		}
		for _, t := range page.Triggers {
			if match(t) {
				names = append(names, fmt.Sprintf("trigger %q", t.Name))
			}
		}
		if page.Next == "" {
			return names, nil
		}
		after = page.Next
	}
}

// GetTrigger returns the stored trigger of that name, or an error
// wrapping store.ErrNotFound.
func (a *Admin) GetTrigger(ctx context.Context, name string) (*Trigger, error) {
	m := a.m
	t, err := store.TriggersIn(m.store).GetTrigger(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("job: get trigger: %w", err)
	}
	return t, nil
}

// ListTriggers returns one page of the stored triggers in name order: at
// most limit (0: store.DefaultTriggerPage) from cursor on ("" from the
// first), with the cursor of the next page ("" on the last).
func (a *Admin) ListTriggers(ctx context.Context, cursor string, limit int) (*Page[*Trigger], error) {
	m := a.m
	page, err := store.TriggersIn(m.store).ListTriggers(ctx, &store.ListTriggersParams{After: cursor, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("job: list triggers: %w", err)
	}
	return &Page[*Trigger]{Items: page.Triggers, Next: page.Next}, nil
}

// DeleteTrigger deletes the stored trigger of that name: no tick of it
// fires after this manager's next tick, nor after other managers' next
// reload. Instances it scheduled stay.
func (a *Admin) DeleteTrigger(ctx context.Context, name string) error {
	m := a.m
	if err := store.TriggersIn(m.store).DeleteTrigger(ctx, &store.DeleteTriggerParams{Name: name}); err != nil {
		return fmt.Errorf("job: delete trigger: %w", err)
	}
	m.triggersChanged()
	return nil
}

// PauseTrigger pauses the stored trigger of that name: no tick fires until
// ResumeTrigger. Ticks that fall while it is paused are never caught up.
func (a *Admin) PauseTrigger(ctx context.Context, name string) (*Trigger, error) {
	m := a.m
	return m.setPaused(ctx, name, true)
}

// ResumeTrigger resumes a paused stored trigger from now on.
func (a *Admin) ResumeTrigger(ctx context.Context, name string) (*Trigger, error) {
	m := a.m
	return m.setPaused(ctx, name, false)
}

func (m *Manager) setPaused(ctx context.Context, name string, paused bool) (*store.Trigger, error) {
	for try := 0; ; try++ {
		t, err := store.TriggersIn(m.store).GetTrigger(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("job: pause/resume trigger: %w", err)
		}
		if t.Paused == paused {
			return t, nil
		}
		t.Paused = paused
		stored, err := store.TriggersIn(m.store).PutTrigger(ctx, &store.PutTriggerParams{Trigger: t, IfVersion: t.Version, Now: m.clock.Now()})
		if errors.Is(err, store.ErrConflict) && try < 10 {
			continue // a scheduler recorded a tick meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("job: pause/resume trigger %q: %w", name, err)
		}
		m.triggersChanged()
		return stored, nil
	}
}

// ListFireTimes returns the next n fire times of the stored trigger of
// that name after now (by the manager's clock): none while it is paused.
func (a *Admin) ListFireTimes(ctx context.Context, name string, n int) ([]time.Time, error) {
	m := a.m
	t, err := store.TriggersIn(m.store).GetTrigger(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("job: next fire times: %w", err)
	}
	if t.Paused {
		return nil, nil
	}
	return m.Admin().PreviewFireTimes(ctx, t, m.clock.Now(), n)
}

// triggersChanged makes the scheduler reload the triggers at once.
func (m *Manager) triggersChanged() {
	select {
	case m.trigWake <- struct{}{}:
	default:
	}
}

// schedulerDeps is what the trigger scheduler uses.
type schedulerDeps struct {
	store  store.Store
	clock  Clock
	node   string
	log    *slog.Logger
	reload time.Duration // WithTriggerReload
	run    *runScope     // bounds the store calls
	nodes  *nodeState    // no tick while skewed or fenced
	// wake is rung when the stored triggers changed here (reload them).
	wake <-chan struct{}
	// calendarRules reads a stored calendar's rules.
	calendarRules func(ctx context.Context, name string) (*schedule.Rules, error)
	// cancel cancels an instance (a trigger's previous run, under the
	// overlap policy replace).
	cancel func(ctx context.Context, id string) error
	// cancelWorkflow cancels a workflow (the previous run of a trigger
	// of a workflow template, under the overlap policy replace).
	cancelWorkflow func(ctx context.Context, id string) error
	// scheduleTemplate runs a workflow template with parameters as the
	// workflow id (a trigger's tick), storing nothing when it is stored.
	scheduleTemplate func(ctx context.Context, name string, params map[string]any, id string) error
	// jobFor returns the job of a kind, registered here or stored
	// (ErrUnknownKind when neither), for the policy of its ticks.
	jobFor func(ctx context.Context, kind string) (*Job, error)
	// enqueued is called when a tick was enqueued (it wakes the claimer).
	enqueued func()
	// upgrader, when the store has one, moves triggers of a plugin's
	// earlier layout into documents before each load (nil: none).
	upgrader store.TriggerUpgrader
}

// scheduler is the scheduler role (WithScheduler): it keeps the stored
// triggers loaded and fires their due ticks, once per cluster.
type scheduler struct {
	schedulerDeps
	loops
}

var _ service = (*scheduler)(nil)

func newScheduler(d schedulerDeps) *scheduler { return &scheduler{schedulerDeps: d} }

func (s *scheduler) start() {
	s.reset()
	s.goLoop(s.triggerLoop)
}

// triggerState is what the scheduler loop knows of one trigger.
type triggerState struct {
	t *store.Trigger // as last read
	// since: every tick at or before it is decided (fired, skipped,
	// missed, or before the trigger's last change).
	since   time.Time
	retryAt time.Time // after a failed fire: not before then
	fails   int
	// cal is the rules of t's calendar (nil without one, or while it is
	// not stored: then nothing fires); calMissing says it was not found.
	cal        *schedule.Rules
	calMissing bool
}

// next is the first tick of st's trigger after after, shaped by its
// calendar.
func (st *triggerState) next(after time.Time) (time.Time, error) {
	return st.t.Spec().Next(after, st.cal)
}

// triggerBase is the time after which t's ticks are undecided by what is
// stored: its last fired or skipped tick, or its last change by a user
// (the engine writes its records with the tick as their time, so those
// never move UpdatedAt past the tick).
func triggerBase(t *store.Trigger) time.Time {
	b := t.UpdatedAt
	if t.LastTick.After(b) {
		b = t.LastTick
	}
	if t.LastSkipped.After(b) {
		b = t.LastSkipped
	}
	return b
}

// triggerLoop keeps the stored triggers loaded and fires their due ticks.
func (s *scheduler) triggerLoop(quit <-chan struct{}) {
	states := map[string]*triggerState{}
	var reloadAt time.Time
	reload := s.reload
	grace := 2 * reload
	force := false
	for {
		// No ticks while the clock is skewed or unknown, nor while fenced
		// (node.go).
		if !s.nodes.waitOK(quit) {
			return
		}
		now := s.clock.Now()
		if force || !now.Before(reloadAt) {
			if err := s.loadTriggers(states); err != nil {
				s.log.Warn("load stored triggers; keeping the ones loaded", "err", err, "retry_in", reload)
			}
			reloadAt, force = now.Add(reload), false
		}
		for name, st := range states {
			if gone := s.runTrigger(st, now, grace); gone {
				delete(states, name)
			}
		}
		wait := reloadAt.Sub(now)
		for _, st := range states {
			if st.t.Paused {
				continue
			}
			at := st.retryAt
			if n, err := st.next(st.since); err == nil && !n.IsZero() && n.After(at) {
				at = n
			}
			if !at.IsZero() {
				wait = min(wait, at.Sub(now))
			}
		}
		t := s.clock.NewTimer(max(wait, 0))
		select {
		case <-t.C():
		case <-s.wake:
			t.Stop()
			force = true
		case <-quit:
			t.Stop()
			return
		}
	}
}

// loadTriggers reads every stored trigger into states, drops those no
// longer stored, and moves each changed one's since to its base.
func (s *scheduler) loadTriggers(states map[string]*triggerState) error {
	ctx, cancel := context.WithTimeout(s.run.ctx, 30*time.Second)
	defer cancel()
	if s.upgrader != nil {
		n, err := s.upgrader.UpgradeTriggers(ctx)
		if err != nil {
			return fmt.Errorf("move the triggers of the store's earlier layout: %w", err)
		}
		if n > 0 {
			s.log.Info("moved stored triggers of the store's earlier layout into documents", "triggers", n)
		}
	}
	seen := make(map[string]bool, len(states))
	after := ""
	for {
		page, err := store.TriggersIn(s.store).ListTriggers(ctx, &store.ListTriggersParams{After: after, Limit: store.MaxTriggerPage})
		if err != nil {
			return err
		}
		for _, t := range page.Triggers {
			seen[t.Name] = true
			st := states[t.Name]
			switch {
			case st == nil:
				states[t.Name] = &triggerState{t: t, since: triggerBase(t)}
			case t.Version != st.t.Version:
				st.t = t
				if b := triggerBase(t); b.After(st.since) {
					st.since = b
				}
			}
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	for name := range states {
		if !seen[name] {
			delete(states, name)
		}
	}
	s.triggerCalendars(ctx, states)
	return nil
}

// runTrigger fires st's due ticks at now: each tick at most grace late,
// or else, under MissedCatchUpOnce, the latest missed tick when it is
// within the trigger's CatchUpWithin. It reports that the trigger is
// gone from the store.
func (s *scheduler) runTrigger(st *triggerState, now time.Time, grace time.Duration) (gone bool) {
	t := st.t
	if t.Paused || now.Before(st.retryAt) || !st.since.Before(now) {
		return false
	}
	// Ticks in (onFrom, now] are on time; those in (since, onFrom] missed.
	onFrom := st.since
	if g := now.Add(-grace); g.After(onFrom) {
		onFrom = g
	}
	var fire []time.Time
	for tk, _ := st.next(onFrom); !tk.IsZero() && !tk.After(now) && len(fire) < 100; tk, _ = st.next(tk) {
		fire = append(fire, tk)
	}
	if first, _ := st.next(st.since); len(fire) == 0 && !first.IsZero() && !first.After(onFrom) {
		var missed time.Time
		if t.Missed == store.MissedCatchUpOnce {
			floor := st.since
			if f := now.Add(-t.CatchUpWithin - time.Nanosecond); f.After(floor) {
				floor = f
			}
			missed = latestTick(func(after time.Time) time.Time { n, _ := st.next(after); return n }, onFrom, floor)
		}
		if !missed.IsZero() {
			s.log.Info("stored trigger catches up its latest missed tick", "trigger", t.Name, "tick", missed)
			fire = []time.Time{missed}
		} else {
			s.log.Info("stored trigger missed ticks while no scheduler ran; skipped (missed-tick policy)", "trigger", t.Name, "first", first, "policy", t.Missed)
		}
	}
	for _, tk := range fire {
		err := s.fireTrigger(st, tk, now)
		if errors.Is(err, store.ErrNotFound) {
			return true
		}
		if err != nil {
			st.fails++
			d := retryDelay(st.fails - 1)
			st.retryAt = now.Add(d)
			s.log.Warn("fire stored trigger tick; retrying", "trigger", t.Name, "tick", tk, "err", err, "in", d)
			return false
		}
		st.fails, st.retryAt = 0, time.Time{}
		st.since = tk
	}
	st.since = now
	return false
}

// fireTrigger fires tick of st's trigger once per cluster, applying the
// overlap policy, and records it in the trigger. It reads the trigger
// first, so a pause, a delete or a change made since the last reload
// holds at once, and a tick another manager fired or skipped already is
// left alone.
func (s *scheduler) fireTrigger(st *triggerState, tick, now time.Time) error {
	ctx, cancel := context.WithTimeout(s.run.ctx, 30*time.Second)
	defer cancel()
	cur, err := store.TriggersIn(s.store).GetTrigger(ctx, st.t.Name)
	if err != nil {
		return err
	}
	st.t = cur
	cal := s.triggerRules(ctx, st, cur)
	if cur.Paused || !cur.LastTick.Before(tick) || !cur.LastSkipped.Before(tick) || cur.UpdatedAt.After(tick) {
		return nil // paused, fired or skipped already, or changed since the tick
	}
	if n, err := cur.Spec().Next(tick.Add(-time.Nanosecond), cal); err != nil || !n.Equal(tick) {
		return nil // not a tick of its current schedule
	}
	if skip, err := s.overlap(ctx, cur, tick, now); skip || err != nil {
		return err
	}
	if cur.Workflow != "" {
		return s.fireWorkflow(ctx, cur, tick) // trigger_workflow.go
	}
	rec, err := s.triggerRecord(ctx, cur, cal, tick, now)
	if err != nil {
		return err
	}
	res, err := s.store.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{rec}, Node: s.node, Now: now})
	if err != nil {
		return err
	}
	if len(res) != 1 {
		return fmt.Errorf("enqueue returned %d results for 1 instance", len(res))
	}
	if res[0].Err != nil && !errors.Is(res[0].Err, store.ErrDuplicate) {
		return res[0].Err
	}
	if res[0].Err == nil && !res[0].Existed {
		s.enqueued()
	}
	return s.recordTick(ctx, cur, tick, rec.ID)
}

// recordTick records in t that tick fired, starting id.
func (s *scheduler) recordTick(ctx context.Context, t *store.Trigger, tick time.Time, id string) error {
	_, err := s.recordTrigger(ctx, t, tick, func(t *store.Trigger) bool {
		if !t.LastTick.Before(tick) {
			return false
		}
		t.LastTick, t.LastInstanceID = tick, id
		return true
	})
	return err
}

// overlap applies cur's overlap policy to tick: under forbid, while the
// previous run is active, it records the tick as skipped and reports
// skip; under replace it cancels the previous run. skip is true too when
// err is not nil.
func (s *scheduler) overlap(ctx context.Context, cur *store.Trigger, tick, now time.Time) (skip bool, err error) {
	prev := cur.LastInstanceID
	if prev == "" || cur.Overlap == "" || cur.Overlap == store.OverlapAllow {
		return false, nil
	}
	in, err := s.activeInstance(ctx, prev)
	if err != nil {
		return true, err
	}
	active := in != nil
	if active && cur.Overlap == store.OverlapForbid {
		applied, err := s.recordTrigger(ctx, cur, tick, func(t *store.Trigger) bool {
			if !t.LastSkipped.Before(tick) || !t.LastTick.Before(tick) {
				return false
			}
			t.Skipped++
			t.LastSkipped = tick
			return true
		})
		if err != nil || !applied {
			return true, err // or another manager recorded the skip
		}
		msg := fmt.Sprintf("tick %s of trigger %q skipped: this run is still active (overlap policy forbid)", tick.UTC().Format(time.RFC3339Nano), cur.Name)
		s.log.Info("stored trigger skipped a tick: its previous run is still active (overlap policy forbid)", "trigger", cur.Name, "tick", tick, "previous", prev)
		// The skip shows in the logs of the run that caused it.
		if err := s.store.AppendLogs(ctx, []*store.LogRecord{{InstanceID: in.ID, Kind: in.Kind, Attempt: in.Attempt, Level: store.LevelInfo, Time: now, Node: s.node, Message: msg}}); err != nil {
			s.log.Warn("log a skipped tick on the run that caused it", "trigger", cur.Name, "instance", prev, "err", err)
		}
		return true, nil
	}
	if active && cur.Overlap == store.OverlapReplace {
		cancel := s.cancel
		if cur.Workflow != "" {
			cancel = s.cancelWorkflow
		}
		if err := cancel(ctx, prev); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrFinished) {
			return true, fmt.Errorf("cancel the previous run %s (overlap policy replace): %w", prev, err)
		}
		s.log.Info("stored trigger canceled its previous run (overlap policy replace)", "trigger", cur.Name, "tick", tick, "previous", prev)
	}
	return false, nil
}

// recordTrigger applies change to the stored trigger with a
// compare-and-set, reading it again after a conflict; change reports
// whether there is anything to write. The write's time is the tick, so
// it never moves the trigger's UpdatedAt past the tick (see triggerBase).
// applied reports that this call wrote the change.
func (s *scheduler) recordTrigger(ctx context.Context, t *store.Trigger, tick time.Time, change func(*store.Trigger) bool) (applied bool, err error) {
	for try := 0; try < 10; try++ {
		if !change(t) {
			return false, nil
		}
		_, err := store.TriggersIn(s.store).PutTrigger(ctx, &store.PutTriggerParams{Trigger: t, IfVersion: t.Version, Now: tick})
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return false, err
		}
		if t, err = store.TriggersIn(s.store).GetTrigger(ctx, t.Name); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("record tick %v of trigger %q: too many conflicting writers", tick, t.Name)
}

// activeInstance returns the instance id when it is Scheduled or
// Processing, else nil (an instance no longer stored is not active).
func (s *scheduler) activeInstance(ctx context.Context, id string) (*store.Instance, error) {
	ins, err := s.store.LookupInstances(ctx, &store.Query{InstanceID: id, Limit: 1})
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return nil, err
	}
	if len(ins) == 1 && (ins[0].State == store.Scheduled || ins[0].State == store.Processing || ins[0].State == store.Created) {
		return ins[0], nil
	}
	return nil, nil
}

// triggerSpace is the UUID namespace of the instance IDs of stored
// triggers' ticks.
var triggerSpace = uuid.MustParse("0d6b1c52-8f0e-4f61-a7c4-2f1b7d9e6a30")

// triggerInstanceID is the ID of the instance of t's tick: the same on
// every manager, so the store keeps one whichever fires it, for as long
// as the instance is stored. A trigger created again under the same name
// has another CreatedAt, and other IDs.
func triggerInstanceID(t *store.Trigger, tick time.Time) string {
	return uuid.NewSHA1(triggerSpace, []byte(t.Name+"\x00"+strconv.FormatInt(t.CreatedAt.UnixNano(), 10)+"\x00"+strconv.FormatInt(tick.UnixNano(), 10))).String()
}

// triggerTickKey is the stored unique key of a stored trigger's tick:
// tickKey of its kind, followed by "@" and the trigger's name, so tickOf
// knows it as a tick and two triggers of one kind never share a key.
func triggerTickKey(t *store.Trigger, tick time.Time) string {
	return tickKey(t.Kind, tick) + "@" + t.Name
}

// triggerRecord builds the instance of t's tick, due at the tick. The
// kind's policy (queue, priority, retries, timeout) comes from its job
// when it is registered on this manager, else from its stored definition
// (as ScheduleJob takes it); a kind with neither gets the defaults
// (DefaultQueue), so its ticks wait there, visible, for a manager that
// runs the kind.
func (s *scheduler) triggerRecord(ctx context.Context, t *store.Trigger, cal *schedule.Rules, tick, now time.Time) (*store.Instance, error) {
	args := t.Args
	if len(args) == 0 {
		args = []byte("[]")
	}
	period := time.Minute
	if n, err := t.Spec().Next(tick, cal); err == nil && !n.IsZero() {
		period = n.Sub(tick)
	}
	hold := max(time.Minute, 2*period)
	rec := &store.Instance{
		ID:          triggerInstanceID(t, tick),
		Kind:        t.Kind,
		Queue:       DefaultQueue,
		Args:        args,
		Priority:    int(NormalPriority),
		MaxRetries:  DefaultMaxRetries,
		CreatedAt:   now,
		RunAt:       tick,
		UniqueKey:   triggerTickKey(t, tick),
		UniqueUntil: later(tick, now).Add(hold),
	}
	j, err := s.jobFor(ctx, t.Kind)
	switch {
	case err == nil:
		rec.Queue, rec.Priority, rec.MaxRetries, rec.Timeout = j.queue, int(j.priority), j.maxRetries, j.timeout
		rec.Labels = j.labels
		if err := j.setLimitKey(rec, nil); err != nil {
			return nil, err
		}
	case !errors.Is(err, ErrUnknownKind):
		return nil, err
	}
	return rec, nil
}

// latestTick returns the last tick of a schedule (next gives the first
// tick after a time) in (floor, x], or zero when there is none. It looks
// back from x in windows that double from about one period, so it costs a
// few periods' ticks, not every tick since floor.
func latestTick(next func(after time.Time) time.Time, x, floor time.Time) time.Time {
	w := time.Second
	if n1 := next(x); !n1.IsZero() {
		if n2 := next(n1); !n2.IsZero() {
			w = max(w, n2.Sub(n1))
		}
	}
	for {
		s := floor
		if w < x.Sub(floor) && w < math.MaxInt64/2 {
			s = x.Add(-w)
		}
		var last time.Time
		for tk := next(s); !tk.IsZero() && !tk.After(x); tk = next(tk) {
			last = tk
		}
		if !last.IsZero() || s.Equal(floor) {
			return last
		}
		w = min(2*w, math.MaxInt64/2)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// triggerUpgrader is s's store.TriggerUpgrader, or nil.
func triggerUpgrader(s store.Store) store.TriggerUpgrader {
	u, _ := s.(store.TriggerUpgrader)
	return u
}

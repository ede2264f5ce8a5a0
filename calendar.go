package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jobkit/job/schedule"
	"github.com/jobkit/job/store"
)

// Calendars (store.Calendar) are data: a time zone, the working weekdays
// and the dates off, kept as documents of store.CalendarCollection and
// edited at run time by any process. A stored trigger names one in its
// Calendar field, a recurring job with WithCalendar; the calendar's policy
// then decides which ticks fire, and when.

// ErrCalendarInUse: a calendar cannot be deleted while a stored trigger
// or a recurring job of this manager runs on it.
var ErrCalendarInUse = errors.New("job: calendar in use")

// WithCalendar makes a recurring job (WithCronSpec, WithInterval) run on
// the stored calendar of that name under policy p (empty:
// schedule.Workdays).
// The calendar is read from the store when the job's ticker starts and
// again every trigger reload interval (WithTriggerReload), so edits take
// effect without a restart. While it is not stored the job schedules no
// tick and logs a warning; ticks missed meanwhile follow the job's
// missed-tick policy. A moved tick (schedule.NextWorkday) is keyed by the
// time it moved to, the same on every manager, so it runs once per
// cluster.
func WithCalendar(name string, p schedule.Policy) JobOption {
	return jobOption(func(j *Job) error {
		if err := store.CheckTriggerName(name); err != nil {
			return fmt.Errorf("%w: calendar name: %w", ErrInvalidJob, err)
		}
		if err := schedule.CheckPolicy(p); err != nil {
			return fmt.Errorf("%w: %w: %w", ErrInvalidJob, store.ErrInvalid, err)
		}
		if p == "" {
			p = schedule.Workdays
		}
		j.calendar, j.calPolicy = name, p
		return nil
	})
}

// PutCalendar creates (ifVersion 0), replaces (the Version read) or
// writes whatever is stored (store.AnyVersion) the calendar c, after
// checking it (store.Calendar.Validate: an invalid one, such as one whose
// days are all off, is an error wrapping store.ErrInvalid and nothing is
// stored). It returns the calendar as stored, its weekdays from Monday
// and its dates in date order. Schedulers see the change
// at their next reload (this manager's at once).
func (a *Admin) PutCalendar(ctx context.Context, c *Calendar, ifVersion int64) (*Calendar, error) {
	m := a.m
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("job: put calendar: %w", err)
	}
	// Stored in a stable order: weekdays from Monday, dates by date.
	c = c.Clone()
	iso := func(d time.Weekday) int { return (int(d) + 6) % 7 }
	sort.Slice(c.Workdays, func(i, j int) bool { return iso(c.Workdays[i]) < iso(c.Workdays[j]) })
	sort.SliceStable(c.Dates, func(i, j int) bool { return c.Dates[i].Date < c.Dates[j].Date })
	body, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("job: put calendar %q: %w", c.Name, err)
	}
	d, err := m.store.PutDocument(ctx, &store.PutDocumentParams{Collection: store.CalendarCollection, Name: c.Name, Body: body, IfVersion: ifVersion, Now: m.clock.Now()})
	if err != nil {
		return nil, fmt.Errorf("job: put calendar %q: %w", c.Name, err)
	}
	m.cals.forget(c.Name)
	m.triggersChanged()
	return store.DecodeCalendar(d)
}

// GetCalendar returns the stored calendar of that name, or an error
// wrapping store.ErrNotFound that names it.
func (a *Admin) GetCalendar(ctx context.Context, name string) (*Calendar, error) {
	m := a.m
	d, err := m.store.GetDocument(ctx, store.CalendarCollection, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("job: %w", store.CalendarNotFound(name))
	}
	if err != nil {
		return nil, fmt.Errorf("job: get calendar %q: %w", name, err)
	}
	c, err := store.DecodeCalendar(d)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	return c, nil
}

// ListCalendars returns one page of the stored calendars in name order:
// at most limit (0: store.DefaultDocumentPage) from cursor on ("" from the
// first), with the cursor of the next page ("" on the last).
func (a *Admin) ListCalendars(ctx context.Context, cursor string, limit int) (*Page[*Calendar], error) {
	m := a.m
	page, err := m.store.ListDocuments(ctx, &store.ListDocumentsParams{Collection: store.CalendarCollection, After: cursor, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("job: list calendars: %w", err)
	}
	out := &Page[*Calendar]{Items: make([]*Calendar, 0, len(page.Documents)), Next: page.Next}
	for _, d := range page.Documents {
		c, err := store.DecodeCalendar(d)
		if err != nil {
			return nil, fmt.Errorf("job: list calendars: %w", err)
		}
		out.Items = append(out.Items, c)
	}
	return out, nil
}

// DeleteCalendar deletes the stored calendar of that name (only at
// ifVersion when not 0). It refuses, with an error wrapping
// ErrCalendarInUse that names them, while stored triggers or recurring
// jobs registered on this manager run on it: change or delete those
// first. (A trigger created on another process at the same moment may
// still name it; such a trigger fires no tick until the calendar is
// stored again, and its scheduler logs why.)
func (a *Admin) DeleteCalendar(ctx context.Context, name string, ifVersion int64) error {
	m := a.m
	users, err := m.calendarUsers(ctx, name)
	if err != nil {
		return fmt.Errorf("job: delete calendar %q: %w", name, err)
	}
	if len(users) > 0 {
		return fmt.Errorf("%w: calendar %q is used by %s; point them at another calendar or delete them first", ErrCalendarInUse, name, strings.Join(users, ", "))
	}
	if err := m.store.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: store.CalendarCollection, Name: name, IfVersion: ifVersion}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("job: %w", store.CalendarNotFound(name))
		}
		return fmt.Errorf("job: delete calendar %q: %w", name, err)
	}
	m.cals.forget(name)
	m.triggersChanged()
	return nil
}

// ListCalendarUsers returns one page of what runs on the calendar of
// that name: "trigger <name>" for each stored trigger, "job <kind>" for
// each recurring job registered on this manager, sorted; at most limit
// (0: store.DefaultTriggerPage) after cursor ("" from the first), with
// the cursor of the next page ("" on the last).
func (a *Admin) ListCalendarUsers(ctx context.Context, name, cursor string, limit int) (*Page[string], error) {
	if limit < 0 {
		return nil, fmt.Errorf("%w: calendar users page limit %d; want 0 (default) or more", store.ErrInvalid, limit)
	}
	if limit == 0 {
		limit = store.DefaultTriggerPage
	}
	users, err := a.m.calendarUsers(ctx, name)
	if err != nil {
		return nil, err
	}
	from, _ := slices.BinarySearch(users, cursor)
	if from < len(users) && users[from] == cursor {
		from++
	}
	page := &Page[string]{Items: users[from:]}
	if len(page.Items) > limit {
		page.Items = page.Items[:limit]
		page.Next = page.Items[limit-1]
	}
	return page, nil
}

// calendarUsers returns every user of the calendar of that name (see
// ListCalendarUsers), sorted.
func (m *Manager) calendarUsers(ctx context.Context, name string) ([]string, error) {
	users, err := m.triggersWhere(ctx, func(t *store.Trigger) bool { return t.Calendar == name })
	if err != nil {
		return nil, err
	}
	for _, j := range m.reg.all() {
		if j.recurring != nil && j.calendar == name {
			users = append(users, fmt.Sprintf("job %q", j.kind))
		}
	}
	sort.Strings(users)
	return users, nil
}

// GetCalendarRules returns the compiled rules of the stored calendar of that
// name, or an error wrapping store.ErrNotFound that names it.
func (a *Admin) GetCalendarRules(ctx context.Context, name string) (*schedule.Rules, error) {
	m := a.m
	c, err := m.Admin().GetCalendar(ctx, name)
	if err != nil {
		return nil, err
	}
	r, err := c.Compile()
	if err != nil {
		return nil, fmt.Errorf("job: stored calendar %q: %w", name, err)
	}
	return r, nil
}

// PreviewFireTimes returns the next n fire times after after of t, stored
// or not, shaped by its calendar as stored now: what the scheduler would
// fire (a paused trigger's included). A trigger that names a calendar
// that is not stored is an error wrapping store.ErrNotFound that names
// it.
func (a *Admin) PreviewFireTimes(ctx context.Context, t *Trigger, after time.Time, n int) ([]time.Time, error) {
	m := a.m
	var cal *schedule.Rules
	if t.Calendar != "" {
		r, err := m.Admin().GetCalendarRules(ctx, t.Calendar)
		if err != nil {
			return nil, fmt.Errorf("job: trigger %q: %w", t.Name, err)
		}
		cal = r
	}
	return t.Spec().NextTimes(after, n, cal)
}

// checkTriggerCalendar checks, before t is stored, that its calendar is
// stored and lets it fire: a trigger that would never fire on it (a
// Saturday schedule on working days) is refused.
func (m *Manager) checkTriggerCalendar(ctx context.Context, t *store.Trigger) error {
	if t.Calendar == "" {
		return nil
	}
	ts, err := m.Admin().PreviewFireTimes(ctx, t, m.clock.Now(), 1)
	if err != nil {
		return err
	}
	if len(ts) == 0 {
		return fmt.Errorf("%w: trigger %q never fires on calendar %q under policy %q (within five years); pick another schedule or policy", store.ErrInvalid, t.Name, t.Calendar, t.CalendarPolicy)
	}
	return nil
}

// calendarCache keeps the calendars recurring jobs run on, each read
// again once it is older than the trigger reload interval.
type calendarCache struct {
	mu sync.Mutex
	m  map[string]cachedCalendar
}

type cachedCalendar struct {
	rules *schedule.Rules
	at    time.Time
}

func (c *calendarCache) forget(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}

// rules returns the rules of calendar name, read from the store when the
// cached ones are older than the reload interval. A calendar that cannot
// be read keeps its last rules, if any, so a store hiccup does not stop
// the job's ticks.
func (m *Manager) cachedCalendar(name string) (*schedule.Rules, error) {
	now := m.clock.Now()
	m.cals.mu.Lock()
	c, ok := m.cals.m[name]
	m.cals.mu.Unlock()
	if ok && now.Sub(c.at) < m.cfg.triggerReload {
		return c.rules, nil
	}
	ctx, cancel := context.WithTimeout(m.run.ctx, 30*time.Second)
	defer cancel()
	r, err := m.Admin().GetCalendarRules(ctx, name)
	if err != nil {
		if ok && !errors.Is(err, store.ErrNotFound) {
			return c.rules, nil
		}
		return nil, err
	}
	m.cals.mu.Lock()
	if m.cals.m == nil {
		m.cals.m = map[string]cachedCalendar{}
	}
	m.cals.m[name] = cachedCalendar{rules: r, at: now}
	m.cals.mu.Unlock()
	return r, nil
}

// recurNext returns the first tick of recurring job j after after,
// shaped by its calendar; an error when the calendar is not stored.
func (m *Manager) recurNext(j *Job, after time.Time) (time.Time, error) {
	if j.calendar == "" {
		return j.recurring.next(after), nil
	}
	r, err := m.cachedCalendar(j.calendar)
	if err != nil {
		return time.Time{}, err
	}
	return r.Next(j.recurring.next, after, j.calPolicy), nil
}

// recurNextFunc is recurNext as a function of after alone, zero on an
// error.
func (m *Manager) recurNextFunc(j *Job) func(time.Time) time.Time {
	return func(after time.Time) time.Time {
		t, _ := m.recurNext(j, after)
		return t
	}
}

// triggerCalendars reads the calendars the triggers in states run on,
// each once, and gives each trigger its rules (nil when its calendar is
// not stored, so it fires nothing; logged when that changes).
func (s *scheduler) triggerCalendars(ctx context.Context, states map[string]*triggerState) {
	rules := map[string]*schedule.Rules{}
	failed := map[string]error{}
	for _, st := range states {
		name := st.t.Calendar
		if name == "" {
			st.cal = nil
			continue
		}
		if _, done := rules[name]; !done && failed[name] == nil {
			r, err := s.calendarRules(ctx, name)
			if err != nil {
				failed[name] = err
			} else {
				rules[name] = r
			}
		}
		if err := failed[name]; err != nil {
			if !errors.Is(err, store.ErrNotFound) && st.cal != nil && st.cal.Name() == name {
				continue // unreadable for now: keep the rules it has
			}
			if st.cal != nil || !st.calMissing {
				s.log.Warn("stored trigger fires no tick: its calendar cannot be read", "trigger", st.t.Name, "calendar", name, "err", err)
			}
			st.cal, st.calMissing = nil, true
			continue
		}
		if st.calMissing {
			s.log.Info("stored trigger's calendar is back; it fires again", "trigger", st.t.Name, "calendar", name)
		}
		st.cal, st.calMissing = rules[name], false
	}
}

// triggerRules returns the rules for cur, a trigger just read, taking
// st's when they are of its calendar and reading the calendar otherwise.
func (s *scheduler) triggerRules(ctx context.Context, st *triggerState, cur *store.Trigger) *schedule.Rules {
	if cur.Calendar == "" {
		return nil
	}
	if st.cal != nil && st.cal.Name() == cur.Calendar {
		return st.cal
	}
	r, err := s.calendarRules(ctx, cur.Calendar)
	if err != nil {
		return nil
	}
	return r
}

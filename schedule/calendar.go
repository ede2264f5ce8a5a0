package schedule

import (
	"fmt"
	"strings"
	"time"
)

// Policy says how a calendar shapes a schedule's ticks.
type Policy string

// The calendar policies.
const (
	// Workdays fires only the ticks that fall on a working day (a working
	// weekday, not a date off); the others are skipped. The default when
	// a calendar is named without a policy.
	Workdays Policy = "workdays"
	// SkipDates skips only the ticks that fall on a date off; weekends
	// are not days off under it.
	SkipDates Policy = "skip-dates"
	// NextWorkday moves a tick that falls on a day off to the next
	// working day, at the same clock time in the calendar's zone. Moved
	// ticks that land on the same time are one run (a daily tick moved
	// off Saturday and Sunday runs once on Monday, together with Monday's
	// own).
	NextWorkday Policy = "next-workday"
)

// CheckPolicy returns an error matching ErrInvalid unless p is a known
// policy or empty (Workdays).
func CheckPolicy(p Policy) error {
	switch p {
	case "", Workdays, SkipDates, NextWorkday:
		return nil
	}
	return invalidf("unknown calendar policy %q; want %q, %q or %q", p, Workdays, SkipDates, NextWorkday)
}

// Date is one day off of a calendar.
type Date struct {
	// Date is the day, "2026-12-25"; with Yearly, only its month and day
	// count, from its year on (the year of Date is the first year).
	Date string `json:"date"`
	// Name says what the day is ("Christmas Day"), for people.
	Name string `json:"name,omitempty"`
	// Yearly makes the day off every year on the same month and day, from
	// the year of Date on. 29 February falls only in leap years.
	Yearly bool `json:"yearly,omitempty"`
}

// ParseWeekday reads a weekday by its English name or its first three
// letters, in any case ("mon", "Monday").
func ParseWeekday(s string) (time.Weekday, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	for d := time.Sunday; d <= time.Saturday; d++ {
		n := strings.ToLower(d.String())
		if l == n || l == n[:3] {
			return d, nil
		}
	}
	return 0, invalidf("weekday %q; want a name such as \"mon\" or \"Monday\"", s)
}

// horizonDays is how far ahead Next looks for a working day before it
// says the schedule never fires: a little over five years.
const horizonDays = 5*366 + 7

// Rules is a compiled calendar: it judges days and shapes schedules. It
// is immutable, safe for concurrent use.
type Rules struct {
	name   string
	loc    *time.Location
	work   [7]bool
	dates  map[civil]string
	yearly map[[2]int]yearlyDate
}

type yearlyDate struct {
	from int // the first year
	name string
}

// NewRules compiles the calendar called name: its days are read in zone
// (an IANA name; empty means UTC), its working weekdays are workdays
// (each once, at least one), and dates are its days off (each day once).
// A calendar whose days are all off from its last fixed date on is
// refused, since a schedule on it would never fire. Every error matches
// ErrInvalid and names the fix.
func NewRules(name, zone string, workdays []time.Weekday, dates []Date) (*Rules, error) {
	bad := func(format string, args ...any) error {
		return invalidf("calendar %q: %s", name, fmt.Sprintf(format, args...))
	}
	r := &Rules{name: name, loc: time.UTC, dates: map[civil]string{}, yearly: map[[2]int]yearlyDate{}}
	if zone != "" {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return nil, bad("time zone %q: %v; use an IANA name such as \"Europe/Paris\"", zone, err)
		}
		r.loc = loc
	}
	if len(workdays) == 0 {
		return nil, bad("no working weekday, so every day is off and a trigger on it would never fire; list the working weekdays (such as mon to fri)")
	}
	for _, d := range workdays {
		if d < time.Sunday || d > time.Saturday {
			return nil, bad("weekday %d; want 0 (Sunday) to 6 (Saturday)", int(d))
		}
		if r.work[d] {
			return nil, bad("weekday %v listed twice; list each once", d)
		}
		r.work[d] = true
	}
	for _, d := range dates {
		t, err := time.Parse(time.DateOnly, d.Date)
		if err != nil {
			return nil, bad("date %q: want YYYY-MM-DD, such as 2026-12-25", d.Date)
		}
		day := civilOf(t)
		if d.Yearly {
			k := [2]int{int(day.m), day.d}
			if _, dup := r.yearly[k]; dup {
				return nil, bad("yearly date %s listed twice (the same month and day); list it once", d.Date)
			}
			r.yearly[k] = yearlyDate{from: day.y, name: d.Name}
			continue
		}
		if _, dup := r.dates[day]; dup {
			return nil, bad("date %s listed twice; list it once", d.Date)
		}
		r.dates[day] = d.Name
	}
	if !r.worksAgain() {
		return nil, bad("every day from its last date on is off (the working weekdays all fall on its yearly dates), so a trigger on it would never fire; list fewer days off")
	}
	return r, nil
}

// civil is a day of the calendar, without a zone.
type civil struct {
	y int
	m time.Month
	d int
}

func civilOf(t time.Time) civil {
	y, m, d := t.Date()
	return civil{y, m, d}
}

// add returns the day n days after c.
func (c civil) add(n int) civil {
	return civilOf(time.Date(c.y, c.m, c.d+n, 12, 0, 0, 0, time.UTC))
}

func (c civil) weekday() time.Weekday {
	return time.Date(c.y, c.m, c.d, 12, 0, 0, 0, time.UTC).Weekday()
}

func (c civil) after(o civil) bool {
	return c.y > o.y || c.y == o.y && (c.m > o.m || c.m == o.m && c.d > o.d)
}

// Name returns the calendar's name.
func (r *Rules) Name() string { return r.name }

// Location returns the calendar's time zone.
func (r *Rules) Location() *time.Location { return r.loc }

// dayOff reports whether day is one of the calendar's dates, and its
// name.
func (r *Rules) dayOff(day civil) (string, bool) {
	if n, ok := r.dates[day]; ok {
		return n, true
	}
	if y, ok := r.yearly[[2]int{int(day.m), day.d}]; ok && day.y >= y.from {
		return y.name, true
	}
	return "", false
}

// works reports whether day is a working day: a working weekday and not
// a date off.
func (r *Rules) works(day civil) bool {
	if !r.work[day.weekday()] {
		return false
	}
	_, off := r.dayOff(day)
	return !off
}

// IsWorkday reports whether t falls on a working day in the calendar's
// zone.
func (r *Rules) IsWorkday(t time.Time) bool { return r.works(civilOf(t.In(r.loc))) }

// DayOff reports whether t falls on one of the calendar's dates (in its
// zone), and that date's name.
func (r *Rules) DayOff(t time.Time) (name string, off bool) {
	return r.dayOff(civilOf(t.In(r.loc)))
}

// worksAgain reports whether some day after the last fixed date is a
// working day, so the calendar never runs out of them. Weekdays and
// yearly dates repeat every 400 years (146097 days, whole weeks), so one
// such span tells.
func (r *Rules) worksAgain() bool {
	start := civil{1970, time.January, 1}
	for d := range r.dates {
		if d.after(start) {
			start = d
		}
	}
	for y := range r.yearly {
		if from := (civil{r.yearly[y].from, time.January, 1}); from.after(start) {
			start = from
		}
	}
	day := start.add(1)
	span := 7
	if len(r.yearly) > 0 {
		span = 146097
	}
	for range span {
		if r.works(day) {
			return true
		}
		day = day.add(1)
	}
	return false
}

// allows reports whether a tick at t fires as it is under policy p.
func (r *Rules) allows(t time.Time, p Policy) bool {
	day := civilOf(t.In(r.loc))
	if p == SkipDates {
		_, off := r.dayOff(day)
		return !off
	}
	return r.works(day)
}

// startOf returns the first instant of day in the calendar's zone.
func (r *Rules) startOf(day civil) time.Time {
	t := time.Date(day.y, day.m, day.d, 0, 0, 0, 0, r.loc)
	if civilOf(t) != day { // midnight skipped by a DST change
		t = time.Date(day.y, day.m, day.d, 1, 0, 0, 0, r.loc)
	}
	return t
}

// nextWorkday returns the first working day after day.
func (r *Rules) nextWorkday(day civil) (civil, bool) {
	for range horizonDays {
		day = day.add(1)
		if r.works(day) {
			return day, true
		}
	}
	return civil{}, false
}

// moved returns where NextWorkday moves a tick at t that falls on a day
// off: the next working day, at t's clock time in the calendar's zone (a
// clock time a DST change skips that day is read as Go's time.Date reads
// it, the same on every node).
func (r *Rules) moved(t time.Time) (time.Time, bool) {
	lt := t.In(r.loc)
	w, ok := r.nextWorkday(civilOf(lt))
	if !ok {
		return time.Time{}, false
	}
	return time.Date(w.y, w.m, w.d, lt.Hour(), lt.Minute(), lt.Second(), lt.Nanosecond(), r.loc).UTC(), true
}

// Next returns the first fire time after after of a schedule whose raw
// ticks next gives (next(x) is the first tick after x, zero when there is
// none), shaped by the calendar under policy p; zero when none is within
// about five years. Under NextWorkday a tick that fell on a day off
// before after may fire after it, moved.
func (r *Rules) Next(next func(time.Time) time.Time, after time.Time, p Policy) time.Time {
	if p == NextWorkday {
		return r.nextMoved(next, after)
	}
	limit := after.AddDate(0, 0, horizonDays)
	t := next(after)
	for !t.IsZero() && t.Before(limit) {
		if r.allows(t, p) {
			return t.UTC()
		}
		// Skip the rest of the day off at once, not tick by tick.
		day := civilOf(t.In(r.loc))
		t = next(r.startOf(day.add(1)).Add(-time.Nanosecond))
	}
	return time.Time{}
}

// nextMoved is Next under NextWorkday. The ticks that can fire first
// after after are those after it and those of the days off just before
// its day (moved onto its day or later): it walks them from the start of
// those days off, each day off costing one tick (the first whose moved
// time is after after), and stops at the first working tick, past which
// nothing fires earlier.
func (r *Rules) nextMoved(next func(time.Time) time.Time, after time.Time) time.Time {
	aday := civilOf(after.In(r.loc))
	from := after
	first := aday
	for range horizonDays {
		prev := first.add(-1)
		if r.works(prev) {
			break
		}
		first = prev
	}
	if first != aday || !r.works(aday) {
		from = r.startOf(first).Add(-time.Nanosecond)
	}
	limit := after.AddDate(0, 0, horizonDays)
	var best time.Time
	t := next(from)
	for !t.IsZero() && t.Before(limit) && (best.IsZero() || !t.After(best)) {
		if r.IsWorkday(t) {
			if t.After(after) && (best.IsZero() || t.Before(best)) {
				best = t
			}
			t = next(t)
			continue
		}
		day := civilOf(t.In(r.loc))
		if m, ok := r.moved(t); ok {
			if !m.After(after) {
				// Ticks of this day that move past after: those whose
				// clock time is later than the moved one of t was, by as
				// much as after is past it.
				t = next(t.Add(after.Sub(m)))
				if t.IsZero() || civilOf(t.In(r.loc)) != day {
					continue
				}
				m, ok = r.moved(t)
			}
			if ok && m.After(after) && (best.IsZero() || m.Before(best)) {
				best = m
			}
		}
		t = next(r.startOf(day.add(1)).Add(-time.Nanosecond))
	}
	if best.IsZero() {
		return best
	}
	return best.UTC()
}

// NextTimes returns the next n fire times after after (see Next).
func (r *Rules) NextTimes(next func(time.Time) time.Time, after time.Time, n int, p Policy) []time.Time {
	out := make([]time.Time, 0, max(n, 0))
	for range n {
		t := r.Next(next, after, p)
		if t.IsZero() {
			break
		}
		out = append(out, t)
		after = t
	}
	return out
}

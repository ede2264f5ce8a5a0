// Package icalimport reads the days off of an iCalendar file (RFC 5545),
// such as a published list of bank holidays, into the dates of a jobkit
// calendar (store.Calendar).
//
// Every VEVENT counts: an all-day event (DTSTART;VALUE=DATE) is off from
// DTSTART up to, not including, DTEND (one day without DTEND); a timed
// event is off on each day it touches in the calendar's zone. An event
// that repeats every year on the same day (RRULE:FREQ=YEARLY with no
// count, end or other rule part) becomes one yearly date; any other
// RRULE (with RDATE and EXDATE) is expanded between Options.From and
// Options.Until. Cancelled events are left out.
//
// It is a module of its own so that the iCalendar parser
// (github.com/emersion/go-ical, with github.com/teambition/rrule-go)
// reaches only the programs that import calendars, never the core.
package icalimport

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	ical "github.com/emersion/go-ical"
	"github.com/teambition/rrule-go"

	"github.com/jobkit/job/schedule"
	"github.com/jobkit/job/store"
)

// ErrInvalid is what a malformed file or an unusable event wraps; it is
// store.ErrInvalid, so a server answers it as bad input.
var ErrInvalid = store.ErrInvalid

// MaxFileBytes bounds the file Parse reads.
const MaxFileBytes = 4 << 20

// maxEventDays bounds how many days one event may cover.
const maxEventDays = 366

// Options tune Parse.
type Options struct {
	// Location reads the days of timed events and the floating times (no
	// TZID, no Z) of the file. Defaults to the file's X-WR-TIMEZONE, else
	// UTC.
	Location *time.Location
	// From and Until bound the expansion of repeating events that are not
	// simply yearly: their occurrences in [From, Until] are listed. From
	// defaults to the start of the current year (by Now), Until to ten
	// years after From.
	From, Until time.Time
	// Now is the time the defaults are taken from; defaults to time.Now().
	Now time.Time
}

// Result is what Parse found in a file.
type Result struct {
	// Name is the file's X-WR-CALNAME, if any.
	Name string
	// TimeZone is the file's X-WR-TIMEZONE, if any.
	TimeZone string
	// Dates are the days off, sorted, each once (a day named by two
	// events keeps the first name).
	Dates []schedule.Date
	// Events is how many events were read.
	Events int
}

// Parse reads an iCalendar file from r (at most MaxFileBytes). A file
// that does not parse, holds no event, or holds an event without a
// usable start, is an error wrapping ErrInvalid that names the event.
func Parse(r io.Reader, opts Options) (*Result, error) {
	cal, err := decodeFile(r)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	if p := cal.Props.Get("X-WR-CALNAME"); p != nil {
		res.Name = p.Value
	}
	if p := cal.Props.Get("X-WR-TIMEZONE"); p != nil {
		res.TimeZone = p.Value
	}
	loc := opts.Location
	if loc == nil {
		loc = time.UTC
		if res.TimeZone != "" {
			if loc, err = time.LoadLocation(res.TimeZone); err != nil {
				return nil, fmt.Errorf("%w: the file's X-WR-TIMEZONE %q: %v", ErrInvalid, res.TimeZone, err)
			}
		}
	}
	from, until, err := opts.window(loc)
	if err != nil {
		return nil, err
	}
	seen := map[string]int{} // date (or "yearly:MM-DD") -> index in res.Dates
	add := func(d schedule.Date) error {
		k := d.Date
		if d.Yearly {
			k = "yearly:" + d.Date[5:]
		}
		if _, ok := seen[k]; ok {
			return nil
		}
		if len(res.Dates) >= store.MaxCalendarDates {
			return fmt.Errorf("%w: the file lists more than %d days off; import a shorter window (Options.Until)", ErrInvalid, store.MaxCalendarDates)
		}
		seen[k] = len(res.Dates)
		res.Dates = append(res.Dates, d)
		return nil
	}
	for _, ev := range cal.Events() {
		res.Events++
		if err := readEvent(ev, loc, from, until, add); err != nil {
			return nil, err
		}
	}
	if res.Events == 0 {
		return nil, fmt.Errorf("%w: the iCalendar file holds no event (VEVENT); a holiday calendar lists each day off as one", ErrInvalid)
	}
	// A fixed date that a yearly one covers already is left out.
	out := res.Dates[:0]
	for _, d := range res.Dates {
		if !d.Yearly {
			if i, ok := seen["yearly:"+d.Date[5:]]; ok && res.Dates[i].Date <= d.Date {
				continue
			}
		}
		out = append(out, d)
	}
	res.Dates = out
	sort.SliceStable(res.Dates, func(i, j int) bool { return res.Dates[i].Date < res.Dates[j].Date })
	return res, nil
}

// decodeFile reads and decodes the iCalendar file of r (at most
// MaxFileBytes).
func decodeFile(r io.Reader) (*ical.Calendar, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("icalimport: read the file: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: iCalendar file larger than %d bytes; split it", ErrInvalid, MaxFileBytes)
	}
	if strings.TrimSpace(string(data)) == "" {
		return nil, fmt.Errorf("%w: empty iCalendar file; want BEGIN:VCALENDAR ... END:VCALENDAR", ErrInvalid)
	}
	cal, err := ical.NewDecoder(strings.NewReader(string(data))).Decode()
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: not an iCalendar file: it ends before END:VCALENDAR (truncated?)", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: not an iCalendar file: %v", ErrInvalid, err)
	}
	return cal, nil
}

// window returns the import window of o in loc: From (January 1 of Now's
// year when zero) to Until (ten years after From when zero).
func (o Options) window(loc *time.Location) (from, until time.Time, err error) {
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	from, until = o.From, o.Until
	if from.IsZero() {
		from = time.Date(now.Year(), time.January, 1, 0, 0, 0, 0, loc)
	}
	if until.IsZero() {
		until = from.AddDate(10, 0, 0)
	}
	if until.Before(from) {
		return from, until, fmt.Errorf("%w: import window ends (%v) before it starts (%v)", ErrInvalid, until, from)
	}
	return from, until, nil
}

// readEvent adds the days off of ev.
func readEvent(ev ical.Event, loc *time.Location, from, until time.Time, add func(schedule.Date) error) error {
	name, what := eventName(ev)
	if p := ev.Props.Get(ical.PropStatus); p != nil && strings.EqualFold(p.Value, "CANCELLED") {
		return nil
	}
	start, span, allDay, err := eventSpan(ev, loc, what)
	if err != nil {
		return err
	}
	addDays := func(s time.Time) error {
		for _, d := range eventDays(s, span, allDay, loc) {
			if err := add(schedule.Date{Date: d, Name: name}); err != nil {
				return err
			}
		}
		return nil
	}
	rule, err := ev.Props.RecurrenceRule()
	if err != nil {
		return fmt.Errorf("%w: %s: RRULE: %v", ErrInvalid, what, err)
	}
	exdates, err := dateList(ev, ical.PropExceptionDates, loc)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, what, err)
	}
	rdates, err := dateList(ev, ical.PropRecurrenceDates, loc)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, what, err)
	}
	if rule == nil && len(rdates) == 0 {
		return addDays(start)
	}
	if rule != nil && simplyYearly(rule, start) && allDay && span == 24*time.Hour && len(exdates) == 0 && len(rdates) == 0 {
		return add(schedule.Date{Date: start.Format(time.DateOnly), Name: name, Yearly: true})
	}
	set := &rrule.Set{}
	if rule != nil {
		rule.Dtstart = start
		r, err := rrule.NewRRule(*rule)
		if err != nil {
			return fmt.Errorf("%w: %s: RRULE %q: %v", ErrInvalid, what, ev.Props.Get(ical.PropRecurrenceRule).Value, err)
		}
		set.RRule(r)
	} else {
		set.RDate(start)
	}
	for _, d := range rdates {
		set.RDate(d)
	}
	for _, d := range exdates {
		set.ExDate(d)
	}
	for _, occ := range set.Between(from, until, true) {
		if err := addDays(occ); err != nil {
			return err
		}
	}
	return nil
}

// eventName returns ev's summary (the name of its days off) and how
// errors name the event: by its summary, else by its UID.
func eventName(ev ical.Event) (name, what string) {
	if p := ev.Props.Get(ical.PropSummary); p != nil {
		name = p.Value
	}
	what = fmt.Sprintf("event %q", name)
	if p := ev.Props.Get(ical.PropUID); p != nil && name == "" {
		what = fmt.Sprintf("event %q", p.Value)
	}
	return name, what
}

// eventSpan returns ev's start, how long it lasts (a day for an all-day
// event without an end, a nanosecond for another), and whether it is an
// all-day event. An event longer than maxEventDays is ErrInvalid.
func eventSpan(ev ical.Event, loc *time.Location, what string) (start time.Time, span time.Duration, allDay bool, err error) {
	startProp := ev.Props.Get(ical.PropDateTimeStart)
	if startProp == nil {
		return start, 0, false, fmt.Errorf("%w: %s has no DTSTART; every event needs its day", ErrInvalid, what)
	}
	start, err = startProp.DateTime(loc)
	if err != nil {
		return start, 0, false, fmt.Errorf("%w: %s: DTSTART %q: %v", ErrInvalid, what, startProp.Value, err)
	}
	end, err := ev.DateTimeEnd(loc)
	if err != nil {
		return start, 0, false, fmt.Errorf("%w: %s: DTEND or DURATION: %v", ErrInvalid, what, err)
	}
	allDay = startProp.ValueType() == ical.ValueDate || len(startProp.Value) == len("20060102")
	if !end.After(start) {
		end = start.Add(time.Nanosecond)
		if allDay {
			end = start.AddDate(0, 0, 1)
		}
	}
	span = end.Sub(start)
	if span > maxEventDays*24*time.Hour {
		return start, 0, false, fmt.Errorf("%w: %s lasts longer than %d days; list such a closure as shorter events", ErrInvalid, what, maxEventDays)
	}
	return start, span, allDay, nil
}

// eventDays returns the days (in loc, as YYYY-MM-DD) an occurrence
// starting at s and lasting span touches; an all-day one counts from the
// start of its day.
func eventDays(s time.Time, span time.Duration, allDay bool, loc *time.Location) []string {
	s = s.In(loc)
	e := s.Add(span)
	if allDay {
		e = time.Date(s.Year(), s.Month(), s.Day(), 0, 0, 0, 0, loc).Add(span)
	}
	var out []string
	for d := time.Date(s.Year(), s.Month(), s.Day(), 0, 0, 0, 0, loc); d.Before(e); d = d.AddDate(0, 0, 1) {
		out = append(out, d.Format(time.DateOnly))
	}
	return out
}

// simplyYearly reports whether r repeats every year on start's month and
// day, forever: nothing but FREQ=YEARLY, an interval of 1, and at most a
// BYMONTH and BYMONTHDAY that name start's.
func simplyYearly(r *rrule.ROption, start time.Time) bool {
	if r.Freq != rrule.YEARLY || r.Interval > 1 || r.Count != 0 || !r.Until.IsZero() {
		return false
	}
	if len(r.Bysetpos)+len(r.Byyearday)+len(r.Byweekno)+len(r.Byweekday)+len(r.Byhour)+len(r.Byminute)+len(r.Bysecond)+len(r.Byeaster) > 0 {
		return false
	}
	if len(r.Bymonth) > 1 || len(r.Bymonth) == 1 && r.Bymonth[0] != int(start.Month()) {
		return false
	}
	return len(r.Bymonthday) == 0 || len(r.Bymonthday) == 1 && r.Bymonthday[0] == start.Day()
}

// dateList reads every value of the list properties name (EXDATE,
// RDATE), each of which may hold several comma-separated values.
func dateList(ev ical.Event, name string, loc *time.Location) ([]time.Time, error) {
	var out []time.Time
	for _, p := range ev.Props.Values(name) {
		for _, v := range strings.Split(p.Value, ",") {
			one := p
			one.Value = strings.TrimSpace(v)
			t, err := one.DateTime(loc)
			if err != nil {
				return nil, fmt.Errorf("%s %q: %v", name, v, err)
			}
			out = append(out, t)
		}
	}
	return out, nil
}

package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jobkit/job/schedule"
)

// CalendarCollection is the Documents collection calendars are stored
// in, each under its name, its body the Calendar as JSON.
const CalendarCollection = "calendars"

// Calendar says which days are working days, in a time zone: the working
// weekdays, less the listed dates (holidays). A stored trigger or a
// recurring job names a calendar and a schedule.Policy to run only on
// working days, to skip the listed dates, or to move a run that falls on
// a day off to the next working day. Calendars are data, kept as
// documents (CalendarCollection) and edited at run time; package
// schedule computes with them (Compile).
type Calendar struct {
	// Name identifies the calendar; the name of its document. It follows
	// the rules of a trigger's name (CheckTriggerName).
	Name string `json:"name"`
	// TimeZone is the IANA zone ("Europe/Paris") the days are read in: a
	// tick is on the day its time has in this zone. Empty means UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Workdays are the working weekdays, each once. At least one.
	Workdays []time.Weekday `json:"workdays"`
	// Dates are the days off besides the weekend: holidays, closures.
	Dates []schedule.Date `json:"dates,omitempty"`
	// Description is free text for people.
	Description string `json:"description,omitempty"`

	// Version, CreatedAt and UpdatedAt are those of the calendar's
	// document (set by DecodeCalendar; not part of the body): pass Version
	// back to replace or delete what was read.
	Version   int64     `json:"-"`
	CreatedAt time.Time `json:"-"`
	UpdatedAt time.Time `json:"-"`
}

// Limits of calendars.
const (
	// MaxCalendarDates bounds the dates of one calendar.
	MaxCalendarDates = 2000
	// MaxCalendarDateName bounds the name of one date, in bytes.
	MaxCalendarDateName = 200
)

// Validate checks a calendar before it is stored: a name, a known zone,
// working weekdays each once, well-formed dates (each day once) within the
// bounds, and at least one working day from now on: a calendar whose days
// are all off is refused, since a trigger on it would never fire. Every
// error wraps ErrInvalid and names the fix.
func (c *Calendar) Validate() error {
	_, err := c.Compile()
	return err
}

// Compile checks c (see Validate) and returns its rules, ready to judge
// days and shape schedules (schedule.NewRules).
func (c *Calendar) Compile() (*schedule.Rules, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil calendar", ErrInvalid)
	}
	if err := CheckTriggerName(c.Name); err != nil {
		return nil, fmt.Errorf("calendar: %w", err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: calendar %q: %s", ErrInvalid, c.Name, fmt.Sprintf(format, args...))
	}
	if len(c.Dates) > MaxCalendarDates {
		return nil, bad("%d dates; at most %d (split the calendar, or mark recurring days Yearly)", len(c.Dates), MaxCalendarDates)
	}
	if len(c.Description) > MaxDescriptionBytes {
		return nil, bad("description of %d bytes; keep it within %d", len(c.Description), MaxDescriptionBytes)
	}
	for _, d := range c.Dates {
		if len(d.Name) > MaxCalendarDateName || !utf8.ValidString(d.Name) || strings.ContainsFunc(d.Name, unicode.IsControl) {
			return nil, bad("date %s: the name is longer than %d bytes or holds control characters", d.Date, MaxCalendarDateName)
		}
	}
	r, err := schedule.NewRules(c.Name, c.TimeZone, c.Workdays, c.Dates)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return r, nil
}

// Clone returns a deep copy of c.
func (c *Calendar) Clone() *Calendar {
	if c == nil {
		return nil
	}
	n := *c
	n.Workdays = slices.Clone(c.Workdays)
	n.Dates = slices.Clone(c.Dates)
	return &n
}

// DecodeCalendar decodes the calendar stored in d (see
// CalendarCollection); its Name is the document's. A body that is not a
// calendar is ErrCorrupt.
func DecodeCalendar(d *Document) (*Calendar, error) {
	var c Calendar
	if err := json.Unmarshal(d.Body, &c); err != nil {
		return nil, fmt.Errorf("%w: calendar %q: stored body is not a calendar: %v; store it again", ErrCorrupt, d.Name, err)
	}
	c.Name, c.Version, c.CreatedAt, c.UpdatedAt = d.Name, d.Version, d.CreatedAt, d.UpdatedAt
	return &c, nil
}

// CalendarNotFound is the error of a trigger or job that names a calendar
// that is not stored; it wraps ErrNotFound.
func CalendarNotFound(name string) error {
	return fmt.Errorf("%w: calendar %q is not stored; create it first (jobctl calendar create, or the CalendarService API)", ErrNotFound, name)
}

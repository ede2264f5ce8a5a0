package schedule

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrInvalid is matched (errors.Is) by every error of this package: a
// spec, a calendar or a policy that cannot be used. The error's text says
// what is wrong and how to fix it; callers add their own sentinel (the
// store wraps store.ErrInvalid around it).
var ErrInvalid = errors.New("schedule: invalid")

// invalid is an error of this package: its text alone, matching
// ErrInvalid, so a caller that wraps it with its own sentinel does not
// repeat a prefix.
type invalid string

func (e invalid) Error() string        { return string(e) }
func (e invalid) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error { return invalid(fmt.Sprintf(format, args...)) }

// Spec is a cron or interval schedule, optionally shaped by a calendar:
// the schedule fields of a stored trigger (store.Trigger.Spec).
type Spec struct {
	// Cron is a cron spec: five fields, an optional leading seconds
	// field, or a descriptor (@hourly, @daily, ...). No time zone prefix
	// and no @every: set TimeZone, or Interval. Exactly one of Cron and
	// Interval is set.
	Cron string
	// TimeZone is the IANA zone the Cron fields are read in. Empty means
	// UTC, so every node computes the same ticks. Only with Cron.
	TimeZone string
	// Interval ticks every Interval, at multiples of Interval since the
	// Unix epoch.
	Interval time.Duration
	// Calendar names the calendar whose rules shape the ticks; empty for
	// none. Next and NextTimes take its rules.
	Calendar string
	// Policy says what the calendar does to the ticks; empty means
	// Workdays. Only with Calendar.
	Policy Policy
}

// Check reports whether s can compute ticks: exactly one of Cron and
// Interval, a positive Interval without a zone, or a cron spec that
// parses in a zone that loads and fires at least once, and a known
// Policy, only with a Calendar. The error matches ErrInvalid and names
// the fix.
func (s Spec) Check() error {
	switch {
	case s.Cron != "" && s.Interval != 0:
		return invalidf("both a cron spec and an interval; set one")
	case s.Cron == "" && s.Interval == 0:
		return invalidf("no schedule; set a cron spec or an interval")
	case s.Interval < 0:
		return invalidf("interval %v is negative; set a positive one", s.Interval)
	case s.Interval != 0 && s.TimeZone != "":
		return invalidf("a time zone with an interval; intervals fall on multiples since the Unix epoch, drop the zone")
	case s.Calendar == "" && s.Policy != "":
		return invalidf("calendar policy %q without a calendar; name the calendar or drop the policy", s.Policy)
	}
	if s.Cron != "" {
		if _, err := s.cron(); err != nil {
			return err
		}
		if n, _ := s.raw(time.Unix(0, 0)); n.IsZero() {
			return invalidf("cron spec %q never fires (no such date)", s.Cron)
		}
	}
	return CheckPolicy(s.Policy)
}

// Next returns the first fire time after after, or the zero time when
// the schedule never fires again (with a calendar: within about five
// years). cal is the rules of s.Calendar (NewRules), ignored when
// s.Calendar is empty. A spec that names a calendar with a nil cal
// fails with an error matching ErrNoRules; with the rules of another
// calendar, ErrInvalid; a spec Check refuses, ErrInvalid.
func (s Spec) Next(after time.Time, cal *Rules) (time.Time, error) {
	if s.Calendar == "" {
		return s.raw(after)
	}
	if cal == nil {
		return time.Time{}, fmt.Errorf("%w: calendar %q", ErrNoRules, s.Calendar)
	}
	if cal.Name() != s.Calendar {
		return time.Time{}, invalidf("the schedule runs on calendar %q, not %q", s.Calendar, cal.Name())
	}
	if _, err := s.raw(after); err != nil {
		return time.Time{}, err
	}
	raw := func(x time.Time) time.Time { n, _ := s.raw(x); return n }
	p := s.Policy
	if p == "" {
		p = Workdays
	}
	return cal.Next(raw, after, p), nil
}

// ErrNoRules: a spec names a calendar, and Next was not given its rules
// (the calendar is not stored, or was not read).
var ErrNoRules = errors.New("schedule: no rules for the calendar; read the calendar and pass its rules")

// NextTimes returns the next n fire times after after (fewer when the
// schedule stops firing), each after the one before; see Next.
func (s Spec) NextTimes(after time.Time, n int, cal *Rules) ([]time.Time, error) {
	out := make([]time.Time, 0, max(n, 0))
	for range n {
		t, err := s.Next(after, cal)
		if err != nil {
			return nil, err
		}
		if t.IsZero() {
			break
		}
		out = append(out, t)
		after = t
	}
	return out, nil
}

// raw is Next without the calendar: the first tick after after, in UTC.
func (s Spec) raw(after time.Time) (time.Time, error) {
	if s.Interval > 0 {
		n := after.UnixNano()
		d := int64(s.Interval)
		q := n / d
		if n < 0 && n%d != 0 {
			q-- // floor, so a tick before the epoch is a multiple too
		}
		return time.Unix(0, (q+1)*d).UTC(), nil
	}
	if s.Cron == "" {
		return time.Time{}, invalidf("no schedule; set a cron spec or an interval")
	}
	c, err := s.cron()
	if err != nil {
		return time.Time{}, err
	}
	n := c.Next(after)
	if n.IsZero() {
		return n, nil
	}
	return n.UTC(), nil
}

// cronParser parses five or six fields or a descriptor, as the engine's
// WithCronSpec does.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// crons caches parsed cron specs by zone and spec (a parsed schedule is
// immutable), so a scheduler that asks for the next tick at every
// wake-up neither parses the spec nor loads the zone's file again. It is
// emptied when it holds maxCachedCrons.
var (
	crons      sync.Map // zone + "\x00" + spec -> cron.Schedule
	cronsCount atomic.Int64
)

const maxCachedCrons = 1024

// cron parses Cron in TimeZone, or returns the cached schedule.
func (s Spec) cron() (cron.Schedule, error) {
	key := s.TimeZone + "\x00" + s.Cron
	if c, ok := crons.Load(key); ok {
		return c.(cron.Schedule), nil
	}
	c, err := s.parse()
	if err != nil {
		return nil, err
	}
	if cronsCount.Add(1) > maxCachedCrons {
		crons.Clear()
		cronsCount.Store(1)
	}
	crons.Store(key, c)
	return c, nil
}

// parse parses Cron in TimeZone.
func (s Spec) parse() (c cron.Schedule, err error) {
	spec := strings.TrimSpace(s.Cron)
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, invalidf("cron spec %q has a time zone prefix; set TimeZone instead", s.Cron)
	}
	if strings.HasPrefix(spec, "@every") {
		return nil, invalidf("cron spec %q is an interval; set Interval instead", s.Cron)
	}
	loc := time.UTC
	if s.TimeZone != "" {
		if loc, err = time.LoadLocation(s.TimeZone); err != nil {
			return nil, invalidf("time zone %q: %v; use an IANA name such as \"Europe/Paris\"", s.TimeZone, err)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, invalidf("cron spec %q: parser panicked: %v", s.Cron, p)
		}
	}()
	c, err = cronParser.Parse("CRON_TZ=" + loc.String() + " " + spec)
	if err != nil {
		return nil, invalidf("cron spec %q: %v", s.Cron, err)
	}
	return c, nil
}

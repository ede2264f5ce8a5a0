package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// paris is a Monday-to-Friday calendar in Europe/Paris with Armistice
// Day 2026 (a Wednesday) off and Christmas off every year. Summer time
// ends there on Sunday 2026-10-25 (CEST, UTC+2, to CET, UTC+1).
func paris() *store.Calendar {
	return &store.Calendar{
		Name:     "fr",
		TimeZone: "Europe/Paris",
		Workdays: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday},
		Dates: []store.CalendarDate{
			{Date: "2026-11-11", Name: "Armistice"},
			{Date: "2020-12-25", Name: "Christmas", Yearly: true},
		},
	}
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func rules(t *testing.T, c *store.Calendar) *store.CalendarRules {
	t.Helper()
	r, err := c.Compile()
	if err != nil {
		t.Fatalf("Compile(%+v): %v", c, err)
	}
	return r
}

func fireTimes(t *testing.T, tr *store.Trigger, r *store.CalendarRules, after string, n int) []string {
	t.Helper()
	ts, err := tr.NextTimesIn(utc(after), n, r)
	if err != nil {
		t.Fatalf("NextTimesIn(%s): %v", after, err)
	}
	out := make([]string, len(ts))
	for i, x := range ts {
		out[i] = x.UTC().Format(time.RFC3339)
	}
	return out
}

func TestCalendarPoliciesAcrossWeekendHolidayAndDST(t *testing.T) {
	r := rules(t, paris())
	trig := func(cron string, p store.CalendarPolicy) *store.Trigger {
		tr := &store.Trigger{Name: "t", Kind: "k", Cron: cron, TimeZone: "Europe/Paris", Calendar: "fr", CalendarPolicy: p}
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	cases := []struct {
		name   string
		cron   string
		policy store.CalendarPolicy
		after  string
		want   []string
	}{
		// Daily at 09:00 Paris from Friday 23 October 2026 (CEST): the
		// weekend, across the end of summer time, then Monday in CET.
		{"daily, workdays", "0 9 * * *", store.CalendarWorkdays, "2026-10-23T06:00:00Z",
			[]string{"2026-10-23T07:00:00Z", "2026-10-26T08:00:00Z", "2026-10-27T08:00:00Z"}},
		{"daily, empty policy is workdays", "0 9 * * *", "", "2026-10-23T06:00:00Z",
			[]string{"2026-10-23T07:00:00Z", "2026-10-26T08:00:00Z", "2026-10-27T08:00:00Z"}},
		{"daily, skip dates keeps the weekend", "0 9 * * *", store.CalendarSkipDates, "2026-10-23T06:00:00Z",
			[]string{"2026-10-23T07:00:00Z", "2026-10-24T07:00:00Z", "2026-10-25T08:00:00Z", "2026-10-26T08:00:00Z"}},
		{"daily, next workday merges the weekend into Monday", "0 9 * * *", store.CalendarNextWorkday, "2026-10-23T06:00:00Z",
			[]string{"2026-10-23T07:00:00Z", "2026-10-26T08:00:00Z", "2026-10-27T08:00:00Z"}},
		// Saturdays at 09:00: moved to Monday at 09:00 Paris time, in CET
		// after the change.
		{"saturdays, workdays never fire", "0 9 * * SAT", store.CalendarWorkdays, "2026-10-23T06:00:00Z", []string{}},
		{"saturdays, skip dates", "0 9 * * SAT", store.CalendarSkipDates, "2026-10-23T06:00:00Z",
			[]string{"2026-10-24T07:00:00Z", "2026-10-31T08:00:00Z"}},
		{"saturdays, next workday", "0 9 * * SAT", store.CalendarNextWorkday, "2026-10-23T06:00:00Z",
			[]string{"2026-10-26T08:00:00Z", "2026-11-02T08:00:00Z"}},
		// Asked on the Sunday, or early on Monday: Saturday's moved run is
		// still to come.
		{"saturdays, next workday, asked on Sunday", "0 9 * * SAT", store.CalendarNextWorkday, "2026-10-25T11:00:00Z",
			[]string{"2026-10-26T08:00:00Z", "2026-11-02T08:00:00Z"}},
		{"saturdays, next workday, asked Monday before the moved run", "0 9 * * SAT", store.CalendarNextWorkday, "2026-10-26T07:59:59Z",
			[]string{"2026-10-26T08:00:00Z"}},
		{"saturdays, next workday, asked Monday after it", "0 9 * * SAT", store.CalendarNextWorkday, "2026-10-26T08:00:00Z",
			[]string{"2026-11-02T08:00:00Z"}},
		// Wednesdays at 09:00 across Armistice Day (Wednesday 11 November).
		{"wednesdays, workdays skip the holiday", "0 9 * * WED", store.CalendarWorkdays, "2026-11-04T09:00:00Z",
			[]string{"2026-11-18T08:00:00Z", "2026-11-25T08:00:00Z"}},
		{"wednesdays, skip dates skip the holiday", "0 9 * * WED", store.CalendarSkipDates, "2026-11-04T09:00:00Z",
			[]string{"2026-11-18T08:00:00Z"}},
		{"wednesdays, next workday moves it to Thursday", "0 9 * * WED", store.CalendarNextWorkday, "2026-11-04T09:00:00Z",
			[]string{"2026-11-12T08:00:00Z", "2026-11-18T08:00:00Z"}},
		// Christmas 2026 is a Friday, a yearly date: the run moves over the
		// weekend to Monday 28 December.
		{"fridays, next workday over a yearly holiday and a weekend", "0 9 * * FRI", store.CalendarNextWorkday, "2026-12-19T00:00:00Z",
			[]string{"2026-12-28T08:00:00Z", "2027-01-01T08:00:00Z"}},
		// Every 20 minutes: a day off costs one step, and the moved ticks of
		// Saturday and Sunday land between Monday's own.
		{"every 20 minutes, next workday", "*/20 * * * *", store.CalendarNextWorkday, "2026-10-26T07:50:00Z",
			[]string{"2026-10-26T08:00:00Z", "2026-10-26T08:20:00Z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := fireTimes(t, trig(tc.cron, tc.policy), r, tc.after, len(tc.want)+boolInt(len(tc.want) == 0))
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("fire times after %s:\n got  %v\n want %v", tc.after, got, tc.want)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestCalendarNextWorkdayNeverSkipsAMovedRun walks a schedule under
// next-workday the way the engine does (each fire time after the last)
// and checks it against a brute-force expectation: every raw tick on a
// working day fires, every other one fires moved, merged by time.
func TestCalendarNextWorkdayNeverSkipsAMovedRun(t *testing.T) {
	r := rules(t, paris())
	for _, cron := range []string{"0 9 * * *", "15 8,17 * * SAT,SUN", "0 */7 * * *", "30 2 * * *"} {
		tr := &store.Trigger{Name: "t", Kind: "k", Cron: cron, TimeZone: "Europe/Paris", Calendar: "fr", CalendarPolicy: store.CalendarNextWorkday}
		raw := &store.Trigger{Name: "raw", Kind: "k", Cron: cron, TimeZone: "Europe/Paris"}
		from, until := utc("2026-10-20T00:00:00Z"), utc("2026-12-31T00:00:00Z")
		want := map[time.Time]bool{}
		for tk, _ := raw.Next(from); tk.Before(until); tk, _ = raw.Next(tk) {
			if r.IsWorkday(tk) {
				want[tk] = true
				continue
			}
			l := tk.In(r.Location())
			d := l
			for {
				d = d.AddDate(0, 0, 1)
				if r.IsWorkday(time.Date(d.Year(), d.Month(), d.Day(), 12, 0, 0, 0, r.Location())) {
					break
				}
			}
			m := time.Date(d.Year(), d.Month(), d.Day(), l.Hour(), l.Minute(), l.Second(), 0, r.Location()).UTC()
			if m.Before(until) {
				want[m] = true
			}
		}
		got := map[time.Time]bool{}
		for tk, err := tr.NextIn(from, r); tk.Before(until); tk, err = tr.NextIn(tk, r) {
			if err != nil || tk.IsZero() {
				t.Fatalf("%s: NextIn: %v, %v", cron, tk, err)
			}
			if got[tk] {
				t.Fatalf("%s: %v fired twice", cron, tk)
			}
			got[tk] = true
		}
		for tk := range want {
			if !got[tk] {
				t.Errorf("%s: %v never fired", cron, tk)
			}
		}
		for tk := range got {
			if !want[tk] {
				t.Errorf("%s: %v fired, not expected", cron, tk)
			}
		}
	}
}

func TestCalendarIntervalTrigger(t *testing.T) {
	r := rules(t, paris())
	tr := &store.Trigger{Name: "t", Kind: "k", Interval: 6 * time.Hour, Calendar: "fr"}
	// Friday 23 October from 18:00 UTC: 18:00 UTC is 20:00 Friday in
	// Paris; the next ticks of the weekend are skipped.
	got := fireTimes(t, tr, r, "2026-10-23T17:00:00Z", 3)
	want := []string{"2026-10-23T18:00:00Z", "2026-10-26T00:00:00Z", "2026-10-26T06:00:00Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("interval fire times:\n got  %v\n want %v", got, want)
	}
}

func TestCalendarTriggerErrors(t *testing.T) {
	r := rules(t, paris())
	tr := &store.Trigger{Name: "t", Kind: "k", Cron: "0 9 * * *", Calendar: "fr"}
	if _, err := tr.Next(utc("2026-10-23T06:00:00Z")); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "NextIn") {
		t.Fatalf("Next of a trigger with a calendar: %v; want ErrInvalid naming NextIn", err)
	}
	if _, err := tr.NextIn(utc("2026-10-23T06:00:00Z"), nil); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"fr"`) {
		t.Fatalf("NextIn without the calendar: %v; want ErrNotFound naming it", err)
	}
	other := paris()
	other.Name = "de"
	if _, err := tr.NextIn(utc("2026-10-23T06:00:00Z"), rules(t, other)); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("NextIn with another calendar: %v", err)
	}
	if _, err := tr.NextIn(utc("2026-10-23T06:00:00Z"), r); err != nil {
		t.Fatal(err)
	}
	bad := []*store.Trigger{
		{Name: "t", Kind: "k", Cron: "0 9 * * *", CalendarPolicy: store.CalendarWorkdays},
		{Name: "t", Kind: "k", Cron: "0 9 * * *", Calendar: "fr", CalendarPolicy: "weekends"},
		{Name: "t", Kind: "k", Cron: "0 9 * * *", Calendar: "a\nb"},
	}
	for _, b := range bad {
		if err := b.Validate(); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Validate(%+v): %v; want ErrInvalid", b, err)
		}
	}
}

func TestCalendarValidate(t *testing.T) {
	every := make([]store.CalendarDate, 0, 366)
	for d := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() == 2024; d = d.AddDate(0, 0, 1) {
		every = append(every, store.CalendarDate{Date: d.Format(time.DateOnly), Yearly: true})
	}
	mod := func(f func(c *store.Calendar)) *store.Calendar { c := paris(); f(c); return c }
	bad := []struct {
		name string
		c    *store.Calendar
		msg  string
	}{
		{"no name", mod(func(c *store.Calendar) { c.Name = "" }), "name"},
		{"unknown zone", mod(func(c *store.Calendar) { c.TimeZone = "Mars/Olympus_Mons" }), "Mars/Olympus_Mons"},
		{"no working day", mod(func(c *store.Calendar) { c.Workdays = nil }), "never fire"},
		{"every day of the year off, yearly", mod(func(c *store.Calendar) { c.Dates = every }), "never fire"},
		{"weekday out of range", mod(func(c *store.Calendar) { c.Workdays = []time.Weekday{7} }), "weekday 7"},
		{"weekday twice", mod(func(c *store.Calendar) { c.Workdays = []time.Weekday{1, 1} }), "twice"},
		{"malformed date", mod(func(c *store.Calendar) { c.Dates = []store.CalendarDate{{Date: "25/12/2026"}} }), "YYYY-MM-DD"},
		{"impossible date", mod(func(c *store.Calendar) { c.Dates = []store.CalendarDate{{Date: "2026-02-30"}} }), "2026-02-30"},
		{"date twice", mod(func(c *store.Calendar) {
			c.Dates = []store.CalendarDate{{Date: "2026-05-01"}, {Date: "2026-05-01", Name: "again"}}
		}), "twice"},
		{"too many dates", mod(func(c *store.Calendar) {
			c.Dates = nil
			for i := range store.MaxCalendarDates + 1 {
				c.Dates = append(c.Dates, store.CalendarDate{Date: time.Date(2026, 1, 1+i, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)})
			}
		}), "at most"},
	}
	for _, tc := range bad {
		err := tc.c.Validate()
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: Validate = %v; want ErrInvalid mentioning %q", tc.name, err, tc.msg)
		}
	}
	// Every day but one of the year off, yearly: it still works.
	if err := mod(func(c *store.Calendar) { c.Dates = every[1:] }).Validate(); err != nil {
		t.Errorf("one working day a year left: %v", err)
	}
	// Many fixed dates in a row are fine: the days after them work.
	if err := mod(func(c *store.Calendar) {
		c.Dates = nil
		for i := range 40 {
			c.Dates = append(c.Dates, store.CalendarDate{Date: time.Date(2026, 7, 1+i, 0, 0, 0, 0, time.UTC).Format(time.DateOnly), Name: fmt.Sprint("closed ", i)})
		}
	}).Validate(); err != nil {
		t.Errorf("forty days closed: %v", err)
	}
}

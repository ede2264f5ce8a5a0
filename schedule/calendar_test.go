package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/schedule"
)

// paris is a Monday-to-Friday calendar in Europe/Paris with Armistice
// Day 2026 (a Wednesday) off and Christmas off every year. Summer time
// ends there on Sunday 2026-10-25 (CEST, UTC+2, to CET, UTC+1).
func paris(t *testing.T, name string) *schedule.Rules {
	t.Helper()
	r, err := schedule.NewRules(name, "Europe/Paris",
		[]time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday},
		[]schedule.Date{
			{Date: "2026-11-11", Name: "Armistice"},
			{Date: "2020-12-25", Name: "Christmas", Yearly: true},
		})
	if err != nil {
		t.Fatalf("NewRules: %v", err)
	}
	return r
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func fireTimes(t *testing.T, s schedule.Spec, r *schedule.Rules, after string, n int) []string {
	t.Helper()
	ts, err := s.NextTimes(utc(after), n, r)
	if err != nil {
		t.Fatalf("NextTimes(%s): %v", after, err)
	}
	out := make([]string, len(ts))
	for i, x := range ts {
		out[i] = x.UTC().Format(time.RFC3339)
	}
	return out
}

func TestCalendarPoliciesAcrossWeekendHolidayAndDST(t *testing.T) {
	r := paris(t, "fr")
	trig := func(cron string, p schedule.Policy) schedule.Spec {
		s := schedule.Spec{Cron: cron, TimeZone: "Europe/Paris", Calendar: "fr", Policy: p}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name   string
		cron   string
		policy schedule.Policy
		after  string
		want   []string
	}{
		// Daily at 09:00 Paris from Friday 23 October 2026 (CEST): the
		// weekend, across the end of summer time, then Monday in CET.
		{"daily, workdays", "0 9 * * *", schedule.Workdays, "2026-10-23T06:00:00Z",
			[]string{"2026-10-23T07:00:00Z", "2026-10-26T08:00:00Z", "2026-10-27T08:00:00Z"}},
		{"daily, empty policy is workdays", "0 9 * * *", "", "2026-10-23T06:00:00Z",
			[]string{"2026-10-23T07:00:00Z", "2026-10-26T08:00:00Z", "2026-10-27T08:00:00Z"}},
		{"daily, skip dates keeps the weekend", "0 9 * * *", schedule.SkipDates, "2026-10-23T06:00:00Z",
			[]string{"2026-10-23T07:00:00Z", "2026-10-24T07:00:00Z", "2026-10-25T08:00:00Z", "2026-10-26T08:00:00Z"}},
		{"daily, next workday merges the weekend into Monday", "0 9 * * *", schedule.NextWorkday, "2026-10-23T06:00:00Z",
			[]string{"2026-10-23T07:00:00Z", "2026-10-26T08:00:00Z", "2026-10-27T08:00:00Z"}},
		// Saturdays at 09:00: moved to Monday at 09:00 Paris time, in CET
		// after the change.
		{"saturdays, workdays never fire", "0 9 * * SAT", schedule.Workdays, "2026-10-23T06:00:00Z", []string{}},
		{"saturdays, skip dates", "0 9 * * SAT", schedule.SkipDates, "2026-10-23T06:00:00Z",
			[]string{"2026-10-24T07:00:00Z", "2026-10-31T08:00:00Z"}},
		{"saturdays, next workday", "0 9 * * SAT", schedule.NextWorkday, "2026-10-23T06:00:00Z",
			[]string{"2026-10-26T08:00:00Z", "2026-11-02T08:00:00Z"}},
		// Asked on the Sunday, or early on Monday: Saturday's moved run is
		// still to come.
		{"saturdays, next workday, asked on Sunday", "0 9 * * SAT", schedule.NextWorkday, "2026-10-25T11:00:00Z",
			[]string{"2026-10-26T08:00:00Z", "2026-11-02T08:00:00Z"}},
		{"saturdays, next workday, asked Monday before the moved run", "0 9 * * SAT", schedule.NextWorkday, "2026-10-26T07:59:59Z",
			[]string{"2026-10-26T08:00:00Z"}},
		{"saturdays, next workday, asked Monday after it", "0 9 * * SAT", schedule.NextWorkday, "2026-10-26T08:00:00Z",
			[]string{"2026-11-02T08:00:00Z"}},
		// Wednesdays at 09:00 across Armistice Day (Wednesday 11 November).
		{"wednesdays, workdays skip the holiday", "0 9 * * WED", schedule.Workdays, "2026-11-04T09:00:00Z",
			[]string{"2026-11-18T08:00:00Z", "2026-11-25T08:00:00Z"}},
		{"wednesdays, skip dates skip the holiday", "0 9 * * WED", schedule.SkipDates, "2026-11-04T09:00:00Z",
			[]string{"2026-11-18T08:00:00Z"}},
		{"wednesdays, next workday moves it to Thursday", "0 9 * * WED", schedule.NextWorkday, "2026-11-04T09:00:00Z",
			[]string{"2026-11-12T08:00:00Z", "2026-11-18T08:00:00Z"}},
		// Christmas 2026 is a Friday, a yearly date: the run moves over the
		// weekend to Monday 28 December.
		{"fridays, next workday over a yearly holiday and a weekend", "0 9 * * FRI", schedule.NextWorkday, "2026-12-19T00:00:00Z",
			[]string{"2026-12-28T08:00:00Z", "2027-01-01T08:00:00Z"}},
		// Every 20 minutes: a day off costs one step, and the moved ticks of
		// Saturday and Sunday land between Monday's own.
		{"every 20 minutes, next workday", "*/20 * * * *", schedule.NextWorkday, "2026-10-26T07:50:00Z",
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
	r := paris(t, "fr")
	for _, cron := range []string{"0 9 * * *", "15 8,17 * * SAT,SUN", "0 */7 * * *", "30 2 * * *"} {
		tr := schedule.Spec{Cron: cron, TimeZone: "Europe/Paris", Calendar: "fr", Policy: schedule.NextWorkday}
		raw := schedule.Spec{Cron: cron, TimeZone: "Europe/Paris"}
		from, until := utc("2026-10-20T00:00:00Z"), utc("2026-12-31T00:00:00Z")
		want := map[time.Time]bool{}
		for tk, _ := raw.Next(from, nil); tk.Before(until); tk, _ = raw.Next(tk, nil) {
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
		for tk, err := tr.Next(from, r); tk.Before(until); tk, err = tr.Next(tk, r) {
			if err != nil || tk.IsZero() {
				t.Fatalf("%s: Next: %v, %v", cron, tk, err)
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
	r := paris(t, "fr")
	tr := schedule.Spec{Interval: 6 * time.Hour, Calendar: "fr"}
	// Friday 23 October from 18:00 UTC: 18:00 UTC is 20:00 Friday in
	// Paris; the next ticks of the weekend are skipped.
	got := fireTimes(t, tr, r, "2026-10-23T17:00:00Z", 3)
	want := []string{"2026-10-23T18:00:00Z", "2026-10-26T00:00:00Z", "2026-10-26T06:00:00Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("interval fire times:\n got  %v\n want %v", got, want)
	}
}

func TestCalendarSpecErrors(t *testing.T) {
	r := paris(t, "fr")
	s := schedule.Spec{Cron: "0 9 * * *", Calendar: "fr"}
	if _, err := s.Next(utc("2026-10-23T06:00:00Z"), nil); !errors.Is(err, schedule.ErrNoRules) || !strings.Contains(err.Error(), `"fr"`) {
		t.Fatalf("Next without the calendar's rules: %v; want ErrNoRules naming it", err)
	}
	if _, err := s.Next(utc("2026-10-23T06:00:00Z"), paris(t, "de")); !errors.Is(err, schedule.ErrInvalid) {
		t.Fatalf("Next with another calendar: %v", err)
	}
	if _, err := s.Next(utc("2026-10-23T06:00:00Z"), r); err != nil {
		t.Fatal(err)
	}
	bad := []schedule.Spec{
		{Cron: "0 9 * * *", Policy: schedule.Workdays},
		{Cron: "0 9 * * *", Calendar: "fr", Policy: "weekends"},
	}
	for _, b := range bad {
		if err := b.Check(); !errors.Is(err, schedule.ErrInvalid) {
			t.Errorf("Check(%+v): %v; want ErrInvalid", b, err)
		}
	}
}

func TestNewRulesErrors(t *testing.T) {
	week := []time.Weekday{time.Monday}
	bad := []struct {
		name     string
		zone     string
		workdays []time.Weekday
		dates    []schedule.Date
		msg      string
	}{
		{"zone", "Mars/Olympus_Mons", week, nil, "Mars/Olympus_Mons"},
		{"no workday", "", nil, nil, "never fire"},
		{"bad date", "", week, []schedule.Date{{Date: "25/12/2026"}}, "YYYY-MM-DD"},
		{"yearly twice", "", week, []schedule.Date{{Date: "2026-05-01", Yearly: true}, {Date: "2027-05-01", Yearly: true}}, "twice"},
	}
	for _, tc := range bad {
		_, err := schedule.NewRules("x", tc.zone, tc.workdays, tc.dates)
		if !errors.Is(err, schedule.ErrInvalid) || !strings.HasPrefix(err.Error(), `calendar "x": `) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: NewRules = %v; want ErrInvalid, starting with the calendar's name, mentioning %q", tc.name, err, tc.msg)
		}
	}
}

func TestParseWeekday(t *testing.T) {
	for in, want := range map[string]time.Weekday{"mon": time.Monday, "Sunday": time.Sunday, " SAT ": time.Saturday} {
		if got, err := schedule.ParseWeekday(in); err != nil || got != want {
			t.Errorf("ParseWeekday(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := schedule.ParseWeekday("someday"); !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("ParseWeekday(someday): %v; want ErrInvalid", err)
	}
}

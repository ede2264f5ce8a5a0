package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestCalendars drives every calendars command and the triggers'
// calendar flags against a real server, with their bad input.
func TestCalendars(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, sk storeKind) { calendars(t, newTestServerOn(t, false, sk)) })
}

func calendars(t *testing.T, s *testServer) {
	// Create, with a yearly and a fixed day off.
	var cr jobkitv1.CreateCalendarResponse
	s.okJSON(t, &cr, "calendars", "create", "fr", "--tz", "Europe/Paris", "--yearly", "2020-12-25=Noël", "--date", "2027-01-04=Closed")
	c := cr.GetCalendar()
	if c.GetTimeZone() != "Europe/Paris" || workdaysStr(c.GetWorkdays()) != "mon,tue,wed,thu,fri" || len(c.GetDates()) != 2 || !c.GetDates()[0].GetYearly() || c.GetDates()[1].GetDate() != "2027-01-04" {
		t.Fatalf("created %v", c)
	}
	table := s.ok(t, "calendar", "get", "fr")
	for _, want := range []string{"calendar fr", "Europe/Paris", "mon,tue,wed,thu,fri", "2020-12-25", "Noël", "yearly", "2027-01-04", "Closed"} {
		if !strings.Contains(table, want) {
			t.Errorf("calendar get lacks %q:\n%s", want, table)
		}
	}

	// Bad input exits 2 before any call, or with the server's refusal.
	for _, args := range [][]string{
		{"calendars", "create", "x", "--workdays", "mon-funday"},
		{"calendars", "create", "x", "--date", "25/12/2026"},
		{"calendars", "next"},
		{"calendars", "next", "--trigger", "t", "--cron", "* * * * *"},
		{"calendars", "next", "--cron", "0 9 * * *", "--policy", "weekends"},
		{"triggers", "create", "t", "--kind", "sum", "--cron", "0 9 * * *", "--calendar", "fr", "--calendar-policy", "sometimes"},
	} {
		if r := s.jobctl(t, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d (usage)\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
	if r := s.jobctl(t, "calendars", "create", "none", "--workdays", "sat", "--tz", "Mars/Olympus"); r.code != exitUsage || !strings.Contains(r.stderr, "Mars/Olympus") {
		t.Errorf("a calendar in an unknown zone: exit %d\n%s", r.code, r.stderr)
	}
	if r := s.jobctl(t, "calendars", "create", "fr"); r.code != exitConflict {
		t.Errorf("create of a taken name: exit %d, want %d\n%s", r.code, exitConflict, r.stderr)
	}
	if r := s.jobctl(t, "triggers", "create", "t", "--kind", "sum", "--args", "[1,2]", "--cron", "0 9 * * *", "--calendar", "nowhere"); r.code != exitNotFound || !strings.Contains(r.stderr, `calendar "nowhere"`) {
		t.Errorf("a trigger on a missing calendar: exit %d\n%s", r.code, r.stderr)
	}

	// Import a file (from a path and from stdin).
	dir := t.TempDir()
	ics := "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nX-WR-TIMEZONE:Europe/Berlin\r\n" +
		"BEGIN:VEVENT\r\nUID:a\r\nDTSTART;VALUE=DATE:20261003\r\nSUMMARY:Tag der Deutschen Einheit\r\nRRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n" +
		"BEGIN:VEVENT\r\nUID:b\r\nDTSTART;VALUE=DATE:20270326\r\nDTEND;VALUE=DATE:20270327\r\nSUMMARY:Karfreitag\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
	path := filepath.Join(dir, "de.ics")
	if err := os.WriteFile(path, []byte(ics), 0o600); err != nil {
		t.Fatal(err)
	}
	out := s.ok(t, "calendars", "import", "de", path, "--workdays", "mon-thu")
	if !strings.Contains(out, "imported 2 events into calendar de") || !strings.Contains(out, "Europe/Berlin") || !strings.Contains(out, "mon,tue,wed,thu") {
		t.Fatalf("import:\n%s", out)
	}
	if r := jobctlEnv(t, map[string]string{"JOBCTL_ADDR": s.url}, ics, "calendars", "import", "de", "-"); r.code != exitConflict {
		t.Errorf("import over a taken name: exit %d\n%s", r.code, r.stderr)
	}
	if r := jobctlEnv(t, map[string]string{"JOBCTL_ADDR": s.url}, ics, "calendars", "import", "de", "-", "--replace"); r.code != exitOK {
		t.Errorf("import --replace: exit %d\n%s", r.code, r.stderr)
	}
	if r := jobctlEnv(t, map[string]string{"JOBCTL_ADDR": s.url}, "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\n", "calendars", "import", "bad", "-"); r.code != exitUsage || !strings.Contains(r.stderr, "iCalendar") {
		t.Errorf("import of a truncated file: exit %d\n%s", r.code, r.stderr)
	}
	if r := s.jobctl(t, "calendars", "import", "bad", filepath.Join(dir, "missing.ics")); r.code != exitUsage {
		t.Errorf("import of a missing file: exit %d", r.code)
	}

	// A trigger on the calendar, shown with it; next fire times skip the
	// days off.
	var tr jobkitv1.CreateTriggerResponse
	s.okJSON(t, &tr, "triggers", "create", "daily", "--kind", "sum", "--args", "[1,2]", "--cron", "0 9 * * *", "--tz", "Europe/Paris",
		"--calendar", "fr", "--calendar-policy", "next-workday")
	if tr.GetTrigger().GetCalendar() != "fr" || tr.GetTrigger().GetCalendarPolicy() != jobkitv1.CalendarPolicy_CALENDAR_POLICY_NEXT_WORKDAY {
		t.Fatalf("trigger %v", tr.GetTrigger())
	}
	if list := s.ok(t, "triggers", "list"); !strings.Contains(list, "on fr (next-workday)") {
		t.Errorf("triggers list does not show the calendar:\n%s", list)
	}
	var ft jobkitv1.ListFireTimesResponse
	s.okJSON(t, &ft, "calendars", "next", "--cron", "0 9 * * *", "--tz", "Europe/Paris", "--calendar", "fr", "--count", "3", "--after", "2027-01-01T12:00:00Z")
	var got []string
	for _, f := range ft.GetFireTimes() {
		got = append(got, f.AsTime().Format(time.RFC3339))
	}
	// Saturday 2 and Sunday 3 January are weekend days, Monday 4 is
	// closed: Tuesday 5 is next.
	if strings.Join(got, " ") != "2027-01-05T08:00:00Z 2027-01-06T08:00:00Z 2027-01-07T08:00:00Z" {
		t.Fatalf("calendars next: %v", got)
	}
	table = s.ok(t, "calendars", "next", "--cron", "0 9 * * *", "--tz", "Europe/Paris", "--calendar", "fr", "--policy", "next-workday", "--count", "2", "--after", "2027-01-01T12:00:00Z")
	for _, want := range []string{"skipped", "fires"} {
		if !strings.Contains(table, want) {
			t.Errorf("calendars next table lacks %q:\n%s", want, table)
		}
	}
	s.ok(t, "calendars", "next", "--trigger", "daily")

	// Update: add and remove days; a stale version conflicts.
	var ur jobkitv1.UpdateCalendarResponse
	s.okJSON(t, &ur, "calendars", "update", "fr", "--add-date", "2027-07-14=Fête nationale", "--remove-date", "2027-01-04")
	if n := len(ur.GetCalendar().GetDates()); n != 2 || ur.GetCalendar().GetDates()[1].GetDate() != "2027-07-14" {
		t.Fatalf("updated dates: %v", ur.GetCalendar().GetDates())
	}
	if r := s.jobctl(t, "calendars", "update", "fr", "--tz", "UTC", "--if-version", "1"); r.code != exitConflict {
		t.Errorf("update at a stale version: exit %d\n%s", r.code, r.stderr)
	}
	if r := s.jobctl(t, "calendars", "update", "fr", "--remove-date", "1999-01-01"); r.code != exitUsage {
		t.Errorf("removing a date it lacks: exit %d", r.code)
	}

	// List; delete refused while the trigger uses it, then allowed.
	list := s.ok(t, "calendars", "list")
	if !strings.Contains(list, "de") || !strings.Contains(list, `trigger "daily"`) {
		t.Errorf("calendars list:\n%s", list)
	}
	if r := s.jobctl(t, "calendars", "delete", "fr"); r.code != exitConflict || !strings.Contains(r.stderr, `trigger "daily"`) {
		t.Errorf("delete of a calendar in use: exit %d\n%s", r.code, r.stderr)
	}
	s.ok(t, "triggers", "delete", "daily")
	s.ok(t, "calendars", "delete", "fr")
	if r := s.jobctl(t, "calendars", "get", "fr"); r.code != exitNotFound {
		t.Errorf("get after delete: exit %d", r.code)
	}
}

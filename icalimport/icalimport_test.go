package icalimport_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/icalimport"
	"github.com/jobkit/job/schedule"
	"github.com/jobkit/job/store"
)

// TestParseOfficeHolidays reads a holiday file as calendar programs
// publish it (CRLF lines, a VTIMEZONE, folded lines, escaped text, yearly
// and counted rules, RDATE, EXDATE, a multi-day closure, a timed event, a
// cancelled one) and checks every day off it yields.
func TestParseOfficeHolidays(t *testing.T) {
	f, err := os.Open("testdata/fr-office-2026.ics")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := icalimport.Parse(f, icalimport.Options{Now: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != "France - office holidays" || res.TimeZone != "Europe/Paris" || res.Events != 9 {
		t.Fatalf("name %q, zone %q, %d events; want the file's name, Europe/Paris, 9", res.Name, res.TimeZone, res.Events)
	}
	want := []schedule.Date{
		{Date: "2020-12-25", Name: "Noël", Yearly: true},
		{Date: "2026-01-01", Name: "Jour de l'an", Yearly: true},
		{Date: "2026-04-06", Name: "Lundi de Pâques"},
		{Date: "2026-05-01", Name: "Fête du Travail", Yearly: true},
		{Date: "2026-05-25", Name: "Spring bank holiday (UK office)"},
		{Date: "2026-07-15", Name: "Inventaire (nuit)"},
		{Date: "2026-07-16", Name: "Inventaire (nuit)"},
		{Date: "2026-11-11", Name: "Armistice 1918"},
		{Date: "2026-12-24", Name: "Fermeture de fin d'année"},
		{Date: "2026-12-26", Name: "Fermeture de fin d'année"},
		{Date: "2027-03-29", Name: "Lundi de Pâques"},
		{Date: "2028-04-17", Name: "Lundi de Pâques"},
		{Date: "2028-05-29", Name: "Spring bank holiday (UK office)"},
	}
	if len(res.Dates) != len(want) {
		t.Fatalf("%d dates, want %d:\n got  %+v\n want %+v", len(res.Dates), len(want), res.Dates, want)
	}
	for i := range want {
		if res.Dates[i] != want[i] {
			t.Errorf("date %d: %+v, want %+v", i, res.Dates[i], want[i])
		}
	}
	// The dates make a valid calendar that knows those days.
	cal := &store.Calendar{Name: "fr", TimeZone: res.TimeZone, Dates: res.Dates,
		Workdays: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}}
	r, err := cal.Compile()
	if err != nil {
		t.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	for _, c := range []struct {
		day  string
		off  bool
		name string
	}{
		{"2026-12-25", true, "Noël"}, {"2031-12-25", true, "Noël"}, {"2019-12-25", false, ""},
		{"2033-05-01", true, "Fête du Travail"}, {"2027-05-31", false, ""}, {"2026-08-15", false, ""},
		{"2026-11-11", true, "Armistice 1918"}, {"2026-11-12", false, ""},
	} {
		d, _ := time.ParseInLocation(time.DateOnly, c.day, paris)
		name, off := r.DayOff(d.Add(12 * time.Hour))
		if off != c.off || name != c.name {
			t.Errorf("%s: off %v (%q), want %v (%q)", c.day, off, name, c.off, c.name)
		}
	}
}

func TestParseBadInput(t *testing.T) {
	ev := func(body string) string {
		return "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nBEGIN:VEVENT\r\nUID:x\r\n" + body + "END:VEVENT\r\nEND:VCALENDAR\r\n"
	}
	cases := []struct {
		name, file, msg string
	}{
		{"empty", "", "empty"},
		{"not iCalendar", "hello, world\n", "not an iCalendar file"},
		{"truncated", "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20260101\r\n", "not an iCalendar file"},
		{"another component", "BEGIN:VCARD\r\nFN:x\r\nEND:VCARD\r\n", "not an iCalendar file"},
		{"no event", "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nEND:VCALENDAR\r\n", "no event"},
		{"no start", ev("SUMMARY:Nothing\r\n"), `event "Nothing" has no DTSTART`},
		{"bad start", ev("SUMMARY:Bad\r\nDTSTART;VALUE=DATE:2026-13-45\r\n"), `event "Bad": DTSTART`},
		{"bad rule", ev("SUMMARY:Rule\r\nDTSTART;VALUE=DATE:20260101\r\nRRULE:FREQ=SOMETIMES\r\n"), `event "Rule": RRULE`},
		{"bad exdate", ev("SUMMARY:Ex\r\nDTSTART;VALUE=DATE:20260101\r\nRRULE:FREQ=DAILY;COUNT=3\r\nEXDATE;VALUE=DATE:2026x\r\n"), `event "Ex": EXDATE`},
		{"too long", ev("SUMMARY:Long\r\nDTSTART;VALUE=DATE:20260101\r\nDTEND;VALUE=DATE:20280101\r\n"), "longer than 366 days"},
		{"unknown zone", strings.Replace(ev("DTSTART;VALUE=DATE:20260101\r\n"), "PRODID:-//t//t//EN\r\n", "PRODID:-//t//t//EN\r\nX-WR-TIMEZONE:Mars/Base\r\n", 1), "Mars/Base"},
		{"too many days", ev("SUMMARY:Daily\r\nDTSTART;VALUE=DATE:20260101\r\nRRULE:FREQ=DAILY\r\n"), "more than 2000 days off"},
		{"too large", strings.Repeat("X", icalimport.MaxFileBytes+1), "larger than"},
	}
	for _, c := range cases {
		_, err := icalimport.Parse(strings.NewReader(c.file), icalimport.Options{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v; want ErrInvalid mentioning %q", c.name, err, c.msg)
		}
	}
}

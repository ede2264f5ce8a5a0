package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/schedule"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// frCalendar is Monday to Friday in Europe/Paris, with Armistice Day 2026
// (Wednesday 11 November) off and Christmas off every year. Summer time
// ends there on Sunday 25 October 2026.
func frCalendar() *store.Calendar {
	return &store.Calendar{
		Name:     "fr",
		TimeZone: "Europe/Paris",
		Workdays: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday},
		Dates: []schedule.Date{
			{Date: "2026-11-11", Name: "Armistice"},
			{Date: "2020-12-25", Name: "Christmas", Yearly: true},
		},
	}
}

// The tests below run in a synctest bubble with offsetClock (skew_test.go)
// moving the bubble's clock (which starts in 2000) to the calendar's
// dates: time moves only when every goroutine waits, so a scheduler
// computes each wake-up at one consistent instant.

// calendarCluster starts, inside a synctest bubble, two managers on one
// memdb store, with the bubble's clock moved to start and the kinds given
// registered (each a no-op). Their background loops wake hourly, so weeks
// of fake time cost little.
func calendarCluster(t *testing.T, start time.Time, kinds ...string) (offsetClock, []*job.Manager, store.Store) {
	t.Helper()
	clk := offsetClock{d: time.Until(start)}
	s, err := memdbstore.New(memdbstore.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	ms := make([]*job.Manager, 2)
	for i := range ms {
		ms[i] = newManager(t, job.WithStore(s), job.WithClock(clk), job.WithNodeID(fmt.Sprintf("n%d", i)),
			job.WithTriggerReload(time.Hour), job.WithWorkers(0), job.WithLogger(quietLogger()), job.WithHeartbeat(10*time.Minute, time.Hour), job.WithLease(3*time.Hour),
			job.WithPollInterval(time.Hour), job.WithRescueInterval(time.Hour), job.WithPruneInterval(time.Hour))
		for _, k := range kinds {
			if err := ms[i].RegisterJob(mustJob(t, job.WithKind(k), job.WithExecutor(func() {}))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return clk, ms, s
}

// sleepUntil sleeps the bubble until clk reads at, then waits for every
// goroutine to settle.
func sleepUntil(clk offsetClock, at time.Time) {
	time.Sleep(at.Sub(clk.Now()))
	synctest.Wait()
}

// runAts returns the RunAt of every instance of kind, in UTC, as RFC 3339.
func runAts(t *testing.T, m *job.Manager, kind string) map[string]bool {
	t.Helper()
	ins, err := m.LookupInstances(context.Background(), job.NewQuery(job.WithQueryKind(kind), job.WithQueryLimit(1000)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, in := range ins {
		k := in.RunAt.UTC().Format(time.RFC3339)
		if out[k] {
			t.Fatalf("kind %s: two instances due at %s", kind, k)
		}
		out[k] = true
	}
	return out
}

// parisDays returns 09:00 in Paris of each day from from to to (dates,
// inclusive) that keep says to keep, as UTC RFC 3339.
func parisDays(t *testing.T, from, to string, keep func(d time.Time) bool) []string {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := time.ParseInLocation(time.DateOnly, from, loc)
	l, _ := time.ParseInLocation(time.DateOnly, to, loc)
	var out []string
	for d := f; !d.After(l); d = d.AddDate(0, 0, 1) {
		if keep(d) {
			out = append(out, time.Date(d.Year(), d.Month(), d.Day(), 9, 0, 0, 0, loc).UTC().Format(time.RFC3339))
		}
	}
	return out
}

// TestTriggerCalendarPolicies runs, in a synctest bubble with two
// managers, stored triggers at 09:00 Paris time on the calendar fr for
// three weeks: across a weekend, the end of summer time and a holiday,
// under each policy, beside a control trigger without a calendar. Each
// must fire exactly when its policy says, once in the cluster.
func TestTriggerCalendarPolicies(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Date(2026, 10, 22, 12, 0, 0, 0, time.UTC) // Thursday
		clk, ms, _ := calendarCluster(t, start, "ctl", "wd", "sd", "nw")
		ctx := context.Background()
		for _, m := range ms {
			if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ms[0].Admin().PutCalendar(ctx, frCalendar(), 0); err != nil {
			t.Fatal(err)
		}
		trig := func(name, cron string, p schedule.Policy) *store.Trigger {
			tr := &store.Trigger{Name: name, Kind: name, Cron: cron, TimeZone: "Europe/Paris", Missed: store.MissedSkip}
			if p != "" {
				tr.Calendar, tr.CalendarPolicy = "fr", p
			}
			return tr
		}
		for _, tr := range []*store.Trigger{
			trig("ctl", "0 9 * * *", ""),
			trig("wd", "0 9 * * *", schedule.Workdays),
			trig("sd", "0 9 * * *", schedule.SkipDates),
			trig("nw", "0 9 * * SAT,WED", schedule.NextWorkday),
		} {
			if _, err := ms[1].Admin().PutTrigger(ctx, tr, 0); err != nil {
				t.Fatalf("PutTrigger(%s): %v", tr.Name, err)
			}
		}
		weekday := func(d time.Time) bool { return d.Weekday() != time.Saturday && d.Weekday() != time.Sunday }
		holiday := func(d time.Time) bool { return d.Month() == time.November && d.Day() == 11 }
		want := map[string][]string{
			"ctl": parisDays(t, "2026-10-23", "2026-11-13", func(time.Time) bool { return true }),
			"wd":  parisDays(t, "2026-10-23", "2026-11-13", func(d time.Time) bool { return weekday(d) && !holiday(d) }),
			"sd":  parisDays(t, "2026-10-23", "2026-11-13", func(d time.Time) bool { return !holiday(d) }),
			// Saturdays move to Monday, Wednesday 11 November to Thursday.
			"nw": parisDays(t, "2026-10-23", "2026-11-13", func(d time.Time) bool {
				return d.Weekday() == time.Monday || d.Weekday() == time.Wednesday && !holiday(d) || d.Format(time.DateOnly) == "2026-11-12"
			}),
		}
		// The next fire times the API shows respect the calendar.
		next, err := ms[0].Admin().ListFireTimes(ctx, "nw", 3)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(formatTimes(next)); got != fmt.Sprint(want["nw"][:3]) {
			t.Fatalf("NextFireTimes(nw) = %v, want %v", got, want["nw"][:3])
		}
		sleepUntil(clk, time.Date(2026, 11, 13, 12, 0, 0, 0, time.UTC))
		for _, k := range []string{"ctl", "wd", "sd", "nw"} {
			got := runAts(t, ms[1], k)
			if len(got) != len(want[k]) {
				t.Errorf("trigger %s fired %d times, want %d:\n got  %v\n want %v", k, len(got), len(want[k]), sortedKeys(got), want[k])
				continue
			}
			for _, w := range want[k] {
				if !got[w] {
					t.Errorf("trigger %s did not fire at %s; fired %v", k, w, sortedKeys(got))
				}
			}
		}
	})
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func formatTimes(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, x := range ts {
		out[i] = x.UTC().Format(time.RFC3339)
	}
	return out
}

// TestRecurringJobCalendar: a WithCronSpec job on a calendar schedules its
// first tick on the next working day, not on the weekend; while its
// calendar is not stored it schedules nothing, and once it is stored the
// ticks come.
func TestRecurringJobCalendar(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Date(2026, 10, 23, 12, 0, 0, 0, time.UTC) // Friday, after 09:00 Paris
		clk := offsetClock{d: time.Until(start)}
		s, err := memdbstore.New(memdbstore.WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		m := newManager(t, job.WithStore(s), job.WithClock(clk), job.WithTriggerReload(time.Minute), job.WithWorkers(0), job.WithLogger(quietLogger()),
			job.WithHeartbeat(10*time.Minute, time.Hour), job.WithLease(3*time.Hour), job.WithPollInterval(time.Hour), job.WithRescueInterval(time.Hour), job.WithPruneInterval(time.Hour))
		j := mustJob(t, job.WithKind("daily"), job.WithExecutor(func() {}),
			job.WithCronSpec("CRON_TZ=Europe/Paris 0 9 * * *"), job.WithCalendar("fr", schedule.Workdays))
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// No calendar yet: no tick, however long.
		sleepUntil(clk, start.Add(time.Hour))
		if got := runAts(t, m, "daily"); len(got) != 0 {
			t.Fatalf("ticks scheduled without the calendar: %v", sortedKeys(got))
		}
		if _, err := m.Admin().PutCalendar(ctx, frCalendar(), 0); err != nil {
			t.Fatal(err)
		}
		// Within a reload interval the job reads it. Saturday and Sunday
		// are off: the next tick is Monday 09:00 CET.
		sleepUntil(clk, start.Add(time.Hour+2*time.Minute))
		if got := runAts(t, m, "daily"); len(got) != 1 || !got["2026-10-26T08:00:00Z"] {
			t.Fatalf("ticks: %v, want only Monday's", sortedKeys(got))
		}
		sleepUntil(clk, time.Date(2026, 10, 26, 8, 0, 1, 0, time.UTC))
		if got := runAts(t, m, "daily"); len(got) != 2 || !got["2026-10-27T08:00:00Z"] {
			t.Fatalf("ticks: %v, want Monday's and Tuesday's", sortedKeys(got))
		}
		// The calendar cannot be deleted while the job runs on it.
		err = m.Admin().DeleteCalendar(ctx, "fr", 0)
		if !errors.Is(err, job.ErrCalendarInUse) || !strings.Contains(err.Error(), `job "daily"`) {
			t.Fatalf("DeleteCalendar of a calendar in use: %v; want ErrCalendarInUse naming the job", err)
		}
	})
}

// TestCalendarBadInput: what a user gets wrong about calendars is refused
// with an error that names it, and nothing is stored.
func TestCalendarBadInput(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) { calendarBadInput(t) })
}

func calendarBadInput(t *testing.T) {
	_, ms, _ := calendarCluster(t, time.Date(2026, 10, 22, 12, 0, 0, 0, time.UTC), "k")
	m := ms[0]
	ctx := context.Background()
	// A calendar whose days are all off, an unknown zone.
	allOff := frCalendar()
	allOff.Workdays = nil
	if _, err := m.Admin().PutCalendar(ctx, allOff, 0); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "never fire") {
		t.Fatalf("PutCalendar with no working day: %v", err)
	}
	badZone := frCalendar()
	badZone.TimeZone = "Europe/Atlantis"
	if _, err := m.Admin().PutCalendar(ctx, badZone, 0); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "Europe/Atlantis") {
		t.Fatalf("PutCalendar with an unknown zone: %v", err)
	}
	if _, err := m.Admin().GetCalendar(ctx, "fr"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused calendar was stored: %v", err)
	}
	// A trigger naming a missing calendar.
	tr := &store.Trigger{Name: "t", Kind: "k", Cron: "0 9 * * *", Calendar: "fr"}
	if _, err := m.Admin().PutTrigger(ctx, tr, 0); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `calendar "fr"`) {
		t.Fatalf("PutTrigger naming a missing calendar: %v; want ErrNotFound naming it", err)
	}
	if _, err := m.Admin().GetTrigger(ctx, "t"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the trigger was stored: %v", err)
	}
	stored, err := m.Admin().PutCalendar(ctx, frCalendar(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// A trigger that never fires on it.
	sat := &store.Trigger{Name: "sat", Kind: "k", Cron: "0 9 * * SAT", Calendar: "fr"}
	if _, err := m.Admin().PutTrigger(ctx, sat, 0); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "never fires") {
		t.Fatalf("PutTrigger that never fires on its calendar: %v", err)
	}
	// Deleting a calendar a trigger uses is refused, naming the trigger.
	if _, err := m.Admin().PutTrigger(ctx, tr, 0); err != nil {
		t.Fatal(err)
	}
	err = m.Admin().DeleteCalendar(ctx, "fr", 0)
	if !errors.Is(err, job.ErrCalendarInUse) || !strings.Contains(err.Error(), `trigger "t"`) {
		t.Fatalf("DeleteCalendar in use: %v; want ErrCalendarInUse naming the trigger", err)
	}
	// A stale version is a conflict; the right one deletes once unused.
	if err := m.Admin().DeleteTrigger(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := m.Admin().DeleteCalendar(ctx, "fr", stored.Version+1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("DeleteCalendar at a stale version: %v", err)
	}
	if err := m.Admin().DeleteCalendar(ctx, "fr", stored.Version); err != nil {
		t.Fatal(err)
	}
	if err := m.Admin().DeleteCalendar(ctx, "fr", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteCalendar twice: %v", err)
	}
	// A job on a calendar without a schedule.
	if _, err := job.NewJob(job.WithKind("x"), job.WithExecutor(func() {}), job.WithCalendar("fr", "")); !errors.Is(err, job.ErrInvalidJob) {
		t.Fatalf("WithCalendar without a schedule: %v", err)
	}
	if _, err := job.NewJob(job.WithKind("x"), job.WithExecutor(func() {}), job.WithInterval(time.Hour), job.WithCalendar("fr", "weekends")); !errors.Is(err, job.ErrInvalidJob) {
		t.Fatalf("WithCalendar with an unknown policy: %v", err)
	}
}

// TestTriggerCalendarGoneFiresNothing: a trigger whose calendar vanished
// from the store (deleted by a process that did not see the trigger yet)
// fires no tick while it is gone, and fires again once it is stored.
func TestTriggerCalendarGoneFiresNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Date(2026, 10, 26, 6, 0, 0, 0, time.UTC) // Monday
		clk, ms, st := calendarCluster(t, start, "ctl", "wd")
		m := ms[0]
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Admin().PutCalendar(ctx, frCalendar(), 0); err != nil {
			t.Fatal(err)
		}
		for _, tr := range []*store.Trigger{
			{Name: "ctl", Kind: "ctl", Cron: "0 9 * * *", TimeZone: "Europe/Paris"},
			{Name: "wd", Kind: "wd", Cron: "0 9 * * *", TimeZone: "Europe/Paris", Calendar: "fr"},
		} {
			if _, err := m.Admin().PutTrigger(ctx, tr, 0); err != nil {
				t.Fatal(err)
			}
		}
		sleepUntil(clk, time.Date(2026, 10, 26, 9, 0, 0, 0, time.UTC))
		if got := runAts(t, m, "wd"); len(got) != 1 || !got["2026-10-26T08:00:00Z"] {
			t.Fatalf("Monday's tick: %v", sortedKeys(got))
		}
		// The calendar goes behind the managers' backs (a Manager refuses
		// while the trigger uses it).
		if err := st.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: store.CalendarCollection, Name: "fr"}); err != nil {
			t.Fatal(err)
		}
		sleepUntil(clk, time.Date(2026, 10, 28, 12, 0, 0, 0, time.UTC))
		if got := runAts(t, m, "ctl"); len(got) != 3 {
			t.Fatalf("control ticks: %v, want Monday to Wednesday", sortedKeys(got))
		}
		if got := runAts(t, m, "wd"); len(got) != 1 {
			t.Fatalf("ticks while the calendar is gone: %v, want Monday's only", sortedKeys(got))
		}
		next, err := m.Admin().ListFireTimes(ctx, "wd", 3)
		if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `calendar "fr"`) || len(next) != 0 {
			t.Fatalf("NextFireTimes while the calendar is gone: %v, %v; want ErrNotFound naming it", next, err)
		}
		// Stored again (through another manager: the first sees it at its
		// next reload): the ticks come again, none caught up.
		if _, err := ms[1].Admin().PutCalendar(ctx, frCalendar(), 0); err != nil {
			t.Fatal(err)
		}
		sleepUntil(clk, time.Date(2026, 10, 29, 9, 0, 0, 0, time.UTC))
		if got := runAts(t, m, "wd"); len(got) != 2 || !got["2026-10-29T08:00:00Z"] {
			t.Fatalf("ticks: %v, want Monday's and Thursday's", sortedKeys(got))
		}
	})
}

// TestListCalendarUsersPages: the users of a calendar (its triggers and
// this manager's recurring jobs) come back as pages, in order, each user
// once.
func TestListCalendarUsersPages(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		_, ms, _ := calendarCluster(t, time.Date(2026, 10, 22, 12, 0, 0, 0, time.UTC), "k")
		m := ms[0]
		ctx := context.Background()
		if _, err := m.Admin().PutCalendar(ctx, frCalendar(), 0); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"c", "a", "b"} {
			if _, err := m.Admin().PutTrigger(ctx, &store.Trigger{Name: n, Kind: "k", Cron: "0 9 * * *", Calendar: "fr"}, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.RegisterJob(mustJob(t, job.WithKind("rec"), job.WithExecutor(func() {}), job.WithInterval(time.Hour), job.WithCalendar("fr", ""))); err != nil {
			t.Fatal(err)
		}
		var got []string
		pages := 0
		for cursor := ""; ; pages++ {
			page, err := m.Admin().ListCalendarUsers(ctx, "fr", cursor, 3)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page.Items...)
			if page.Next == "" {
				break
			}
			cursor = page.Next
		}
		want := `job "rec", trigger "a", trigger "b", trigger "c"`
		if strings.Join(got, ", ") != want || pages != 1 {
			t.Fatalf("users in %d pages after the first: %q; want %s in two pages", pages, got, want)
		}
		if _, err := m.Admin().ListCalendarUsers(ctx, "fr", "", -1); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a negative limit: %v; want ErrInvalid", err)
		}
	})
}

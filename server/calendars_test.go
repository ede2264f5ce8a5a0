package server

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// TestCalendarsOverTheAPI imports a holiday file, runs a trigger on it
// and walks every calendar call and its bad input, on every backend.
func TestCalendarsOverTheAPI(t *testing.T) {
	ics, err := os.ReadFile("../icalimport/testdata/fr-office-2026.ics")
	if err != nil {
		t.Fatal(err)
	}
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, protocols[0], "", "")
		cals := jobkitv1connect.NewCalendarServiceClient(httpClient(t, true, "", ""), e.url, connect.WithGRPC())
		ctx := context.Background()
		paris, _ := time.LoadLocation("Europe/Paris")

		// Import: the file's zone, Monday to Friday, its days off.
		imp, err := cals.ImportCalendar(ctx, connect.NewRequest(&pb.ImportCalendarRequest{Name: "fr", Ical: ics}))
		if err != nil {
			t.Fatal(err)
		}
		fr := imp.Msg.GetCalendar()
		if imp.Msg.GetEvents() != 9 || fr.GetTimeZone() != "Europe/Paris" || len(fr.GetWorkdays()) != 5 || len(fr.GetDates()) != 13 ||
			fr.GetVersion() == 0 || !strings.Contains(fr.GetDescription(), "France - office holidays") {
			t.Fatalf("imported %d events: %v", imp.Msg.GetEvents(), fr)
		}
		_, err = cals.ImportCalendar(ctx, connect.NewRequest(&pb.ImportCalendarRequest{Name: "fr", Ical: ics}))
		wantCode(t, err, connect.CodeAlreadyExists, "replace")
		again, err := cals.ImportCalendar(ctx, connect.NewRequest(&pb.ImportCalendarRequest{Name: "fr", Ical: ics, Replace: true,
			Workdays: []pb.Weekday{pb.Weekday_WEEKDAY_MONDAY, pb.Weekday_WEEKDAY_TUESDAY, pb.Weekday_WEEKDAY_WEDNESDAY, pb.Weekday_WEEKDAY_THURSDAY, pb.Weekday_WEEKDAY_FRIDAY}}))
		if err != nil || again.Msg.GetCalendar().GetVersion() <= fr.GetVersion() {
			t.Fatalf("import with replace: %v %v", again, err)
		}
		fr = again.Msg.GetCalendar()

		// Bad input: nothing stored.
		_, err = cals.ImportCalendar(ctx, connect.NewRequest(&pb.ImportCalendarRequest{Name: "bad", Ical: []byte("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:x\r\n")}))
		wantCode(t, err, connect.CodeInvalidArgument, "iCalendar")
		_, err = cals.ImportCalendar(ctx, connect.NewRequest(&pb.ImportCalendarRequest{Name: "bad", Ical: ics, TimeZone: "Europe/Atlantis"}))
		wantCode(t, err, connect.CodeInvalidArgument, "Europe/Atlantis")
		_, err = cals.CreateCalendar(ctx, connect.NewRequest(&pb.CreateCalendarRequest{Calendar: &pb.Calendar{Name: "bad", TimeZone: "UTC"}}))
		wantCode(t, err, connect.CodeInvalidArgument, "never fire")
		_, err = cals.CreateCalendar(ctx, connect.NewRequest(&pb.CreateCalendarRequest{Calendar: &pb.Calendar{Name: "bad", TimeZone: "Nowhere/Town",
			Workdays: []pb.Weekday{pb.Weekday_WEEKDAY_MONDAY}}}))
		wantCode(t, err, connect.CodeInvalidArgument, "Nowhere/Town")
		_, err = cals.CreateCalendar(ctx, connect.NewRequest(&pb.CreateCalendarRequest{Calendar: &pb.Calendar{Name: "bad",
			Workdays: []pb.Weekday{pb.Weekday_WEEKDAY_MONDAY}, Dates: []*pb.CalendarDate{{Date: "31/12/2026"}}}}))
		wantCode(t, err, connect.CodeInvalidArgument, "YYYY-MM-DD")
		_, err = cals.GetCalendar(ctx, connect.NewRequest(&pb.GetCalendarRequest{Name: "bad"}))
		wantCode(t, err, connect.CodeNotFound, `"bad"`)

		// A trigger naming a calendar that is not stored.
		sat := &pb.Trigger{Name: "sat", Kind: "add", ArgsJson: "[1,2]", Cron: "0 9 * * SAT", TimeZone: "Europe/Paris",
			Calendar: "missing", CalendarPolicy: pb.CalendarPolicy_CALENDAR_POLICY_NEXT_WORKDAY}
		_, err = c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: sat}))
		wantCode(t, err, connect.CodeNotFound, `calendar "missing"`)
		// One that never fires on its calendar.
		sat.Calendar, sat.CalendarPolicy = "fr", pb.CalendarPolicy_CALENDAR_POLICY_WORKDAYS
		_, err = c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: sat}))
		wantCode(t, err, connect.CodeInvalidArgument, "never fires")
		// Saturdays moved to the next working day.
		sat.CalendarPolicy = pb.CalendarPolicy_CALENDAR_POLICY_NEXT_WORKDAY
		cr, err := c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: sat}))
		if err != nil {
			t.Fatal(err)
		}
		got := cr.Msg.GetTrigger()
		if got.GetCalendar() != "fr" || got.GetCalendarPolicy() != pb.CalendarPolicy_CALENDAR_POLICY_NEXT_WORKDAY || len(got.GetNextFireTimes()) != defaultNextFireTimes {
			t.Fatalf("created %v", got)
		}
		days := map[string]bool{}
		for _, d := range fr.GetDates() {
			days[d.GetDate()] = true
			if d.GetYearly() {
				days["yearly"+d.GetDate()[4:]] = true
			}
		}
		for _, nt := range got.GetNextFireTimes() {
			l := nt.AsTime().In(paris)
			if l.Hour() != 9 || l.Weekday() == time.Saturday || l.Weekday() == time.Sunday || days[l.Format(time.DateOnly)] || days["yearly"+l.Format("-01-02")] {
				t.Fatalf("next fire time %v (%v in Paris): want a working day at 09:00", nt.AsTime(), l)
			}
		}

		// Preview: a stored trigger, the same times, and the raw ones.
		pv, err := cals.ListFireTimes(ctx, connect.NewRequest(&pb.ListFireTimesRequest{TriggerName: "sat", Count: 5}))
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range pv.Msg.GetFireTimes() {
			if !f.AsTime().Equal(got.GetNextFireTimes()[i].AsTime()) {
				t.Fatalf("preview %d: %v, trigger says %v", i, f.AsTime(), got.GetNextFireTimes()[i].AsTime())
			}
		}
		if raw := pv.Msg.GetRawFireTimes(); len(raw) < 4 || raw[0].AsTime().In(paris).Weekday() != time.Saturday {
			t.Fatalf("raw fire times %v: want the Saturdays", raw)
		}
		// Preview: a trigger and a calendar not stored (Mondays only, all
		// of 2027's first Mondays of the month off).
		after := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
		pv, err = cals.ListFireTimes(ctx, connect.NewRequest(&pb.ListFireTimesRequest{
			Trigger:  &pb.Trigger{Cron: "30 8 * * *", TimeZone: "UTC", CalendarPolicy: pb.CalendarPolicy_CALENDAR_POLICY_WORKDAYS},
			Calendar: &pb.Calendar{Name: "try", Workdays: []pb.Weekday{pb.Weekday_WEEKDAY_MONDAY}, Dates: []*pb.CalendarDate{{Date: "2027-01-04"}, {Date: "2027-02-01"}}},
			Count:    3, After: timestamppb.New(after)}))
		if err != nil {
			t.Fatal(err)
		}
		var ft []string
		for _, f := range pv.Msg.GetFireTimes() {
			ft = append(ft, f.AsTime().Format(time.RFC3339))
		}
		if strings.Join(ft, " ") != "2027-01-11T08:30:00Z 2027-01-18T08:30:00Z 2027-01-25T08:30:00Z" {
			t.Fatalf("preview with a calendar not stored: %v", ft)
		}
		_, err = cals.ListFireTimes(ctx, connect.NewRequest(&pb.ListFireTimesRequest{}))
		wantCode(t, err, connect.CodeInvalidArgument, "trigger_name")
		_, err = cals.ListFireTimes(ctx, connect.NewRequest(&pb.ListFireTimesRequest{Trigger: &pb.Trigger{Cron: "0 9 * * *", Calendar: "missing"}}))
		wantCode(t, err, connect.CodeNotFound, `calendar "missing"`)

		// Who uses it; delete refused while in use.
		g, err := cals.GetCalendar(ctx, connect.NewRequest(&pb.GetCalendarRequest{Name: "fr"}))
		if err != nil || strings.Join(g.Msg.GetCalendar().GetUsedBy(), ",") != `trigger "sat"` {
			t.Fatalf("get: %v %v", g, err)
		}
		_, err = cals.DeleteCalendar(ctx, connect.NewRequest(&pb.DeleteCalendarRequest{Name: "fr"}))
		wantCode(t, err, connect.CodeFailedPrecondition, `trigger "sat"`)

		// Update: a stale version is refused; the read one applies.
		upd := g.Msg.GetCalendar()
		upd.Dates = append(upd.Dates, &pb.CalendarDate{Date: "2027-07-14", Name: "Fête nationale"})
		_, err = cals.UpdateCalendar(ctx, connect.NewRequest(&pb.UpdateCalendarRequest{Calendar: upd, IfVersion: upd.GetVersion() + 1000}))
		wantCode(t, err, connect.CodeFailedPrecondition)
		u, err := cals.UpdateCalendar(ctx, connect.NewRequest(&pb.UpdateCalendarRequest{Calendar: upd, IfVersion: upd.GetVersion()}))
		if err != nil || len(u.Msg.GetCalendar().GetDates()) != 14 {
			t.Fatalf("update: %v %v", u, err)
		}
		_, err = cals.UpdateCalendar(ctx, connect.NewRequest(&pb.UpdateCalendarRequest{Calendar: &pb.Calendar{Name: "ghost", Workdays: upd.GetWorkdays()}}))
		wantCode(t, err, connect.CodeNotFound, "CreateCalendar")

		// List, a page at a time.
		if _, err := cals.CreateCalendar(ctx, connect.NewRequest(&pb.CreateCalendarRequest{Calendar: &pb.Calendar{Name: "de", TimeZone: "Europe/Berlin",
			Workdays: []pb.Weekday{pb.Weekday_WEEKDAY_MONDAY}}})); err != nil {
			t.Fatal(err)
		}
		l, err := cals.ListCalendars(ctx, connect.NewRequest(&pb.ListCalendarsRequest{PageSize: 1}))
		if err != nil || len(l.Msg.GetCalendars()) != 1 || l.Msg.GetCalendars()[0].GetName() != "de" || l.Msg.GetNextPageToken() == "" {
			t.Fatalf("first page: %v %v", l, err)
		}
		l, err = cals.ListCalendars(ctx, connect.NewRequest(&pb.ListCalendarsRequest{PageSize: 1, PageToken: l.Msg.GetNextPageToken()}))
		if err != nil || len(l.Msg.GetCalendars()) != 1 || l.Msg.GetCalendars()[0].GetName() != "fr" || l.Msg.GetNextPageToken() != "" {
			t.Fatalf("second page: %v %v", l, err)
		}

		// Once the trigger is gone the calendar can go.
		if _, err := c.trigs.DeleteTrigger(ctx, connect.NewRequest(&pb.DeleteTriggerRequest{Name: "sat"})); err != nil {
			t.Fatal(err)
		}
		if _, err := cals.DeleteCalendar(ctx, connect.NewRequest(&pb.DeleteCalendarRequest{Name: "fr"})); err != nil {
			t.Fatal(err)
		}
		_, err = cals.DeleteCalendar(ctx, connect.NewRequest(&pb.DeleteCalendarRequest{Name: "fr"}))
		wantCode(t, err, connect.CodeNotFound)
	})
}

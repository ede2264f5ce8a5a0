package console

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// The calendars pages: a list with forms to create a calendar and to
// import an iCalendar file, and a page per calendar with its days off,
// the triggers on it, a preview of when a schedule fires on it, and an
// edit form.

// maxICalUpload bounds an imported file (the API's own limit).
const maxICalUpload = 4 << 20

// weekdayLabels are the weekdays in the API's order.
var weekdayLabels = []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}

// option is a checkbox or a select option of a form.
type option struct {
	Value, Label string
	On           bool
}

// workdayBoxes are the weekday checkboxes, checked for ws.
func workdayBoxes(ws []pb.Weekday) []option {
	out := make([]option, len(weekdayLabels))
	for i, l := range weekdayLabels {
		out[i] = option{Value: fmt.Sprint(i + 1), Label: l, On: slices.Contains(ws, pb.Weekday(i+1))}
	}
	return out
}

var monToFri = []pb.Weekday{pb.Weekday_WEEKDAY_MONDAY, pb.Weekday_WEEKDAY_TUESDAY, pb.Weekday_WEEKDAY_WEDNESDAY, pb.Weekday_WEEKDAY_THURSDAY, pb.Weekday_WEEKDAY_FRIDAY}

// workdaysText writes weekdays as "Mon, Tue, …".
func workdaysText(ws []pb.Weekday) string {
	names := make([]string, 0, len(ws))
	for _, w := range ws {
		if w >= 1 && int(w) <= len(weekdayLabels) {
			names = append(names, weekdayLabels[w-1])
		}
	}
	return strings.Join(names, ", ")
}

// formWorkdays reads the weekday checkboxes.
func formWorkdays(r *http.Request) []pb.Weekday {
	var out []pb.Weekday
	for _, v := range r.Form["workdays"] {
		var n int
		if _, err := fmt.Sscan(v, &n); err == nil && n >= 1 && n <= 7 {
			out = append(out, pb.Weekday(n))
		}
	}
	return out
}

// parseDatesText reads days off, one a line: "2026-12-25 Christmas", or
// "yearly 2026-05-01 Labour Day". Blank lines are skipped.
func parseDatesText(text string) ([]*pb.CalendarDate, error) {
	var out []*pb.CalendarDate
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		d := &pb.CalendarDate{}
		if rest, ok := strings.CutPrefix(line, "yearly "); ok {
			d.Yearly, line = true, strings.TrimSpace(rest)
		}
		date, name, _ := strings.Cut(line, " ")
		if _, err := time.Parse(time.DateOnly, date); err != nil {
			return nil, fmt.Errorf("days off, line %d: %q is not a date; write YYYY-MM-DD and a name, such as 2026-12-25 Christmas", i+1, date)
		}
		d.Date, d.Name = date, strings.TrimSpace(name)
		out = append(out, d)
	}
	return out, nil
}

// datesText writes days off as parseDatesText reads them.
func datesText(ds []*pb.CalendarDate) string {
	var b strings.Builder
	for _, d := range ds {
		if d.GetYearly() {
			b.WriteString("yearly ")
		}
		b.WriteString(d.GetDate())
		if d.GetName() != "" {
			b.WriteString(" " + d.GetName())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// nextDayOff returns the first day off of c from today on, in its zone.
func nextDayOff(c *pb.Calendar, now time.Time) string {
	loc, err := time.LoadLocation(c.GetTimeZone())
	if err != nil {
		loc = time.UTC
	}
	today := now.In(loc).Format(time.DateOnly)
	best := ""
	for _, d := range c.GetDates() {
		date := d.GetDate()
		if d.GetYearly() {
			date = today[:4] + date[4:]
			if date < today {
				date = fmt.Sprint(now.In(loc).Year()+1) + d.GetDate()[4:]
			}
		}
		if date >= today && (best == "" || date < best) {
			best = date
		}
	}
	return best
}

// calendarRow is one line of the calendars table.
type calendarRow struct {
	Name, Zone, Workdays, NextOff string
	DaysOff                       int
	UsedBy                        []string
}

// calendarsPage lists the calendars.
func (c *Console) calendarsPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	var rows []calendarRow
	token := ""
	for range 10 {
		res, err := s.api.calendars.ListCalendars(r.Context(), connect.NewRequest(&pb.ListCalendarsRequest{PageSize: 1000, PageToken: token}))
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		for _, cal := range res.Msg.GetCalendars() {
			rows = append(rows, calendarRow{Name: cal.GetName(), Zone: cal.GetTimeZone(), Workdays: workdaysText(cal.GetWorkdays()),
				DaysOff: len(cal.GetDates()), NextOff: nextDayOff(cal, time.Now()), UsedBy: cal.GetUsedBy()})
		}
		if token = res.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	c.render(w, r, s, "calendars", http.StatusOK, map[string]any{"Calendars": rows, "DefaultWorkdays": workdayBoxes(monToFri)})
}

// previewRow is one time of a calendar page's preview.
type previewRow struct {
	At          *timestamppb.Timestamp
	What, Class string
}

// calendarPolicies are the policy choices of the preview.
var calendarPolicies = []option{
	{Value: "workdays", Label: "Only on working days"},
	{Value: "skip-dates", Label: "Skip the days off only"},
	{Value: "next-workday", Label: "Move to the next working day"},
}

// calendarPage shows one calendar, and previews a schedule on it when the
// form gives a cron spec.
func (c *Console) calendarPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	name := r.PathValue("name")
	res, err := s.api.calendars.GetCalendar(r.Context(), connect.NewRequest(&pb.GetCalendarRequest{Name: name}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	cal := res.Msg.GetCalendar()
	q := r.URL.Query()
	cron, tz, policy := strings.TrimSpace(q.Get("cron")), strings.TrimSpace(q.Get("tz")), q.Get("policy")
	if policy == "" {
		policy = "workdays"
	}
	policies := slices.Clone(calendarPolicies)
	for i := range policies {
		policies[i].On = policies[i].Value == policy
	}
	data := map[string]any{
		"Calendar": cal, "Workdays": workdaysText(cal.GetWorkdays()), "WorkdayBoxes": workdayBoxes(cal.GetWorkdays()),
		"DatesText": datesText(cal.GetDates()), "Cron": cron, "TZ": tz, "Policies": policies,
	}
	if cron != "" {
		p, ok := pb.CalendarPolicy_value["CALENDAR_POLICY_"+strings.ToUpper(strings.ReplaceAll(policy, "-", "_"))]
		if !ok {
			p = int32(pb.CalendarPolicy_CALENDAR_POLICY_WORKDAYS)
		}
		ft, err := s.api.calendars.ListFireTimes(r.Context(), connect.NewRequest(&pb.ListFireTimesRequest{
			Trigger: &pb.Trigger{Cron: cron, TimeZone: tz, Calendar: name, CalendarPolicy: pb.CalendarPolicy(p)}, Count: 10}))
		if err != nil {
			data["PreviewError"] = apiMessage(err)
		} else {
			data["Preview"] = previewRows(ft.Msg.GetFireTimes(), ft.Msg.GetRawFireTimes(), policy == "next-workday")
		}
	}
	c.render(w, r, s, "calendar", http.StatusOK, data)
}

// previewRows merges fire times with the raw ones: each raw tick the
// calendar drops is "skipped" (or, when moved is set, moved to the next
// working day, where it may run with that day's own tick), a fire time
// that is no raw tick "moved".
func previewRows(fire, raw []*timestamppb.Timestamp, moved bool) []previewRow {
	at := func(t *timestamppb.Timestamp) time.Time { return t.AsTime() }
	fires := map[time.Time]bool{}
	for _, f := range fire {
		fires[at(f)] = true
	}
	raws := map[time.Time]bool{}
	for _, f := range raw {
		raws[at(f)] = true
	}
	all := append(slices.Clone(fire), raw...)
	slices.SortFunc(all, func(a, b *timestamppb.Timestamp) int { return at(a).Compare(at(b)) })
	all = slices.CompactFunc(all, func(a, b *timestamppb.Timestamp) bool { return at(a).Equal(at(b)) })
	out := make([]previewRow, 0, len(all))
	for _, t := range all {
		switch {
		case !fires[at(t)] && moved:
			out = append(out, previewRow{At: t, What: "a day off: moved to the next working day, same time", Class: "skipped"})
		case !fires[at(t)]:
			out = append(out, previewRow{At: t, What: "skipped: a day off", Class: "skipped"})
		case !raws[at(t)]:
			out = append(out, previewRow{At: t, What: "fires (moved from a day off)", Class: "moved"})
		default:
			out = append(out, previewRow{At: t, What: "fires", Class: "fires"})
		}
	}
	return out
}

// createCalendar stores the calendar of the create form.
func (c *Console) createCalendar(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	dates, err := parseDatesText(r.PostFormValue("dates"))
	if err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
		return
	}
	cal := &pb.Calendar{Name: strings.TrimSpace(r.PostFormValue("name")), TimeZone: strings.TrimSpace(r.PostFormValue("tz")),
		Workdays: formWorkdays(r), Dates: dates, Description: strings.TrimSpace(r.PostFormValue("description"))}
	if _, err := s.api.calendars.CreateCalendar(r.Context(), connect.NewRequest(&pb.CreateCalendarRequest{Calendar: cal})); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.back(w, r, "/calendars/"+cal.Name, "Calendar "+cal.Name+" created.")
}

// importCalendar stores the calendar of the import form's file.
func (c *Console) importCalendar(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxICalUpload+64<<10)
	if err := r.ParseMultipartForm(maxICalUpload + 64<<10); err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the import form: %v; send an .ics file of at most 4 MiB", err)))
		return
	}
	if !c.checkPost(w, r, s) {
		return
	}
	f, _, err := r.FormFile("ical")
	if err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("no iCalendar file in the form: %v; choose an .ics file", err)))
		return
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxICalUpload+1))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	name := strings.TrimSpace(r.PostFormValue("name"))
	req := &pb.ImportCalendarRequest{Name: name, Ical: data, TimeZone: strings.TrimSpace(r.PostFormValue("tz")),
		Workdays: formWorkdays(r), Replace: r.PostFormValue("replace") != ""}
	res, err := s.api.calendars.ImportCalendar(r.Context(), connect.NewRequest(req))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.back(w, r, "/calendars/"+name, fmt.Sprintf("Calendar %s imported: %d events, %d days off.", name, res.Msg.GetEvents(), len(res.Msg.GetCalendar().GetDates())))
}

// calendarAction updates or deletes a calendar.
func (c *Console) calendarAction(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	name, ctx := r.PathValue("name"), r.Context()
	switch r.PathValue("action") {
	case "update":
		dates, err := parseDatesText(r.PostFormValue("dates"))
		if err != nil {
			c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
			return
		}
		var version int64
		if _, err := fmt.Sscan(r.PostFormValue("version"), &version); err != nil {
			c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the edit form has no version: reload the page and try again")))
			return
		}
		cal := &pb.Calendar{Name: name, TimeZone: strings.TrimSpace(r.PostFormValue("tz")), Workdays: formWorkdays(r), Dates: dates,
			Description: strings.TrimSpace(r.PostFormValue("description"))}
		if _, err := s.api.calendars.UpdateCalendar(ctx, connect.NewRequest(&pb.UpdateCalendarRequest{Calendar: cal, IfVersion: version})); err != nil {
			c.fail(w, r, s, err)
			return
		}
		c.back(w, r, "/calendars/"+name, "Calendar "+name+" saved.")
	case "delete":
		if _, err := s.api.calendars.DeleteCalendar(ctx, connect.NewRequest(&pb.DeleteCalendarRequest{Name: name})); err != nil {
			c.fail(w, r, s, err)
			return
		}
		c.back(w, r, "/calendars", "Calendar "+name+" deleted.")
	default:
		http.NotFound(w, r)
	}
}

package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/icalimport"
	"github.com/jobkit/job/schedule"
	"github.com/jobkit/job/store"
)

func init() {
	serviceNames = append(serviceNames, jobkitv1connect.CalendarServiceName)
	maps.Copy(procedureRoles, map[string]Role{
		jobkitv1connect.CalendarServiceCreateCalendarProcedure: RoleAdmin,
		jobkitv1connect.CalendarServiceGetCalendarProcedure:    RoleViewer,
		jobkitv1connect.CalendarServiceListCalendarsProcedure:  RoleViewer,
		jobkitv1connect.CalendarServiceUpdateCalendarProcedure: RoleAdmin,
		jobkitv1connect.CalendarServiceDeleteCalendarProcedure: RoleAdmin,
		jobkitv1connect.CalendarServiceImportCalendarProcedure: RoleAdmin,
		jobkitv1connect.CalendarServiceListFireTimesProcedure:  RoleViewer,
	})
	codeRules = append([]codeRule{{job.ErrCalendarInUse, connect.CodeFailedPrecondition, ""}}, codeRules...)
}

// maxImportYears bounds ImportCalendarRequest.years.
const maxImportYears = 50

// calendarService implements jobkitv1connect.CalendarServiceHandler on
// the namespace's manager.
type calendarService struct{}

// weekdays maps the API's weekdays to Go's.
var weekdays = map[pb.Weekday]time.Weekday{
	pb.Weekday_WEEKDAY_MONDAY: time.Monday, pb.Weekday_WEEKDAY_TUESDAY: time.Tuesday, pb.Weekday_WEEKDAY_WEDNESDAY: time.Wednesday,
	pb.Weekday_WEEKDAY_THURSDAY: time.Thursday, pb.Weekday_WEEKDAY_FRIDAY: time.Friday, pb.Weekday_WEEKDAY_SATURDAY: time.Saturday,
	pb.Weekday_WEEKDAY_SUNDAY: time.Sunday,
}

var weekdaysBack = reverse(weekdays)

// calendarPolicies maps the store's calendar policies to the API's.
var calendarPolicies = map[schedule.Policy]pb.CalendarPolicy{
	"":                   pb.CalendarPolicy_CALENDAR_POLICY_UNSPECIFIED,
	schedule.Workdays:    pb.CalendarPolicy_CALENDAR_POLICY_WORKDAYS,
	schedule.SkipDates:   pb.CalendarPolicy_CALENDAR_POLICY_SKIP_DATES,
	schedule.NextWorkday: pb.CalendarPolicy_CALENDAR_POLICY_NEXT_WORKDAY,
}

var calendarPoliciesBack = reverse(calendarPolicies)

// calendarToProto converts a stored calendar with what runs on it.
func calendarToProto(c *store.Calendar, usedBy []string) *pb.Calendar {
	out := &pb.Calendar{
		Name: c.Name, TimeZone: c.TimeZone, Description: c.Description, Version: c.Version,
		CreatedAt: ts(c.CreatedAt), UpdatedAt: ts(c.UpdatedAt), UsedBy: usedBy,
	}
	for _, d := range c.Workdays {
		out.Workdays = append(out.Workdays, weekdaysBack[d])
	}
	for _, d := range c.Dates {
		out.Dates = append(out.Dates, &pb.CalendarDate{Date: d.Date, Name: d.Name, Yearly: d.Yearly})
	}
	return out
}

// calendarFromProto converts a requested calendar; version and times are
// the store's and are not read.
func calendarFromProto(p *pb.Calendar) (*store.Calendar, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no calendar in the request; send one with name, time_zone, workdays and dates", store.ErrInvalid)
	}
	c := &store.Calendar{Name: p.GetName(), TimeZone: p.GetTimeZone(), Description: p.GetDescription()}
	days, err := workdaysFromProto(p.GetWorkdays())
	if err != nil {
		return nil, err
	}
	c.Workdays = days
	for _, d := range p.GetDates() {
		c.Dates = append(c.Dates, schedule.Date{Date: d.GetDate(), Name: d.GetName(), Yearly: d.GetYearly()})
	}
	return c, nil
}

func workdaysFromProto(ws []pb.Weekday) ([]time.Weekday, error) {
	out := make([]time.Weekday, 0, len(ws))
	for _, w := range ws {
		d, ok := weekdays[w]
		if !ok {
			return nil, fmt.Errorf("%w: calendar.workdays holds %v; want WEEKDAY_MONDAY to WEEKDAY_SUNDAY", store.ErrInvalid, w)
		}
		out = append(out, d)
	}
	return out, nil
}

// calendarResponse converts a stored calendar with the triggers and jobs
// that run on it.
func calendarResponse(ctx context.Context, c *store.Calendar) (*pb.Calendar, error) {
	var users []string
	for cursor := ""; ; {
		page, err := managerOf(ctx).Admin().ListCalendarUsers(ctx, c.Name, cursor, 0)
		if err != nil {
			return nil, toConnect(err)
		}
		users = append(users, page.Items...)
		if page.Next == "" {
			return calendarToProto(c, users), nil
		}
		cursor = page.Next
	}
}

// CreateCalendar implements CalendarService.CreateCalendar.
func (calendarService) CreateCalendar(ctx context.Context, req *connect.Request[pb.CreateCalendarRequest]) (*connect.Response[pb.CreateCalendarResponse], error) {
	c, err := calendarFromProto(req.Msg.GetCalendar())
	if err != nil {
		return nil, toConnect(err)
	}
	got, err := managerOf(ctx).Admin().PutCalendar(ctx, c, 0)
	if errors.Is(err, store.ErrConflict) {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("calendar %q exists already (%v); update it with UpdateCalendar, or delete it first", c.Name, err))
	}
	if err != nil {
		return nil, toConnect(err)
	}
	out, err := calendarResponse(ctx, got)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.CreateCalendarResponse{Calendar: out}), nil
}

// GetCalendar implements CalendarService.GetCalendar.
func (calendarService) GetCalendar(ctx context.Context, req *connect.Request[pb.GetCalendarRequest]) (*connect.Response[pb.GetCalendarResponse], error) {
	if req.Msg.GetName() == "" {
		return nil, invalid("name is required; send the calendar's name")
	}
	c, err := managerOf(ctx).Admin().GetCalendar(ctx, req.Msg.GetName())
	if err != nil {
		return nil, toConnect(err)
	}
	out, err := calendarResponse(ctx, c)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.GetCalendarResponse{Calendar: out}), nil
}

// ListCalendars implements CalendarService.ListCalendars, in name order;
// the page token is the store's cursor.
func (calendarService) ListCalendars(ctx context.Context, req *connect.Request[pb.ListCalendarsRequest]) (*connect.Response[pb.ListCalendarsResponse], error) {
	size, err := pageSize(req.Msg.GetPageSize())
	if err != nil {
		return nil, err
	}
	size = min(size, store.MaxDocumentPage)
	page, err := managerOf(ctx).Admin().ListCalendars(ctx, req.Msg.GetPageToken(), size)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pb.ListCalendarsResponse{NextPageToken: page.Next, Calendars: make([]*pb.Calendar, len(page.Items))}
	for i, c := range page.Items {
		if out.Calendars[i], err = calendarResponse(ctx, c); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(out), nil
}

// UpdateCalendar implements CalendarService.UpdateCalendar.
func (calendarService) UpdateCalendar(ctx context.Context, req *connect.Request[pb.UpdateCalendarRequest]) (*connect.Response[pb.UpdateCalendarResponse], error) {
	c, err := calendarFromProto(req.Msg.GetCalendar())
	if err != nil {
		return nil, toConnect(err)
	}
	v := req.Msg.GetIfVersion()
	if v < 0 {
		return nil, invalid(fmt.Sprintf("if_version %d is negative; send the version read, or 0 to replace whatever is stored", v))
	}
	m := managerOf(ctx)
	if v == 0 {
		cur, err := m.Admin().GetCalendar(ctx, c.Name)
		if err != nil {
			return nil, toConnect(notFoundHint(err, "create it with CreateCalendar"))
		}
		v = cur.Version
	}
	got, err := m.Admin().PutCalendar(ctx, c, v)
	if err != nil {
		return nil, toConnect(notFoundHint(err, "create it with CreateCalendar"))
	}
	out, err := calendarResponse(ctx, got)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.UpdateCalendarResponse{Calendar: out}), nil
}

// DeleteCalendar implements CalendarService.DeleteCalendar: refused
// (FailedPrecondition, naming them) while triggers run on it.
func (calendarService) DeleteCalendar(ctx context.Context, req *connect.Request[pb.DeleteCalendarRequest]) (*connect.Response[pb.DeleteCalendarResponse], error) {
	if req.Msg.GetName() == "" {
		return nil, invalid("name is required; send the name of the calendar to delete")
	}
	if req.Msg.GetIfVersion() < 0 {
		return nil, invalid(fmt.Sprintf("if_version %d is negative; send the version read, or 0", req.Msg.GetIfVersion()))
	}
	if err := managerOf(ctx).Admin().DeleteCalendar(ctx, req.Msg.GetName(), req.Msg.GetIfVersion()); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.DeleteCalendarResponse{}), nil
}

// ImportCalendar implements CalendarService.ImportCalendar: the file's
// events become the calendar's dates; nothing is stored when the file or
// the calendar it makes is refused.
func (calendarService) ImportCalendar(ctx context.Context, req *connect.Request[pb.ImportCalendarRequest]) (*connect.Response[pb.ImportCalendarResponse], error) {
	r := req.Msg
	if r.GetName() == "" {
		return nil, invalid("name is required; send the name of the calendar to create")
	}
	years := int(r.GetYears())
	switch {
	case years < 0 || years > maxImportYears:
		return nil, invalid(fmt.Sprintf("years %d; send 0 (for 10) up to %d", years, maxImportYears))
	case years == 0:
		years = 10
	}
	m := managerOf(ctx)
	opts := icalimport.Options{Now: time.Now()}
	if r.GetTimeZone() != "" {
		loc, err := time.LoadLocation(r.GetTimeZone())
		if err != nil {
			return nil, invalid(fmt.Sprintf("time_zone %q: %v; use an IANA name such as \"Europe/Paris\"", r.GetTimeZone(), err))
		}
		opts.Location = loc
	}
	opts.From = time.Date(opts.Now.Year(), time.January, 1, 0, 0, 0, 0, time.UTC)
	opts.Until = opts.From.AddDate(years, 0, 0)
	res, err := icalimport.Parse(bytes.NewReader(r.GetIcal()), opts)
	if err != nil {
		return nil, toConnect(fmt.Errorf("import calendar %q: %w", r.GetName(), err))
	}
	c := &store.Calendar{Name: r.GetName(), TimeZone: r.GetTimeZone(), Dates: res.Dates, Description: r.GetDescription()}
	if c.TimeZone == "" {
		c.TimeZone = res.TimeZone
	}
	if c.Description == "" && res.Name != "" {
		c.Description = "Imported from " + res.Name
	}
	if c.Workdays, err = workdaysFromProto(r.GetWorkdays()); err != nil {
		return nil, toConnect(err)
	}
	if len(c.Workdays) == 0 {
		c.Workdays = []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}
	}
	version := int64(0)
	if r.GetReplace() {
		version = store.AnyVersion
	}
	got, err := m.Admin().PutCalendar(ctx, c, version)
	if errors.Is(err, store.ErrConflict) {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("calendar %q exists already (%v); import with replace to overwrite its dates", c.Name, err))
	}
	if err != nil {
		return nil, toConnect(err)
	}
	out, err := calendarResponse(ctx, got)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.ImportCalendarResponse{Calendar: out, Events: int32(min(res.Events, 1<<31-1))}), nil
}

// ListFireTimes implements CalendarService.ListFireTimes.
func (calendarService) ListFireTimes(ctx context.Context, req *connect.Request[pb.ListFireTimesRequest]) (*connect.Response[pb.ListFireTimesResponse], error) {
	r := req.Msg
	n := int(r.GetCount())
	switch {
	case n < 0 || n > maxNextFireTimes:
		return nil, invalid(fmt.Sprintf("count %d; send 0 (for %d) up to %d", n, defaultNextFireTimes, maxNextFireTimes))
	case n == 0:
		n = defaultNextFireTimes
	}
	m := managerOf(ctx)
	var t *store.Trigger
	switch {
	case r.GetTriggerName() != "" && r.GetTrigger() != nil:
		return nil, invalid("send trigger_name or trigger, not both")
	case r.GetTriggerName() != "":
		var err error
		if t, err = m.Admin().GetTrigger(ctx, r.GetTriggerName()); err != nil {
			return nil, toConnect(err)
		}
	case r.GetTrigger() != nil:
		var err error
		if t, err = triggerFromProto(r.GetTrigger()); err != nil {
			return nil, toConnect(err)
		}
		if t.Name == "" {
			t.Name = "preview"
		}
		if t.Kind == "" {
			t.Kind = "preview"
		}
		if pc := r.GetCalendar(); pc != nil {
			t.Calendar = pc.GetName()
		}
		if err := t.Validate(); err != nil {
			return nil, toConnect(err)
		}
	default:
		return nil, invalid("send trigger_name (a stored trigger) or trigger (one to try)")
	}
	after := time.Now()
	if r.GetAfter() != nil {
		after = r.GetAfter().AsTime()
	}
	var rules *schedule.Rules
	if pc := r.GetCalendar(); pc != nil {
		c, err := calendarFromProto(pc)
		if err != nil {
			return nil, toConnect(err)
		}
		if rules, err = c.Compile(); err != nil {
			return nil, toConnect(err)
		}
		t.Calendar = c.Name
	} else if t.Calendar != "" {
		var err error
		if rules, err = m.Admin().GetCalendarRules(ctx, t.Calendar); err != nil {
			return nil, toConnect(fmt.Errorf("trigger %q: %w", t.Name, err))
		}
	}
	fire, err := t.Spec().NextTimes(after, n, rules)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pb.ListFireTimesResponse{}
	for _, f := range fire {
		out.FireTimes = append(out.FireTimes, timestamppb.New(f))
	}
	raw := t.Spec()
	raw.Calendar, raw.Policy = "", ""
	until := after.AddDate(0, 0, 7)
	if len(fire) > 0 {
		until = fire[len(fire)-1]
	}
	for tk, err := raw.Next(after, nil); err == nil && !tk.IsZero() && !tk.After(until) && len(out.RawFireTimes) < maxNextFireTimes; tk, err = raw.Next(tk, nil) {
		out.RawFireTimes = append(out.RawFireTimes, timestamppb.New(tk))
	}
	return connect.NewResponse(out), nil
}

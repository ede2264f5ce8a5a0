package server

import (
	"bytes"
	"cmp"
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
	return adminCall(ctx, func(a *job.Admin) (*pb.CreateCalendarResponse, error) {
		c, err := calendarFromProto(req.Msg.GetCalendar())
		if err != nil {
			return nil, err
		}
		got, err := a.PutCalendar(ctx, c, 0)
		if errors.Is(err, store.ErrConflict) {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("calendar %q exists already (%v); update it with UpdateCalendar, or delete it first", c.Name, err))
		}
		out, err := calendarOut(ctx)(got, err)
		return &pb.CreateCalendarResponse{Calendar: out}, err
	})
}

// GetCalendar implements CalendarService.GetCalendar.
func (calendarService) GetCalendar(ctx context.Context, req *connect.Request[pb.GetCalendarRequest]) (*connect.Response[pb.GetCalendarResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.GetCalendarResponse, error) {
		if err := required(req.Msg.GetName(), "name", "the calendar's name"); err != nil {
			return nil, err
		}
		out, err := calendarOut(ctx)(a.GetCalendar(ctx, req.Msg.GetName()))
		return &pb.GetCalendarResponse{Calendar: out}, err
	})
}

// ListCalendars implements CalendarService.ListCalendars, in name order;
// the page token is the store's cursor.
func (calendarService) ListCalendars(ctx context.Context, req *connect.Request[pb.ListCalendarsRequest]) (*connect.Response[pb.ListCalendarsResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.ListCalendarsResponse, error) {
		size, err := pageSize(req.Msg.GetPageSize())
		if err != nil {
			return nil, err
		}
		page, err := a.ListCalendars(ctx, req.Msg.GetPageToken(), min(size, store.MaxDocumentPage))
		if err != nil {
			return nil, err
		}
		out := &pb.ListCalendarsResponse{NextPageToken: page.Next, Calendars: make([]*pb.Calendar, len(page.Items))}
		for i, c := range page.Items {
			if out.Calendars[i], err = calendarResponse(ctx, c); err != nil {
				return nil, err
			}
		}
		return out, nil
	})
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
	return adminCall(ctx, func(a *job.Admin) (*pb.DeleteCalendarResponse, error) {
		if err := required(req.Msg.GetName(), "name", "the name of the calendar to delete"); err != nil {
			return nil, err
		}
		if req.Msg.GetIfVersion() < 0 {
			return nil, invalid(fmt.Sprintf("if_version %d is negative; send the version read, or 0", req.Msg.GetIfVersion()))
		}
		return &pb.DeleteCalendarResponse{}, a.DeleteCalendar(ctx, req.Msg.GetName(), req.Msg.GetIfVersion())
	})
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
	return adminCall(ctx, func(a *job.Admin) (*pb.ListFireTimesResponse, error) {
		r := req.Msg
		n, err := fireTimesCount(r.GetCount(), "count")
		if err != nil {
			return nil, err
		}
		t, err := fireTimesTrigger(ctx, a, r)
		if err != nil {
			return nil, err
		}
		rules, err := fireTimesRules(ctx, a, r.GetCalendar(), t)
		if err != nil {
			return nil, err
		}
		after := time.Now()
		if r.GetAfter() != nil {
			after = r.GetAfter().AsTime()
		}
		fire, err := t.Spec().NextTimes(after, n, rules)
		if err != nil {
			return nil, err
		}
		until := after.AddDate(0, 0, 7)
		if len(fire) > 0 {
			until = fire[len(fire)-1]
		}
		out := &pb.ListFireTimesResponse{RawFireTimes: rawFireTimes(t, after, until)}
		for _, f := range fire {
			out.FireTimes = append(out.FireTimes, timestamppb.New(f))
		}
		return out, nil
	})
}

// fireTimesTrigger returns the trigger a ListFireTimes asks about: the
// stored one it names, or the one it sends, checked (with "preview" for
// a missing name or kind, on the calendar it sends if any).
func fireTimesTrigger(ctx context.Context, a *job.Admin, r *pb.ListFireTimesRequest) (*store.Trigger, error) {
	switch {
	case r.GetTriggerName() != "" && r.GetTrigger() != nil:
		return nil, invalid("send trigger_name or trigger, not both")
	case r.GetTriggerName() != "":
		return a.GetTrigger(ctx, r.GetTriggerName())
	case r.GetTrigger() == nil:
		return nil, invalid("send trigger_name (a stored trigger) or trigger (one to try)")
	}
	t, err := triggerFromProto(r.GetTrigger())
	if err != nil {
		return nil, err
	}
	t.Name, t.Kind = cmp.Or(t.Name, "preview"), cmp.Or(t.Kind, "preview")
	if pc := r.GetCalendar(); pc != nil {
		t.Calendar = pc.GetName()
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// fireTimesRules returns the rules of the calendar a ListFireTimes sends
// (pc, and t then runs on it), else of the stored one t names, else nil.
func fireTimesRules(ctx context.Context, a *job.Admin, pc *pb.Calendar, t *store.Trigger) (*schedule.Rules, error) {
	if pc != nil {
		c, err := calendarFromProto(pc)
		if err != nil {
			return nil, err
		}
		t.Calendar = c.Name
		return c.Compile()
	}
	if t.Calendar == "" {
		return nil, nil
	}
	rules, err := a.GetCalendarRules(ctx, t.Calendar)
	if err != nil {
		return nil, fmt.Errorf("trigger %q: %w", t.Name, err)
	}
	return rules, nil
}

// rawFireTimes returns t's ticks after after, up to until, without its
// calendar (at most maxNextFireTimes).
func rawFireTimes(t *store.Trigger, after, until time.Time) []*timestamppb.Timestamp {
	raw := t.Spec()
	raw.Calendar, raw.Policy = "", ""
	var out []*timestamppb.Timestamp
	for tk, err := raw.Next(after, nil); err == nil && !tk.IsZero() && !tk.After(until) && len(out) < maxNextFireTimes; tk, err = raw.Next(tk, nil) {
		out = append(out, timestamppb.New(tk))
	}
	return out
}

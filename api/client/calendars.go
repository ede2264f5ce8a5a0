package client

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// CreateCalendar stores a new calendar (a zone, working weekdays and days
// off) and returns it as stored; CodeAlreadyExists when its name is
// taken, CodeInvalidArgument for an unknown zone, a malformed date or a
// calendar whose days are all off.
func (a *Admin) CreateCalendar(ctx context.Context, cal *jobkitv1.Calendar) (*jobkitv1.Calendar, error) {
	c := a.c
	res, err := c.calendars.CreateCalendar(ctx, connect.NewRequest(&jobkitv1.CreateCalendarRequest{Calendar: cal}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("create calendar %q", cal.GetName()), err)
	}
	return res.Msg.GetCalendar(), nil
}

// GetCalendar returns the calendar named name, with the triggers that run on
// it; CodeNotFound when there is none.
func (a *Admin) GetCalendar(ctx context.Context, name string) (*jobkitv1.Calendar, error) {
	c := a.c
	res, err := c.calendars.GetCalendar(ctx, connect.NewRequest(&jobkitv1.GetCalendarRequest{Name: name}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("get calendar %q", name), err)
	}
	return res.Msg.GetCalendar(), nil
}

// ListCalendars returns one page of calendars sorted by name, with the next
// page's token in Next ("" after the last).
func (a *Admin) ListCalendars(ctx context.Context, pageSize int, pageToken string) (*job.Page[*jobkitv1.Calendar], error) {
	c := a.c
	res, err := c.calendars.ListCalendars(ctx, connect.NewRequest(&jobkitv1.ListCalendarsRequest{PageSize: int32(pageSize), PageToken: pageToken}))
	if err != nil {
		return nil, wrap("list calendars", err)
	}
	return &job.Page[*jobkitv1.Calendar]{Items: res.Msg.GetCalendars(), Next: res.Msg.GetNextPageToken()}, nil
}

// UpdateCalendar replaces a stored calendar if its version is still
// ifVersion (0: whatever is stored).
func (a *Admin) UpdateCalendar(ctx context.Context, cal *jobkitv1.Calendar, ifVersion int64) (*jobkitv1.Calendar, error) {
	c := a.c
	res, err := c.calendars.UpdateCalendar(ctx, connect.NewRequest(&jobkitv1.UpdateCalendarRequest{Calendar: cal, IfVersion: ifVersion}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("update calendar %q", cal.GetName()), err)
	}
	return res.Msg.GetCalendar(), nil
}

// DeleteCalendar deletes the calendar named name (only at ifVersion when
// not 0); CodeFailedPrecondition, naming them, while triggers run on it.
func (a *Admin) DeleteCalendar(ctx context.Context, name string, ifVersion int64) error {
	c := a.c
	_, err := c.calendars.DeleteCalendar(ctx, connect.NewRequest(&jobkitv1.DeleteCalendarRequest{Name: name, IfVersion: ifVersion}))
	return wrap(fmt.Sprintf("delete calendar %q", name), err)
}

// ImportCalendar creates (or, with req.Replace, replaces) a calendar from
// an iCalendar file and returns it with how many events the file held;
// CodeInvalidArgument for a malformed file.
func (a *Admin) ImportCalendar(ctx context.Context, req *jobkitv1.ImportCalendarRequest) (*jobkitv1.Calendar, int, error) {
	c := a.c
	res, err := c.calendars.ImportCalendar(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, 0, wrap(fmt.Sprintf("import calendar %q", req.GetName()), err)
	}
	return res.Msg.GetCalendar(), int(res.Msg.GetEvents()), nil
}

// ListFireTimes returns the next fire times of a trigger shaped by a calendar
// (see jobkitv1.ListFireTimesRequest), and those without the calendar.
// A zero after means now.
func (a *Admin) ListFireTimes(ctx context.Context, req *jobkitv1.ListFireTimesRequest, after time.Time) (fire, raw []time.Time, err error) {
	c := a.c
	if !after.IsZero() {
		req.After = timestamppb.New(after)
	}
	res, err := c.calendars.ListFireTimes(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, nil, wrap("list fire times", err)
	}
	for _, t := range res.Msg.GetFireTimes() {
		fire = append(fire, t.AsTime())
	}
	for _, t := range res.Msg.GetRawFireTimes() {
		raw = append(raw, t.AsTime())
	}
	return fire, raw, nil
}

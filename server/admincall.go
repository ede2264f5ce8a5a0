package server

import (
	"context"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// adminCall is the frame of the DefinitionService, TriggerService and
// CalendarService handlers, as alertCall is of the AlertService's: it
// runs f on the call's namespace's job.Admin and answers f's message. An
// error f returns is mapped to its code by toConnect (a *connect.Error,
// as invalid and pageSize make, passes as it is).
func adminCall[Res any](ctx context.Context, f func(a *job.Admin) (*Res, error)) (*connect.Response[Res], error) {
	out, err := f(managerOf(ctx).Admin())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(out), nil
}

// required returns an InvalidArgument error saying field is required
// when v is empty: "<field> is required; send <what>".
func required(v, field, what string) error {
	if v == "" {
		return invalid(field + " is required; send " + what)
	}
	return nil
}

// triggerOut returns a function that converts the trigger an Admin call
// returned, with its default next fire times, or passes the call's error
// on: triggerOut(ctx)(a.PauseTrigger(ctx, name)).
func triggerOut(ctx context.Context) func(*store.Trigger, error) (*pb.Trigger, error) {
	return func(t *store.Trigger, err error) (*pb.Trigger, error) {
		if err != nil {
			return nil, err
		}
		return withNext(ctx, t, defaultNextFireTimes)
	}
}

// calendarOut is triggerOut for a calendar, converted with what runs on
// it.
func calendarOut(ctx context.Context) func(*store.Calendar, error) (*pb.Calendar, error) {
	return func(c *store.Calendar, err error) (*pb.Calendar, error) {
		if err != nil {
			return nil, err
		}
		return calendarResponse(ctx, c)
	}
}

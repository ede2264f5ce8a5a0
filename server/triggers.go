package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// Next fire times computed for a trigger that is read.
const (
	defaultNextFireTimes = 5
	maxNextFireTimes     = 100
)

// triggerService implements jobkitv1connect.TriggerServiceHandler on the
// namespace's manager.
type triggerService struct{}

// withNext converts a stored trigger with its next n fire times from now,
// shaped by its calendar (none while paused, nor while its calendar is
// not stored: it fires nothing then).
func withNext(ctx context.Context, t *store.Trigger, n int) (*pb.Trigger, error) {
	var next []time.Time
	if !t.Paused {
		var err error
		next, err = managerOf(ctx).Admin().PreviewFireTimes(ctx, t, time.Now(), n)
		if errors.Is(err, store.ErrNotFound) && t.Calendar != "" {
			next, err = nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return triggerToProto(t, next), nil
}

// CreateTrigger implements TriggerService.CreateTrigger: a taken name is
// AlreadyExists; an invalid cron spec, interval or time zone, or arguments
// that do not fit the kind's executor (when it is registered on this
// server), InvalidArgument.
func (triggerService) CreateTrigger(ctx context.Context, req *connect.Request[pb.CreateTriggerRequest]) (*connect.Response[pb.CreateTriggerResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.CreateTriggerResponse, error) {
		t, err := triggerFromProto(req.Msg.GetTrigger())
		if err != nil {
			return nil, err
		}
		got, err := a.PutTrigger(ctx, t, 0)
		if errors.Is(err, store.ErrConflict) {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("trigger %q exists already (%v); update it with UpdateTrigger, or delete it first", t.Name, err))
		}
		out, err := triggerOut(ctx)(got, err)
		return &pb.CreateTriggerResponse{Trigger: out}, err
	})
}

// GetTrigger implements TriggerService.GetTrigger.
func (triggerService) GetTrigger(ctx context.Context, req *connect.Request[pb.GetTriggerRequest]) (*connect.Response[pb.GetTriggerResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.GetTriggerResponse, error) {
		if err := required(req.Msg.GetName(), "name", "the trigger's name"); err != nil {
			return nil, err
		}
		n, err := fireTimesCount(req.Msg.GetNextFireTimes(), "next_fire_times")
		if err != nil {
			return nil, err
		}
		t, err := a.GetTrigger(ctx, req.Msg.GetName())
		if err != nil {
			return nil, err
		}
		out, err := withNext(ctx, t, n)
		return &pb.GetTriggerResponse{Trigger: out}, err
	})
}

// fireTimesCount reads how many fire times a request asks for (its
// field): 0 for defaultNextFireTimes, at most maxNextFireTimes.
func fireTimesCount(n int32, field string) (int, error) {
	switch {
	case n < 0 || n > maxNextFireTimes:
		return 0, invalid(fmt.Sprintf("%s %d; send 0 (for %d) up to %d", field, n, defaultNextFireTimes, maxNextFireTimes))
	case n == 0:
		return defaultNextFireTimes, nil
	}
	return int(n), nil
}

// ListTriggers implements TriggerService.ListTriggers, in name order; the
// page token is the store's.
func (triggerService) ListTriggers(ctx context.Context, req *connect.Request[pb.ListTriggersRequest]) (*connect.Response[pb.ListTriggersResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.ListTriggersResponse, error) {
		size, err := pageSize(req.Msg.GetPageSize())
		if err != nil {
			return nil, err
		}
		page, err := a.ListTriggers(ctx, req.Msg.GetPageToken(), min(size, store.MaxTriggerPage))
		if err != nil {
			return nil, err
		}
		out := &pb.ListTriggersResponse{NextPageToken: page.Next, Triggers: make([]*pb.Trigger, len(page.Items))}
		for i, t := range page.Items {
			if out.Triggers[i], err = withNext(ctx, t, defaultNextFireTimes); err != nil {
				return nil, err
			}
		}
		return out, nil
	})
}

// UpdateTrigger implements TriggerService.UpdateTrigger: NotFound when
// there is no such trigger, FailedPrecondition when if_version is set and
// no longer holds. The scheduler's own fields (last tick, skips) are kept.
func (triggerService) UpdateTrigger(ctx context.Context, req *connect.Request[pb.UpdateTriggerRequest]) (*connect.Response[pb.UpdateTriggerResponse], error) {
	t, err := triggerFromProto(req.Msg.GetTrigger())
	if err != nil {
		return nil, toConnect(err)
	}
	if req.Msg.GetIfVersion() < 0 {
		return nil, invalid(fmt.Sprintf("if_version %d is negative; send the version read, or 0 to replace whatever is stored", req.Msg.GetIfVersion()))
	}
	m := managerOf(ctx)
	var got *store.Trigger
	for try := 0; ; try++ {
		cur, err := m.Admin().GetTrigger(ctx, t.Name)
		if err != nil {
			return nil, toConnect(notFoundHint(err, "create it with CreateTrigger"))
		}
		version := req.Msg.GetIfVersion()
		if version == 0 {
			version = cur.Version
		}
		t.LastTick, t.LastInstanceID, t.Skipped, t.LastSkipped = cur.LastTick, cur.LastInstanceID, cur.Skipped, cur.LastSkipped
		got, err = m.Admin().PutTrigger(ctx, t, version)
		// At any version, a scheduler recording a tick in between is no
		// reason to fail: read again and retry.
		if errors.Is(err, store.ErrConflict) && req.Msg.GetIfVersion() == 0 && try < maxUpdateTries {
			continue
		}
		if err != nil {
			return nil, toConnect(err)
		}
		break
	}
	out, err := triggerOut(ctx)(got, nil)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.UpdateTriggerResponse{Trigger: out}), nil
}

// DeleteTrigger implements TriggerService.DeleteTrigger.
func (triggerService) DeleteTrigger(ctx context.Context, req *connect.Request[pb.DeleteTriggerRequest]) (*connect.Response[pb.DeleteTriggerResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.DeleteTriggerResponse, error) {
		if err := required(req.Msg.GetName(), "name", "the name of the trigger to delete"); err != nil {
			return nil, err
		}
		return &pb.DeleteTriggerResponse{}, a.DeleteTrigger(ctx, req.Msg.GetName())
	})
}

// PauseTrigger implements TriggerService.PauseTrigger.
func (triggerService) PauseTrigger(ctx context.Context, req *connect.Request[pb.PauseTriggerRequest]) (*connect.Response[pb.PauseTriggerResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.PauseTriggerResponse, error) {
		if err := required(req.Msg.GetName(), "name", "the name of the trigger to pause"); err != nil {
			return nil, err
		}
		out, err := triggerOut(ctx)(a.PauseTrigger(ctx, req.Msg.GetName()))
		return &pb.PauseTriggerResponse{Trigger: out}, err
	})
}

// ResumeTrigger implements TriggerService.ResumeTrigger.
func (triggerService) ResumeTrigger(ctx context.Context, req *connect.Request[pb.ResumeTriggerRequest]) (*connect.Response[pb.ResumeTriggerResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.ResumeTriggerResponse, error) {
		if err := required(req.Msg.GetName(), "name", "the name of the trigger to resume"); err != nil {
			return nil, err
		}
		out, err := triggerOut(ctx)(a.ResumeTrigger(ctx, req.Msg.GetName()))
		return &pb.ResumeTriggerResponse{Trigger: out}, err
	})
}

// RunTrigger implements TriggerService.RunTrigger: one instance of the
// trigger's kind with its arguments, due now, outside its schedule (a
// paused trigger runs too: pausing stops ticks, not this); for a trigger
// of a workflow template, a workflow of it with the trigger's
// parameters, answered with the workflow's end (its ID is the
// workflow's).
func (triggerService) RunTrigger(ctx context.Context, req *connect.Request[pb.RunTriggerRequest]) (*connect.Response[pb.RunTriggerResponse], error) {
	if req.Msg.GetName() == "" {
		return nil, invalid("name is required; send the name of the trigger to run")
	}
	m := managerOf(ctx)
	t, err := m.Admin().GetTrigger(ctx, req.Msg.GetName())
	if err != nil {
		return nil, toConnect(err)
	}
	if t.Workflow != "" {
		return runTriggerTemplate(ctx, m, t)
	}
	args, err := parseArgs(string(t.Args))
	if err != nil {
		return nil, toConnect(err)
	}
	var opts []job.ScheduleOption
	if len(args) > 0 {
		opts = append(opts, job.WithArguments(args...))
	}
	ji, err := m.ScheduleJob(ctx, t.Kind, opts...)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.RunTriggerResponse{Instance: instanceToProto(ji)}), nil
}

// runTriggerTemplate runs the workflow template of the trigger t once,
// now, with its parameters, and answers with the workflow's end.
func runTriggerTemplate(ctx context.Context, m *job.Manager, t *store.Trigger) (*connect.Response[pb.RunTriggerResponse], error) {
	var params map[string]any
	if len(t.Params) > 0 {
		if err := json.Unmarshal(t.Params, &params); err != nil {
			return nil, toConnect(fmt.Errorf("%w: trigger %q: stored parameters are not a JSON object: %v", store.ErrCorrupt, t.Name, err))
		}
	}
	info, err := m.ScheduleWorkflowTemplate(ctx, t.Workflow, params)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.RunTriggerResponse{Instance: instanceToProto(info.End)}), nil
}

package client

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// CreateTrigger stores a new trigger (a cron or interval schedule of a
// kind) and returns it as stored; CodeAlreadyExists when its name is
// taken, CodeInvalidArgument for an invalid cron spec.
func (a *Admin) CreateTrigger(ctx context.Context, t *jobkitv1.Trigger) (*jobkitv1.Trigger, error) {
	c := a.c
	op := fmt.Sprintf("create trigger %q", t.GetName())
	res, err := c.triggers.CreateTrigger(ctx, connect.NewRequest(&jobkitv1.CreateTriggerRequest{Trigger: t}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetTrigger(), nil
}

// GetTrigger returns the trigger named name with its next nextFireTimes fire
// times (0: 5); CodeNotFound when there is none.
func (a *Admin) GetTrigger(ctx context.Context, name string, nextFireTimes int) (*jobkitv1.Trigger, error) {
	c := a.c
	op := fmt.Sprintf("get trigger %q", name)
	res, err := c.triggers.GetTrigger(ctx, connect.NewRequest(&jobkitv1.GetTriggerRequest{Name: name, NextFireTimes: int32(nextFireTimes)}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetTrigger(), nil
}

// ListTriggers returns one page of triggers sorted by name, with the next
// page's token in Next ("" after the last).
func (a *Admin) ListTriggers(ctx context.Context, pageSize int, pageToken string) (*job.Page[*jobkitv1.Trigger], error) {
	c := a.c
	res, err := c.triggers.ListTriggers(ctx, connect.NewRequest(&jobkitv1.ListTriggersRequest{
		PageSize: int32(pageSize), PageToken: pageToken,
	}))
	if err != nil {
		return nil, wrap("list triggers", err)
	}
	return &job.Page[*jobkitv1.Trigger]{Items: res.Msg.GetTriggers(), Next: res.Msg.GetNextPageToken()}, nil
}

// UpdateTrigger replaces a stored trigger's schedule, arguments and
// policies if its version is still ifVersion (0: whatever is stored).
func (a *Admin) UpdateTrigger(ctx context.Context, t *jobkitv1.Trigger, ifVersion int64) (*jobkitv1.Trigger, error) {
	c := a.c
	op := fmt.Sprintf("update trigger %q", t.GetName())
	res, err := c.triggers.UpdateTrigger(ctx, connect.NewRequest(&jobkitv1.UpdateTriggerRequest{Trigger: t, IfVersion: ifVersion}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetTrigger(), nil
}

// DeleteTrigger deletes the trigger named name.
func (a *Admin) DeleteTrigger(ctx context.Context, name string) error {
	c := a.c
	_, err := c.triggers.DeleteTrigger(ctx, connect.NewRequest(&jobkitv1.DeleteTriggerRequest{Name: name}))
	return wrap(fmt.Sprintf("delete trigger %q", name), err)
}

// PauseTrigger stops a trigger's ticks until ResumeTrigger.
func (a *Admin) PauseTrigger(ctx context.Context, name string) (*jobkitv1.Trigger, error) {
	c := a.c
	res, err := c.triggers.PauseTrigger(ctx, connect.NewRequest(&jobkitv1.PauseTriggerRequest{Name: name}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("pause trigger %q", name), err)
	}
	return res.Msg.GetTrigger(), nil
}

// ResumeTrigger starts a paused trigger's ticks again.
func (a *Admin) ResumeTrigger(ctx context.Context, name string) (*jobkitv1.Trigger, error) {
	c := a.c
	res, err := c.triggers.ResumeTrigger(ctx, connect.NewRequest(&jobkitv1.ResumeTriggerRequest{Name: name}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("resume trigger %q", name), err)
	}
	return res.Msg.GetTrigger(), nil
}

// RunTrigger schedules one instance of the trigger's kind and arguments
// now, outside its schedule, and returns it.
func (a *Admin) RunTrigger(ctx context.Context, name string) (*Instance, error) {
	c := a.c
	res, err := c.triggers.RunTrigger(ctx, connect.NewRequest(&jobkitv1.RunTriggerRequest{Name: name}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("run trigger %q", name), err)
	}
	return newInstance(res.Msg.GetInstance()), nil
}

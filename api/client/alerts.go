package client

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// CreateAlertRule stores a new alert rule (issue 23); CodeNotFound naming
// a kind, queue, trigger or channel it references that does not exist,
// CodeInvalidArgument for a bad threshold, CodeAlreadyExists for a taken
// name.
func (a *Admin) CreateAlertRule(ctx context.Context, r *jobkitv1.AlertRule) (*jobkitv1.AlertRule, error) {
	c := a.c
	res, err := c.alerts.CreateRule(ctx, connect.NewRequest(&jobkitv1.CreateRuleRequest{Rule: r}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("create alert rule %q", r.GetName()), err)
	}
	return res.Msg.GetRule(), nil
}

// UpdateAlertRule replaces an alert rule if its stored version is
// ifVersion (0: any).
func (a *Admin) UpdateAlertRule(ctx context.Context, r *jobkitv1.AlertRule, ifVersion int64) (*jobkitv1.AlertRule, error) {
	c := a.c
	res, err := c.alerts.UpdateRule(ctx, connect.NewRequest(&jobkitv1.UpdateRuleRequest{Rule: r, IfVersion: ifVersion}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("update alert rule %q", r.GetName()), err)
	}
	return res.Msg.GetRule(), nil
}

// GetAlertRule returns the alert rule named name.
func (a *Admin) GetAlertRule(ctx context.Context, name string) (*jobkitv1.AlertRule, error) {
	c := a.c
	res, err := c.alerts.GetRule(ctx, connect.NewRequest(&jobkitv1.GetRuleRequest{Name: name}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("get alert rule %q", name), err)
	}
	return res.Msg.GetRule(), nil
}

// ListAlertRules lists every alert rule.
func (a *Admin) ListAlertRules(ctx context.Context) ([]*jobkitv1.AlertRule, error) {
	c := a.c
	res, err := c.alerts.ListRules(ctx, connect.NewRequest(&jobkitv1.ListRulesRequest{}))
	if err != nil {
		return nil, wrap("list alert rules", err)
	}
	return res.Msg.GetRules(), nil
}

// DeleteAlertRule removes an alert rule; its open incidents resolve.
func (a *Admin) DeleteAlertRule(ctx context.Context, name string) error {
	c := a.c
	_, err := c.alerts.DeleteRule(ctx, connect.NewRequest(&jobkitv1.DeleteRuleRequest{Name: name}))
	return wrap(fmt.Sprintf("delete alert rule %q", name), err)
}

// CreateSilence mutes a rule, or every rule about a kind, until its end.
func (a *Admin) CreateSilence(ctx context.Context, s *jobkitv1.Silence) (*jobkitv1.Silence, error) {
	c := a.c
	res, err := c.alerts.CreateSilence(ctx, connect.NewRequest(&jobkitv1.CreateSilenceRequest{Silence: s}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("create silence %q", s.GetName()), err)
	}
	return res.Msg.GetSilence(), nil
}

// ListSilences lists the stored silences.
func (a *Admin) ListSilences(ctx context.Context) ([]*jobkitv1.Silence, error) {
	c := a.c
	res, err := c.alerts.ListSilences(ctx, connect.NewRequest(&jobkitv1.ListSilencesRequest{}))
	if err != nil {
		return nil, wrap("list silences", err)
	}
	return res.Msg.GetSilences(), nil
}

// DeleteSilence removes a silence.
func (a *Admin) DeleteSilence(ctx context.Context, name string) error {
	c := a.c
	_, err := c.alerts.DeleteSilence(ctx, connect.NewRequest(&jobkitv1.DeleteSilenceRequest{Name: name}))
	return wrap(fmt.Sprintf("delete silence %q", name), err)
}

// ListIncidents lists the incidents in state ("open", "resolved", or "" for
// both), most recently opened first.
func (a *Admin) ListIncidents(ctx context.Context, state string) ([]*jobkitv1.Incident, error) {
	c := a.c
	res, err := c.alerts.ListIncidents(ctx, connect.NewRequest(&jobkitv1.ListIncidentsRequest{State: state}))
	if err != nil {
		return nil, wrap("list incidents", err)
	}
	return res.Msg.GetIncidents(), nil
}

// GetIncident returns an incident with its notifications, newest first.
func (a *Admin) GetIncident(ctx context.Context, id string) (*jobkitv1.GetIncidentResponse, error) {
	c := a.c
	res, err := c.alerts.GetIncident(ctx, connect.NewRequest(&jobkitv1.GetIncidentRequest{Id: id}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("get incident %q", id), err)
	}
	return res.Msg, nil
}

// CreateChannel stores a notification channel.
func (a *Admin) CreateChannel(ctx context.Context, ch *jobkitv1.Channel) (*jobkitv1.Channel, error) {
	c := a.c
	res, err := c.alerts.CreateChannel(ctx, connect.NewRequest(&jobkitv1.CreateChannelRequest{Channel: ch}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("create channel %q", ch.GetName()), err)
	}
	return res.Msg.GetChannel(), nil
}

// UpdateChannel replaces a channel if its stored version is ifVersion (0:
// any).
func (a *Admin) UpdateChannel(ctx context.Context, ch *jobkitv1.Channel, ifVersion int64) (*jobkitv1.Channel, error) {
	c := a.c
	res, err := c.alerts.UpdateChannel(ctx, connect.NewRequest(&jobkitv1.UpdateChannelRequest{Channel: ch, IfVersion: ifVersion}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("update channel %q", ch.GetName()), err)
	}
	return res.Msg.GetChannel(), nil
}

// GetChannel returns a channel with its delivery status.
func (a *Admin) GetChannel(ctx context.Context, name string) (*jobkitv1.Channel, error) {
	c := a.c
	res, err := c.alerts.GetChannel(ctx, connect.NewRequest(&jobkitv1.GetChannelRequest{Name: name}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("get channel %q", name), err)
	}
	return res.Msg.GetChannel(), nil
}

// ListChannels lists the channels with their delivery status.
func (a *Admin) ListChannels(ctx context.Context) ([]*jobkitv1.Channel, error) {
	c := a.c
	res, err := c.alerts.ListChannels(ctx, connect.NewRequest(&jobkitv1.ListChannelsRequest{}))
	if err != nil {
		return nil, wrap("list channels", err)
	}
	return res.Msg.GetChannels(), nil
}

// DeleteChannel removes a channel no rule names.
func (a *Admin) DeleteChannel(ctx context.Context, name string) error {
	c := a.c
	_, err := c.alerts.DeleteChannel(ctx, connect.NewRequest(&jobkitv1.DeleteChannelRequest{Name: name}))
	return wrap(fmt.Sprintf("delete channel %q", name), err)
}

// TestChannel sends a test notification through a channel now;
// CodeUnavailable with the channel's answer when it refused.
func (a *Admin) TestChannel(ctx context.Context, name string) (*jobkitv1.Notification, error) {
	c := a.c
	res, err := c.alerts.TestChannel(ctx, connect.NewRequest(&jobkitv1.TestChannelRequest{Name: name}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("test channel %q", name), err)
	}
	return res.Msg.GetNotification(), nil
}

// ListNotifications returns a page of the notification history, newest first
// (pageSize 0: 100), of one incident when incident is set, with the next
// page's token in Next ("" after the last).
func (a *Admin) ListNotifications(ctx context.Context, pageSize int, pageToken, incident string) (*job.Page[*jobkitv1.Notification], error) {
	res, err := a.c.alerts.ListNotifications(ctx, connect.NewRequest(&jobkitv1.ListNotificationsRequest{
		PageSize: int32(pageSize), PageToken: pageToken, Incident: incident,
	}))
	if err != nil {
		return nil, wrap("list notifications", err)
	}
	return &job.Page[*jobkitv1.Notification]{Items: res.Msg.GetNotifications(), Next: res.Msg.GetNextPageToken()}, nil
}

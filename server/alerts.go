package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"connectrpc.com/connect"

	"github.com/jobkit/job/alert"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/store"
)

// alertProcedureRoles is the least role each AlertService procedure needs
// (issue 23): viewers read; operators silence and send test
// notifications; admins write rules and channels.
var alertProcedureRoles = map[string]Role{
	jobkitv1connect.AlertServiceCreateRuleProcedure:        RoleAdmin,
	jobkitv1connect.AlertServiceGetRuleProcedure:           RoleViewer,
	jobkitv1connect.AlertServiceListRulesProcedure:         RoleViewer,
	jobkitv1connect.AlertServiceUpdateRuleProcedure:        RoleAdmin,
	jobkitv1connect.AlertServiceDeleteRuleProcedure:        RoleAdmin,
	jobkitv1connect.AlertServiceCreateSilenceProcedure:     RoleOperator,
	jobkitv1connect.AlertServiceListSilencesProcedure:      RoleViewer,
	jobkitv1connect.AlertServiceDeleteSilenceProcedure:     RoleOperator,
	jobkitv1connect.AlertServiceListIncidentsProcedure:     RoleViewer,
	jobkitv1connect.AlertServiceGetIncidentProcedure:       RoleViewer,
	jobkitv1connect.AlertServiceCreateChannelProcedure:     RoleAdmin,
	jobkitv1connect.AlertServiceGetChannelProcedure:        RoleViewer,
	jobkitv1connect.AlertServiceListChannelsProcedure:      RoleViewer,
	jobkitv1connect.AlertServiceUpdateChannelProcedure:     RoleAdmin,
	jobkitv1connect.AlertServiceDeleteChannelProcedure:     RoleAdmin,
	jobkitv1connect.AlertServiceTestChannelProcedure:       RoleOperator,
	jobkitv1connect.AlertServiceListNotificationsProcedure: RoleViewer,
}

func init() { maps.Copy(procedureRoles, alertProcedureRoles) }

// alertService implements jobkitv1connect.AlertServiceHandler on the
// namespace's alert.Service (Config.Alerts).
type alertService struct{ s *Server }

// alerts returns the call's namespace's alerting, or FailedPrecondition
// when the server runs none for it.
func (a alertService) alerts(ctx context.Context) (*alert.Service, error) {
	m := managerOf(ctx)
	for ns, mm := range a.s.cfg.Namespaces {
		if mm == m {
			if svc := a.s.cfg.Alerts[ns]; svc != nil {
				return svc, nil
			}
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("alerting is off for namespace %q on this server; start jobd with alerting (--alerts, the default)", ns))
		}
	}
	return nil, connect.NewError(connect.CodeInternal, errors.New("no namespace for the call's manager"))
}

// alertErr maps alerting's sentinels to codes, then the store's.
func alertErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, alert.ErrUnknown):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, alert.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, alert.ErrInUse):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, alert.ErrDelivery):
		return connect.NewError(connect.CodeUnavailable, err)
	}
	return toConnect(err)
}

// putErr names what a create or update conflict means.
func putErr(what, name string, create bool, err error) error {
	if errors.Is(err, store.ErrConflict) {
		if create {
			return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s %q exists already; update it, or delete it first", what, name))
		}
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s %q changed since version read; read it again and retry (%v)", what, name, err))
	}
	return alertErr(err)
}

func ifVersion(v int64) int64 {
	if v == 0 {
		return store.AnyVersion
	}
	return v
}

// alertCall is the frame of every AlertService handler: it runs f on the
// call's namespace's alert.Service (alerts) and answers f's message. An
// error f returns is mapped to its code by alertErr unless f mapped it
// already (a *connect.Error, as putErr and invalid make).
func alertCall[Res any](ctx context.Context, a alertService, f func(svc *alert.Service) (*Res, error)) (*connect.Response[Res], error) {
	svc, err := a.alerts(ctx)
	if err != nil {
		return nil, err
	}
	out, err := f(svc)
	if err != nil {
		if ce := new(connect.Error); !errors.As(err, &ce) {
			err = alertErr(err)
		}
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// protos converts each of list with to.
func protos[T, P any](list []T, to func(T) P) []P {
	var out []P
	for _, x := range list {
		out = append(out, to(x))
	}
	return out
}

// CreateRule implements AlertService.CreateRule.
func (a alertService) CreateRule(ctx context.Context, req *connect.Request[pb.CreateRuleRequest]) (*connect.Response[pb.CreateRuleResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.CreateRuleResponse, error) {
		r, err := ruleFromProto(req.Msg.GetRule())
		if err != nil {
			return nil, err
		}
		got, err := svc.PutRule(ctx, r, 0)
		if err != nil {
			return nil, putErr("rule", r.Name, true, err)
		}
		return &pb.CreateRuleResponse{Rule: ruleToProto(got)}, nil
	})
}

// UpdateRule implements AlertService.UpdateRule.
func (a alertService) UpdateRule(ctx context.Context, req *connect.Request[pb.UpdateRuleRequest]) (*connect.Response[pb.UpdateRuleResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.UpdateRuleResponse, error) {
		r, err := ruleFromProto(req.Msg.GetRule())
		if err != nil {
			return nil, err
		}
		if _, err := svc.GetRule(ctx, r.Name); err != nil {
			return nil, err
		}
		got, err := svc.PutRule(ctx, r, ifVersion(req.Msg.GetIfVersion()))
		if err != nil {
			return nil, putErr("rule", r.Name, false, err)
		}
		return &pb.UpdateRuleResponse{Rule: ruleToProto(got)}, nil
	})
}

// GetRule implements AlertService.GetRule.
func (a alertService) GetRule(ctx context.Context, req *connect.Request[pb.GetRuleRequest]) (*connect.Response[pb.GetRuleResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.GetRuleResponse, error) {
		r, err := svc.GetRule(ctx, req.Msg.GetName())
		if err != nil {
			return nil, err
		}
		return &pb.GetRuleResponse{Rule: ruleToProto(r)}, nil
	})
}

// ListRules implements AlertService.ListRules.
func (a alertService) ListRules(ctx context.Context, _ *connect.Request[pb.ListRulesRequest]) (*connect.Response[pb.ListRulesResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.ListRulesResponse, error) {
		rules, err := svc.ListRules(ctx)
		if err != nil {
			return nil, err
		}
		return &pb.ListRulesResponse{Rules: protos(rules, ruleToProto)}, nil
	})
}

// DeleteRule implements AlertService.DeleteRule.
func (a alertService) DeleteRule(ctx context.Context, req *connect.Request[pb.DeleteRuleRequest]) (*connect.Response[pb.DeleteRuleResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.DeleteRuleResponse, error) {
		return &pb.DeleteRuleResponse{}, svc.DeleteRule(ctx, req.Msg.GetName(), 0)
	})
}

// CreateSilence implements AlertService.CreateSilence.
func (a alertService) CreateSilence(ctx context.Context, req *connect.Request[pb.CreateSilenceRequest]) (*connect.Response[pb.CreateSilenceResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.CreateSilenceResponse, error) {
		in := req.Msg.GetSilence()
		end, err := fromTS("silence.end", in.GetEnd())
		if err != nil {
			return nil, err
		}
		sl := &alert.Silence{Name: in.GetName(), Rule: in.GetRule(), Kind: in.GetKind(), End: end, Comment: in.GetComment()}
		got, err := svc.PutSilence(ctx, sl, 0)
		if err != nil {
			return nil, putErr("silence", sl.Name, true, err)
		}
		return &pb.CreateSilenceResponse{Silence: silenceToProto(got)}, nil
	})
}

// ListSilences implements AlertService.ListSilences.
func (a alertService) ListSilences(ctx context.Context, _ *connect.Request[pb.ListSilencesRequest]) (*connect.Response[pb.ListSilencesResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.ListSilencesResponse, error) {
		list, err := svc.ListSilences(ctx)
		if err != nil {
			return nil, err
		}
		return &pb.ListSilencesResponse{Silences: protos(list, silenceToProto)}, nil
	})
}

// DeleteSilence implements AlertService.DeleteSilence.
func (a alertService) DeleteSilence(ctx context.Context, req *connect.Request[pb.DeleteSilenceRequest]) (*connect.Response[pb.DeleteSilenceResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.DeleteSilenceResponse, error) {
		return &pb.DeleteSilenceResponse{}, svc.DeleteSilence(ctx, req.Msg.GetName(), 0)
	})
}

// ListIncidents implements AlertService.ListIncidents.
func (a alertService) ListIncidents(ctx context.Context, req *connect.Request[pb.ListIncidentsRequest]) (*connect.Response[pb.ListIncidentsResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.ListIncidentsResponse, error) {
		state := alert.IncidentState(req.Msg.GetState())
		if state != "" && state != alert.Open && state != alert.Resolved {
			return nil, invalid(fmt.Sprintf("state %q; give open, resolved, or nothing for both", state))
		}
		list, err := svc.ListIncidents(ctx, state)
		if err != nil {
			return nil, err
		}
		return &pb.ListIncidentsResponse{Incidents: protos(list, incidentToProto)}, nil
	})
}

// GetIncident implements AlertService.GetIncident.
func (a alertService) GetIncident(ctx context.Context, req *connect.Request[pb.GetIncidentRequest]) (*connect.Response[pb.GetIncidentResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.GetIncidentResponse, error) {
		in, err := svc.GetIncident(ctx, req.Msg.GetId())
		if err != nil {
			return nil, err
		}
		page, err := svc.ListNotifications(ctx, "", 0, in.ID)
		if err != nil {
			return nil, err
		}
		return &pb.GetIncidentResponse{Incident: incidentToProto(in), Notifications: protos(page.Notifications, notificationToProto)}, nil
	})
}

// CreateChannel implements AlertService.CreateChannel.
func (a alertService) CreateChannel(ctx context.Context, req *connect.Request[pb.CreateChannelRequest]) (*connect.Response[pb.CreateChannelResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.CreateChannelResponse, error) {
		c := channelFromProto(req.Msg.GetChannel())
		got, err := svc.PutChannel(ctx, c, 0)
		if err != nil {
			return nil, putErr("channel", c.Name, true, err)
		}
		return &pb.CreateChannelResponse{Channel: channelToProto(got, nil)}, nil
	})
}

// UpdateChannel implements AlertService.UpdateChannel.
func (a alertService) UpdateChannel(ctx context.Context, req *connect.Request[pb.UpdateChannelRequest]) (*connect.Response[pb.UpdateChannelResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.UpdateChannelResponse, error) {
		c := channelFromProto(req.Msg.GetChannel())
		if _, err := svc.GetChannel(ctx, c.Name); err != nil {
			return nil, err
		}
		got, err := svc.PutChannel(ctx, c, ifVersion(req.Msg.GetIfVersion()))
		if err != nil {
			return nil, putErr("channel", c.Name, false, err)
		}
		return &pb.UpdateChannelResponse{Channel: channelToProto(got, nil)}, nil
	})
}

// GetChannel implements AlertService.GetChannel, with the channel's
// delivery status.
func (a alertService) GetChannel(ctx context.Context, req *connect.Request[pb.GetChannelRequest]) (*connect.Response[pb.GetChannelResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.GetChannelResponse, error) {
		c, err := svc.GetChannel(ctx, req.Msg.GetName())
		if err != nil {
			return nil, err
		}
		st, err := svc.ChannelStatus(ctx, c.Name)
		if err != nil {
			return nil, err
		}
		return &pb.GetChannelResponse{Channel: channelToProto(c, st)}, nil
	})
}

// ListChannels implements AlertService.ListChannels, with each channel's
// delivery status.
func (a alertService) ListChannels(ctx context.Context, _ *connect.Request[pb.ListChannelsRequest]) (*connect.Response[pb.ListChannelsResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.ListChannelsResponse, error) {
		list, err := svc.ListChannels(ctx)
		if err != nil {
			return nil, err
		}
		out := &pb.ListChannelsResponse{}
		for _, c := range list {
			st, err := svc.ChannelStatus(ctx, c.Name)
			if err != nil {
				return nil, err
			}
			out.Channels = append(out.Channels, channelToProto(c, st))
		}
		return out, nil
	})
}

// DeleteChannel implements AlertService.DeleteChannel.
func (a alertService) DeleteChannel(ctx context.Context, req *connect.Request[pb.DeleteChannelRequest]) (*connect.Response[pb.DeleteChannelResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.DeleteChannelResponse, error) {
		return &pb.DeleteChannelResponse{}, svc.DeleteChannel(ctx, req.Msg.GetName(), 0)
	})
}

// TestChannel implements AlertService.TestChannel.
func (a alertService) TestChannel(ctx context.Context, req *connect.Request[pb.TestChannelRequest]) (*connect.Response[pb.TestChannelResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.TestChannelResponse, error) {
		if _, err := svc.TestChannel(ctx, req.Msg.GetName()); err != nil {
			return nil, err
		}
		page, err := svc.ListNotifications(ctx, "", 1, "")
		out := &pb.TestChannelResponse{}
		if err == nil && len(page.Notifications) > 0 {
			out.Notification = notificationToProto(page.Notifications[0])
		}
		return out, nil
	})
}

// ListNotifications implements AlertService.ListNotifications.
func (a alertService) ListNotifications(ctx context.Context, req *connect.Request[pb.ListNotificationsRequest]) (*connect.Response[pb.ListNotificationsResponse], error) {
	return alertCall(ctx, a, func(svc *alert.Service) (*pb.ListNotificationsResponse, error) {
		size := int(req.Msg.GetPageSize())
		if size < 0 || size > 1000 {
			return nil, invalid(fmt.Sprintf("page_size %d; give 1 to 1000, or 0 for 100", size))
		}
		page, err := svc.ListNotifications(ctx, req.Msg.GetPageToken(), size, req.Msg.GetIncident())
		if err != nil {
			return nil, err
		}
		return &pb.ListNotificationsResponse{NextPageToken: page.Next, Notifications: protos(page.Notifications, notificationToProto)}, nil
	})
}

func ruleFromProto(p *pb.AlertRule) (*alert.Rule, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no rule in the request", alert.ErrInvalid)
	}
	r := &alert.Rule{
		Name: p.GetName(), Condition: alert.Condition(p.GetCondition()), Kind: p.GetKind(), Trigger: p.GetTrigger(),
		Queue: p.GetQueue(), Failures: int(p.GetFailures()), Channels: p.GetChannels(), Disabled: p.GetDisabled(),
		Description: p.GetDescription(),
	}
	// Durations are taken as sent, negative ones too: Rule.Validate says
	// which field is wrong and why.
	for _, f := range []struct {
		to  *time.Duration
		got interface{ AsDuration() time.Duration }
		set bool
	}{
		{&r.Threshold, p.GetThreshold(), p.GetThreshold() != nil},
		{&r.For, p.GetFor(), p.GetFor() != nil},
		{&r.RepeatEvery, p.GetRepeatEvery(), p.GetRepeatEvery() != nil},
	} {
		if f.set {
			*f.to = f.got.AsDuration()
		}
	}
	return r, nil
}

func ruleToProto(r *alert.Rule) *pb.AlertRule {
	return &pb.AlertRule{
		Name: r.Name, Condition: string(r.Condition), Kind: r.Kind, Trigger: r.Trigger, Queue: r.Queue,
		Failures: int32(r.Failures), Threshold: dur(r.Threshold), For: dur(r.For), RepeatEvery: dur(r.RepeatEvery),
		Channels: r.Channels, Disabled: r.Disabled, Description: r.Description, Version: r.Version,
		CreatedAt: ts(r.CreatedAt), UpdatedAt: ts(r.UpdatedAt),
	}
}

func silenceToProto(s *alert.Silence) *pb.Silence {
	return &pb.Silence{Name: s.Name, Rule: s.Rule, Kind: s.Kind, End: ts(s.End), Comment: s.Comment, Version: s.Version, CreatedAt: ts(s.CreatedAt)}
}

func subjectToProto(s alert.Subject) *pb.AlertSubject {
	return &pb.AlertSubject{Kind: s.Kind, Queue: s.Queue, Trigger: s.Trigger, InstanceId: s.InstanceID, Attempt: int32(s.Attempt), Error: s.Error, Detail: s.Detail}
}

func incidentToProto(in *alert.Incident) *pb.Incident {
	return &pb.Incident{
		Id: in.ID, Rule: in.Rule, Condition: string(in.Condition), State: string(in.State), Subject: subjectToProto(in.Subject),
		OpenedAt: ts(in.OpenedAt), ResolvedAt: ts(in.ResolvedAt), NotifiedAt: ts(in.NotifiedAt),
		LastEvent: string(in.LastEvent), Notifications: int32(in.Seq),
	}
}

func notificationToProto(n *alert.Notification) *pb.Notification {
	return &pb.Notification{
		Id: n.ID, Incident: n.Incident, Rule: n.Rule, Condition: string(n.Condition), Event: string(n.Event), Channel: n.Channel,
		Subject: subjectToProto(n.Subject), At: ts(n.At), Status: string(n.Status), Silence: n.Silence,
		Attempts: int32(n.Attempts), LastError: n.LastError, DeliveredAt: ts(n.DeliveredAt),
	}
}

func channelFromProto(p *pb.Channel) *alert.Channel {
	return &alert.Channel{
		Name: p.GetName(), Type: alert.ChannelType(p.GetType()), URL: p.GetUrl(), SecretRef: p.GetSecretRef(),
		SMTPAddr: p.GetSmtpAddr(), From: p.GetFrom(), To: p.GetTo(), Username: p.GetUsername(),
		PasswordRef: p.GetPasswordRef(), CAFile: p.GetCaFile(),
	}
}

func channelToProto(c *alert.Channel, st *alert.ChannelStatus) *pb.Channel {
	out := &pb.Channel{
		Name: c.Name, Type: string(c.Type), Url: c.URL, SecretRef: c.SecretRef, SmtpAddr: c.SMTPAddr, From: c.From,
		To: c.To, Username: c.Username, PasswordRef: c.PasswordRef, CaFile: c.CAFile, Version: c.Version,
	}
	if st != nil {
		out.Status = &pb.ChannelStatus{
			ConsecutiveFailures: int32(st.ConsecutiveFailures), LastError: st.LastError, LastErrorAt: ts(st.LastErrorAt),
			LastSuccessAt: ts(st.LastSuccessAt), Delivered: st.Delivered, Failed: st.Failed,
		}
	}
	return out
}

package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

func init() {
	// dict builds the map a shared template of the alert pages takes.
	funcs["dict"] = func(kv ...any) map[string]any {
		m := make(map[string]any, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
}

// alertRoutes registers the alert pages (issue 23): one page with the
// incidents, rules, silences, channels and the latest notifications, an
// incident's page, and the forms' actions.
func (c *Console) alertRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /alerts", c.alertsPage)
	m.HandleFunc("GET /alerts/incidents/{id}", c.incidentPage)
	m.HandleFunc("POST /alerts/rules", c.createRule)
	m.HandleFunc("POST /alerts/silences", c.createSilence)
	m.HandleFunc("POST /alerts/channels", c.createChannel)
	m.HandleFunc("POST /alerts/{what}/{name}/{action}", c.alertAction)
}

// alertsPage shows open incidents first, then the rules, silences,
// channels (with how their deliveries go) and the latest notifications.
func (c *Console) alertsPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	ctx, a := r.Context(), s.api.alerts
	inc, err := a.ListIncidents(ctx, connect.NewRequest(&pb.ListIncidentsRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	rules, err := a.ListRules(ctx, connect.NewRequest(&pb.ListRulesRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	sil, err := a.ListSilences(ctx, connect.NewRequest(&pb.ListSilencesRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	chans, err := a.ListChannels(ctx, connect.NewRequest(&pb.ListChannelsRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	hist, err := a.ListNotifications(ctx, connect.NewRequest(&pb.ListNotificationsRequest{PageSize: 50, PageToken: r.URL.Query().Get("page")}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	var open, resolved []*pb.Incident
	for _, in := range inc.Msg.GetIncidents() {
		if in.GetState() == "open" {
			open = append(open, in)
		} else {
			resolved = append(resolved, in)
		}
	}
	var names []string
	for _, ch := range chans.Msg.GetChannels() {
		names = append(names, ch.GetName())
	}
	c.render(w, r, s, "alerts", http.StatusOK, map[string]any{
		"Open": open, "Resolved": resolved, "Rules": rules.Msg.GetRules(), "Silences": sil.Msg.GetSilences(),
		"Channels": chans.Msg.GetChannels(), "ChannelNames": names, "Notifications": hist.Msg.GetNotifications(),
		"Next": hist.Msg.GetNextPageToken(),
	})
}

// incidentPage shows one incident and its notifications.
func (c *Console) incidentPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	res, err := s.api.alerts.GetIncident(r.Context(), connect.NewRequest(&pb.GetIncidentRequest{Id: r.PathValue("id")}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, s, "incident", http.StatusOK, map[string]any{"Incident": res.Msg.GetIncident(), "Notifications": res.Msg.GetNotifications()})
}

// formDur reads an optional duration field, negative ones too (the
// server says what is wrong with them).
func formDur(r *http.Request, field string) (*durationpb.Duration, error) {
	v := strings.TrimSpace(r.PostFormValue(field))
	if v == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s %q is not a duration such as 90s or 5m", field, v))
	}
	return durationpb.New(d), nil
}

// createRule stores the rule of the form (admin).
func (c *Console) createRule(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	rule := &pb.AlertRule{Name: strings.TrimSpace(r.PostFormValue("name")), Condition: r.PostFormValue("condition"), Channels: r.PostForm["channel"]}
	switch scope, val := r.PostFormValue("scope"), strings.TrimSpace(r.PostFormValue("scope_name")); scope {
	case "kind":
		rule.Kind = val
	case "trigger":
		rule.Trigger = val
	case "queue":
		rule.Queue = val
	}
	if f := strings.TrimSpace(r.PostFormValue("failures")); f != "" {
		n, err := strconv.Atoi(f)
		if err != nil {
			c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("failures %q is not a whole number", f)))
			return
		}
		rule.Failures = int32(n)
	}
	var err error
	for _, f := range []struct {
		name string
		to   **durationpb.Duration
	}{{"threshold", &rule.Threshold}, {"for", &rule.For}, {"repeat_every", &rule.RepeatEvery}} {
		if *f.to, err = formDur(r, f.name); err != nil {
			c.fail(w, r, s, err)
			return
		}
	}
	if _, err := s.api.alerts.CreateRule(r.Context(), connect.NewRequest(&pb.CreateRuleRequest{Rule: rule})); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.back(w, r, "/alerts", "Alert rule "+rule.Name+" created.")
}

// createSilence stores the silence of the form (operator).
func (c *Console) createSilence(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	d, err := formDur(r, "for")
	if err != nil || d == nil || d.AsDuration() <= 0 {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("give how long the silence lasts, such as 2h")))
		return
	}
	sl := &pb.Silence{Name: strings.TrimSpace(r.PostFormValue("name")), Comment: r.PostFormValue("comment"), End: timestamppb.New(time.Now().Add(d.AsDuration()))}
	if r.PostFormValue("what") == "kind" {
		sl.Kind = strings.TrimSpace(r.PostFormValue("target"))
	} else {
		sl.Rule = strings.TrimSpace(r.PostFormValue("target"))
	}
	if _, err := s.api.alerts.CreateSilence(r.Context(), connect.NewRequest(&pb.CreateSilenceRequest{Silence: sl})); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.back(w, r, "/alerts", "Silence "+sl.Name+" until "+sl.End.AsTime().UTC().Format("2006-01-02 15:04 UTC")+".")
}

// createChannel stores the channel of the form (admin).
func (c *Console) createChannel(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	f := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	ch := &pb.Channel{
		Name: f("name"), Type: f("type"), Url: f("url"), SecretRef: f("secret_ref"), SmtpAddr: f("smtp_addr"),
		From: f("from"), Username: f("username"), PasswordRef: f("password_ref"), CaFile: f("ca_file"),
	}
	for to := range strings.SplitSeq(f("to"), ",") {
		if to = strings.TrimSpace(to); to != "" {
			ch.To = append(ch.To, to)
		}
	}
	if _, err := s.api.alerts.CreateChannel(r.Context(), connect.NewRequest(&pb.CreateChannelRequest{Channel: ch})); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.back(w, r, "/alerts", "Channel "+ch.Name+" created.")
}

// alertAction deletes a rule, a silence or a channel, or sends a test
// notification through a channel.
func (c *Console) alertAction(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	ctx, a, name := r.Context(), s.api.alerts, r.PathValue("name")
	var err error
	msg := ""
	switch r.PathValue("what") + "/" + r.PathValue("action") {
	case "rules/delete":
		_, err = a.DeleteRule(ctx, connect.NewRequest(&pb.DeleteRuleRequest{Name: name}))
		msg = "Alert rule " + name + " deleted."
	case "silences/delete":
		_, err = a.DeleteSilence(ctx, connect.NewRequest(&pb.DeleteSilenceRequest{Name: name}))
		msg = "Silence " + name + " ended."
	case "channels/delete":
		_, err = a.DeleteChannel(ctx, connect.NewRequest(&pb.DeleteChannelRequest{Name: name}))
		msg = "Channel " + name + " deleted."
	case "channels/test":
		_, err = a.TestChannel(ctx, connect.NewRequest(&pb.TestChannelRequest{Name: name}))
		if err != nil && connect.CodeOf(err) == connect.CodeUnavailable {
			// The channel refused: say so on the page, where its status
			// now shows it failing.
			c.back(w, r, "/alerts", "Test notification through "+name+" failed: "+apiMessage(err))
			return
		}
		msg = "Test notification delivered through " + name + "."
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.back(w, r, "/alerts", msg)
}

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// newAlertCmd is "jobctl alert ...": rules, silences, incidents, channels
// and the notification history (issue 23).
func newAlertCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "alert", Short: "Alert rules, silences, incidents, channels and the notification history"}
	cmd.AddCommand(newAlertRulesCmd(g), newSilencesCmd(g), newIncidentsCmd(g), newChannelsCmd(g), newAlertHistoryCmd(g))
	return cmd
}

type ruleFlags struct {
	condition, kind, trigger, queue, description string
	failures                                     int
	threshold, forDur, repeat                    time.Duration
	channels                                     []string
	disabled                                     bool
	ifVersion                                    int64
}

func (f *ruleFlags) add(cmd *cobra.Command, update bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.condition, "condition", "", "what to watch: failed, long_run, missed_tick, queue_lag or no_node")
	fl.StringVar(&f.kind, "kind", "", "attach to this kind")
	fl.StringVar(&f.trigger, "trigger", "", "attach to this stored trigger")
	fl.StringVar(&f.queue, "queue", "", "attach to this queue (none of --kind, --trigger, --queue: the whole namespace)")
	fl.IntVar(&f.failures, "failures", 0, "failed: open only after this many failures in a row")
	fl.DurationVar(&f.threshold, "threshold", 0, "long_run: the run time; queue_lag: the lag")
	fl.DurationVar(&f.forDur, "for", 0, "queue_lag: how long the lag stays above the threshold first")
	fl.DurationVar(&f.repeat, "repeat-every", 0, "repeat the notification at most this often while the incident is open")
	fl.StringSliceVar(&f.channels, "channel", nil, "channel to notify, repeatable")
	fl.BoolVar(&f.disabled, "disabled", false, "store it without evaluating it")
	fl.StringVar(&f.description, "description", "", "free text shown with the rule")
	cmd.MarkFlagsMutuallyExclusive("kind", "trigger", "queue")
	_ = cmd.RegisterFlagCompletionFunc("condition", fixedCompletion("failed", "long_run", "missed_tick", "queue_lag", "no_node"))
	if update {
		fl.Int64Var(&f.ifVersion, "if-version", 0, "replace only if the stored version is this (default: the version read just before)")
	}
}

func (f *ruleFlags) apply(cmd *cobra.Command, r *jobkitv1.AlertRule) {
	fl := cmd.Flags()
	set := func(name string, do func()) {
		if fl.Changed(name) {
			do()
		}
	}
	set("condition", func() { r.Condition = f.condition })
	set("kind", func() { r.Kind, r.Trigger, r.Queue = f.kind, "", "" })
	set("trigger", func() { r.Trigger, r.Kind, r.Queue = f.trigger, "", "" })
	set("queue", func() { r.Queue, r.Kind, r.Trigger = f.queue, "", "" })
	set("failures", func() { r.Failures = int32(f.failures) })
	set("threshold", func() { r.Threshold = durationpb.New(f.threshold) })
	set("for", func() { r.For = durationpb.New(f.forDur) })
	set("repeat-every", func() { r.RepeatEvery = durationpb.New(f.repeat) })
	set("channel", func() { r.Channels = f.channels })
	set("disabled", func() { r.Disabled = f.disabled })
	set("description", func() { r.Description = f.description })
}

func newAlertRulesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "rules", Short: "Create, list, show, update and delete alert rules"}
	var cf, uf ruleFlags
	create := &cobra.Command{
		Use: "create NAME", Short: "Store a new alert rule", Args: exactArgs("NAME"),
		Example: `  jobctl alert rules create export-fails --condition failed --kind export --failures 3 --channel pager
  jobctl alert rules create slow-export --condition long_run --kind export --threshold 30m --channel chat
  jobctl alert rules create nightly-missed --condition missed_tick --trigger nightly --channel mail
  jobctl alert rules create backlog --condition queue_lag --queue default --threshold 5m --for 10m --repeat-every 1h --channel pager
  jobctl alert rules create orphans --condition no_node --channel pager`,
		RunE: func(cmd *cobra.Command, args []string) error {
			r := &jobkitv1.AlertRule{Name: args[0]}
			cf.apply(cmd, r)
			if r.Condition == "" {
				return usagef("alert rules create needs --condition (failed, long_run, missed_tick, queue_lag or no_node)")
			}
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				got, err := c.Admin().CreateAlertRule(ctx, r)
				if err != nil {
					return err
				}
				return printRules(g, &jobkitv1.CreateRuleResponse{Rule: got}, got)
			})
		},
	}
	cf.add(create, false)
	update := &cobra.Command{
		Use: "update NAME", Short: "Change the fields given of a stored rule", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				r, err := c.Admin().GetAlertRule(ctx, args[0])
				if err != nil {
					return err
				}
				v := r.GetVersion()
				if cmd.Flags().Changed("if-version") {
					v = uf.ifVersion
				}
				uf.apply(cmd, r)
				got, err := c.Admin().UpdateAlertRule(ctx, r, v)
				if err != nil {
					return err
				}
				return printRules(g, &jobkitv1.UpdateRuleResponse{Rule: got}, got)
			})
		},
	}
	uf.add(update, true)
	list := &cobra.Command{
		Use: "list", Short: "List the alert rules", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				rules, err := c.Admin().ListAlertRules(ctx)
				if err != nil {
					return err
				}
				return printRules(g, &jobkitv1.ListRulesResponse{Rules: rules}, rules...)
			})
		},
	}
	get := &cobra.Command{
		Use: "get NAME", Short: "Show an alert rule", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				r, err := c.Admin().GetAlertRule(ctx, args[0])
				if err != nil {
					return err
				}
				return printRules(g, &jobkitv1.GetRuleResponse{Rule: r}, r)
			})
		},
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete an alert rule (its open incidents resolve)", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.Admin().DeleteAlertRule(ctx, args[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(g.env.stdout, "alert rule %q deleted\n", args[0])
				return err
			})
		},
	}
	cmd.AddCommand(create, list, get, update, del)
	return cmd
}

func ruleScope(r *jobkitv1.AlertRule) string {
	switch {
	case r.GetKind() != "":
		return "kind " + r.GetKind()
	case r.GetTrigger() != "":
		return "trigger " + r.GetTrigger()
	case r.GetQueue() != "":
		return "queue " + r.GetQueue()
	}
	return "namespace"
}

func printRules(g *globals, res protoMsg, rules ...*jobkitv1.AlertRule) error {
	pr := g.printer()
	if pr.structured() && res != nil {
		return pr.message(res, false)
	}
	t := newTable(pr.w, "NAME", "CONDITION", "SCOPE", "THRESHOLD", "CHANNELS", "DISABLED", "VERSION")
	for _, r := range rules {
		th := dur(r.GetThreshold())
		if r.GetFailures() > 1 {
			th = fmt.Sprintf("%d in a row", r.GetFailures())
		}
		if r.GetFor() != nil {
			th += " for " + dur(r.GetFor())
		}
		t.row(r.GetName(), r.GetCondition(), ruleScope(r), orDash(th), orDash(strings.Join(r.GetChannels(), ",")), boolStr(r.GetDisabled()), i64(r.GetVersion()))
	}
	return t.flush()
}

func newSilencesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "silences", Short: "Mute a rule, or every rule about a kind, until an end time"}
	var rule, kind, comment string
	var forDur time.Duration
	var until string
	create := &cobra.Command{
		Use: "create NAME", Short: "Store a silence", Args: exactArgs("NAME"),
		Example: `  jobctl alert silences create db-maintenance --kind export --for 2h --comment "database upgrade"
  jobctl alert silences create quiet --rule backlog --until 2026-11-25T08:00:00Z`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var end time.Time
			switch {
			case forDur > 0 && until != "":
				return usagef("give --for or --until, not both")
			case forDur > 0:
				end = time.Now().Add(forDur)
			case until != "":
				var err error
				if end, err = time.Parse(time.RFC3339, until); err != nil {
					return usagef("--until %q: want an RFC 3339 time such as 2026-11-25T08:00:00Z", until)
				}
			default:
				return usagef("alert silences create needs --for or --until")
			}
			s := &jobkitv1.Silence{Name: args[0], Rule: rule, Kind: kind, End: timestamppb.New(end), Comment: comment}
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				got, err := c.Admin().CreateSilence(ctx, s)
				if err != nil {
					return err
				}
				return printSilences(g, &jobkitv1.CreateSilenceResponse{Silence: got}, got)
			})
		},
	}
	fl := create.Flags()
	fl.StringVar(&rule, "rule", "", "the rule to silence")
	fl.StringVar(&kind, "kind", "", "the kind whose alerts to silence")
	fl.DurationVar(&forDur, "for", 0, "silence for this long from now")
	fl.StringVar(&until, "until", "", "silence until this RFC 3339 time")
	fl.StringVar(&comment, "comment", "", "why")
	create.MarkFlagsMutuallyExclusive("rule", "kind")
	list := &cobra.Command{
		Use: "list", Short: "List the silences", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				list, err := c.Admin().ListSilences(ctx)
				if err != nil {
					return err
				}
				return printSilences(g, &jobkitv1.ListSilencesResponse{Silences: list}, list...)
			})
		},
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "End a silence now", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.Admin().DeleteSilence(ctx, args[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(g.env.stdout, "silence %q deleted\n", args[0])
				return err
			})
		},
	}
	cmd.AddCommand(create, list, del)
	return cmd
}

func printSilences(g *globals, res protoMsg, list ...*jobkitv1.Silence) error {
	pr := g.printer()
	if pr.structured() && res != nil {
		return pr.message(res, false)
	}
	t := newTable(pr.w, "NAME", "SILENCES", "UNTIL", "ACTIVE", "COMMENT")
	for _, s := range list {
		what := "rule " + s.GetRule()
		if s.GetKind() != "" {
			what = "kind " + s.GetKind()
		}
		t.row(s.GetName(), what, tsFmt(s.GetEnd()), boolStr(s.GetEnd().AsTime().After(time.Now())), orDash(s.GetComment()))
	}
	return t.flush()
}

func newIncidentsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "incidents", Short: "List and show the incidents alert rules opened"}
	var state string
	list := &cobra.Command{
		Use: "list", Short: "List incidents, most recently opened first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				list, err := c.Admin().ListIncidents(ctx, state)
				if err != nil {
					return err
				}
				return printIncidents(g, &jobkitv1.ListIncidentsResponse{Incidents: list}, list...)
			})
		},
	}
	list.Flags().StringVar(&state, "state", "", "open or resolved (default: both)")
	_ = list.RegisterFlagCompletionFunc("state", fixedCompletion("open", "resolved"))
	get := &cobra.Command{
		Use: "get ID", Short: "Show an incident and its notifications", Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				res, err := c.Admin().GetIncident(ctx, args[0])
				if err != nil {
					return err
				}
				if g.printer().structured() {
					return g.printer().message(res, false)
				}
				if err := printIncidents(g, nil, res.GetIncident()); err != nil {
					return err
				}
				if d := res.GetIncident().GetSubject().GetDetail(); d != "" {
					fmt.Fprintf(g.env.stdout, "\n%s\n", d)
				}
				fmt.Fprintln(g.env.stdout)
				return printNotifications(g, nil, res.GetNotifications()...)
			})
		},
	}
	cmd.AddCommand(list, get)
	return cmd
}

func subjectStr(s *jobkitv1.AlertSubject) string {
	var parts []string
	for _, kv := range [][2]string{{"kind", s.GetKind()}, {"queue", s.GetQueue()}, {"trigger", s.GetTrigger()}, {"instance", s.GetInstanceId()}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return orDash(strings.Join(parts, " "))
}

func printIncidents(g *globals, res protoMsg, list ...*jobkitv1.Incident) error {
	pr := g.printer()
	if pr.structured() && res != nil {
		return pr.message(res, false)
	}
	t := newTable(pr.w, "ID", "RULE", "STATE", "SUBJECT", "OPENED", "RESOLVED", "NOTIFIED")
	for _, in := range list {
		t.row(in.GetId(), in.GetRule(), in.GetState(), subjectStr(in.GetSubject()), tsFmt(in.GetOpenedAt()), tsFmt(in.GetResolvedAt()), fmt.Sprint(in.GetNotifications()))
	}
	return t.flush()
}

type chanFlags struct {
	typ, url, secretRef, smtpAddr, from, username, passwordRef, caFile string
	to                                                                 []string
	ifVersion                                                          int64
}

func (f *chanFlags) add(cmd *cobra.Command, update bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.typ, "type", "", "webhook (signed JSON), chat (Slack-compatible) or email")
	fl.StringVar(&f.url, "url", "", "webhook or chat: the address to POST to")
	fl.StringVar(&f.secretRef, "secret-ref", "", "webhook: the signing secret's reference, env:NAME or file:/path (resolved on each jobd; never the secret)")
	fl.StringVar(&f.smtpAddr, "smtp-addr", "", "email: the mail server, host:port (STARTTLS required)")
	fl.StringVar(&f.from, "from", "", "email: the sender")
	fl.StringSliceVar(&f.to, "to", nil, "email: a recipient, repeatable")
	fl.StringVar(&f.username, "username", "", "email: the SMTP login")
	fl.StringVar(&f.passwordRef, "password-ref", "", "email: the SMTP password's reference, env:NAME or file:/path")
	fl.StringVar(&f.caFile, "ca-file", "", "email: PEM file (on the jobd nodes) of the CAs the server's certificate is checked against")
	_ = cmd.RegisterFlagCompletionFunc("type", fixedCompletion("webhook", "chat", "email"))
	if update {
		fl.Int64Var(&f.ifVersion, "if-version", 0, "replace only if the stored version is this (default: the version read just before)")
	}
}

func (f *chanFlags) apply(cmd *cobra.Command, c *jobkitv1.Channel) {
	fl := cmd.Flags()
	set := func(name string, do func()) {
		if fl.Changed(name) {
			do()
		}
	}
	set("type", func() { c.Type = f.typ })
	set("url", func() { c.Url = f.url })
	set("secret-ref", func() { c.SecretRef = f.secretRef })
	set("smtp-addr", func() { c.SmtpAddr = f.smtpAddr })
	set("from", func() { c.From = f.from })
	set("to", func() { c.To = f.to })
	set("username", func() { c.Username = f.username })
	set("password-ref", func() { c.PasswordRef = f.passwordRef })
	set("ca-file", func() { c.CaFile = f.caFile })
}

func newChannelsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "channels", Short: "Create, list, show, update, delete and test notification channels"}
	var cf, uf chanFlags
	create := &cobra.Command{
		Use: "create NAME", Short: "Store a notification channel", Args: exactArgs("NAME"),
		Example: `  jobctl alert channels create pager --type webhook --url https://hooks.example.com/jobkit --secret-ref env:PAGER_SECRET
  jobctl alert channels create chat --type chat --url https://hooks.slack.com/services/T000/B000/XXXX
  jobctl alert channels create mail --type email --smtp-addr smtp.example.com:587 --from jobs@example.com --to ops@example.com --username jobs --password-ref file:/etc/jobd/smtp-password`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ch := &jobkitv1.Channel{Name: args[0]}
			cf.apply(cmd, ch)
			if ch.Type == "" {
				return usagef("alert channels create needs --type (webhook, chat or email)")
			}
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				got, err := c.Admin().CreateChannel(ctx, ch)
				if err != nil {
					return err
				}
				return printChannels(g, &jobkitv1.CreateChannelResponse{Channel: got}, got)
			})
		},
	}
	cf.add(create, false)
	update := &cobra.Command{
		Use: "update NAME", Short: "Change the fields given of a channel", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				ch, err := c.Admin().GetChannel(ctx, args[0])
				if err != nil {
					return err
				}
				v := ch.GetVersion()
				if cmd.Flags().Changed("if-version") {
					v = uf.ifVersion
				}
				ch.Status = nil
				uf.apply(cmd, ch)
				got, err := c.Admin().UpdateChannel(ctx, ch, v)
				if err != nil {
					return err
				}
				return printChannels(g, &jobkitv1.UpdateChannelResponse{Channel: got}, got)
			})
		},
	}
	uf.add(update, true)
	list := &cobra.Command{
		Use: "list", Short: "List the channels and how their deliveries go", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				list, err := c.Admin().ListChannels(ctx)
				if err != nil {
					return err
				}
				return printChannels(g, &jobkitv1.ListChannelsResponse{Channels: list}, list...)
			})
		},
	}
	get := byName(g, "get", "Show a channel and how its deliveries go", func(ctx context.Context, c *client.Client, name string) error {
		ch, err := c.Admin().GetChannel(ctx, name)
		if err != nil {
			return err
		}
		if err := printChannels(g, &jobkitv1.GetChannelResponse{Channel: ch}, ch); err != nil {
			return err
		}
		if e := ch.GetStatus().GetLastError(); e != "" && !g.printer().structured() {
			fmt.Fprintf(g.env.stdout, "\nlast error (%s): %s\n", tsFmt(ch.GetStatus().GetLastErrorAt()), e)
		}
		return nil
	})
	del := byName(g, "delete", "Delete a channel no rule names", func(ctx context.Context, c *client.Client, name string) error {
		if err := c.Admin().DeleteChannel(ctx, name); err != nil {
			return err
		}
		_, err := fmt.Fprintf(g.env.stdout, "channel %q deleted\n", name)
		return err
	})
	test := byName(g, "test", "Send a test notification now and say what the channel answered", func(ctx context.Context, c *client.Client, name string) error {
		n, err := c.Admin().TestChannel(ctx, name)
		if err != nil {
			return err
		}
		if g.printer().structured() {
			return g.printer().message(&jobkitv1.TestChannelResponse{Notification: n}, false)
		}
		_, err = fmt.Fprintf(g.env.stdout, "test notification delivered through channel %q\n", name)
		return err
	})
	cmd.AddCommand(create, list, get, update, del, test)
	return cmd
}

func printChannels(g *globals, res protoMsg, list ...*jobkitv1.Channel) error {
	pr := g.printer()
	if pr.structured() && res != nil {
		return pr.message(res, false)
	}
	t := newTable(pr.w, "NAME", "TYPE", "DESTINATION", "HEALTH", "DELIVERED", "FAILED", "VERSION")
	for _, c := range list {
		dest := c.GetUrl()
		if c.GetType() == "email" {
			dest = strings.Join(c.GetTo(), ",") + " via " + c.GetSmtpAddr()
		}
		health := "ok"
		st := c.GetStatus()
		switch {
		case st.GetConsecutiveFailures() > 0:
			health = fmt.Sprintf("failing (%d in a row)", st.GetConsecutiveFailures())
		case st.GetDelivered() == 0:
			health = "-"
		}
		t.row(c.GetName(), c.GetType(), dest, health, i64(st.GetDelivered()), i64(st.GetFailed()), i64(c.GetVersion()))
	}
	return t.flush()
}

func newAlertHistoryCmd(g *globals) *cobra.Command {
	var size int
	var token, incident string
	cmd := &cobra.Command{
		Use: "history", Short: "The notifications sent (or silenced, or failed), newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				page, err := c.Admin().ListNotifications(ctx, size, token, incident)
				if err != nil {
					return err
				}
				res := &jobkitv1.ListNotificationsResponse{Notifications: page.Items, NextPageToken: page.Next}
				if err := printNotifications(g, res, page.Items...); err != nil {
					return err
				}
				if page.Next != "" && !g.printer().structured() {
					fmt.Fprintf(g.env.stderr, "more: --page-token %s\n", page.Next)
				}
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&size, "page-size", 0, "notifications per page (default 100)")
	cmd.Flags().StringVar(&token, "page-token", "", "the next page's token, as the previous page said")
	cmd.Flags().StringVar(&incident, "incident", "", "only this incident's")
	return cmd
}

func printNotifications(g *globals, res protoMsg, list ...*jobkitv1.Notification) error {
	pr := g.printer()
	if pr.structured() && res != nil {
		return pr.message(res, false)
	}
	t := newTable(pr.w, "AT", "EVENT", "RULE", "SUBJECT", "CHANNEL", "STATUS", "ATTEMPTS", "ERROR")
	for _, n := range list {
		status := n.GetStatus()
		if n.GetSilence() != "" {
			status += " (" + n.GetSilence() + ")"
		}
		t.row(tsFmt(n.GetAt()), n.GetEvent(), orDash(n.GetRule()), subjectStr(n.GetSubject()), orDash(n.GetChannel()), status, fmt.Sprint(n.GetAttempts()), orDash(n.GetLastError()))
	}
	return t.flush()
}

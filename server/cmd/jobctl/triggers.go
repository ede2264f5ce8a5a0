package main

import (
	"context"
	"github.com/jobkit/job/api/client"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(io.LimitReader(r, 64<<20)) }

// trigFlags are the fields of a trigger a command line sets.
type trigFlags struct {
	file          string
	kind          string
	args          string
	cron          string
	tz            string
	interval      time.Duration
	paused        bool
	overlap       string
	missed        string
	catchUpWithin time.Duration
	ifVersion     int64
	calendar      string
	calPolicy     string
	template      string
	params        []string
	paramsJSON    string
}

func (f *trigFlags) add(cmd *cobra.Command, update bool) {
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", `read the trigger from this JSON file (a jobkit.v1.Trigger; "-": stdin); flags override its fields`)
	fl.StringVar(&f.kind, "kind", "", "the kind it schedules")
	fl.StringVar(&f.template, "workflow-template", "", `run this stored workflow template at each tick instead of a kind (see "jobctl workflow template")`)
	fl.StringArrayVarP(&f.params, "param", "p", nil, `with --workflow-template: a parameter, name=value (a JSON value, else a string); repeat for each`)
	fl.StringVar(&f.paramsJSON, "params-json", "", `with --workflow-template: the parameters as a JSON object`)
	cmd.MarkFlagsMutuallyExclusive("kind", "workflow-template")
	fl.StringVar(&f.args, "args", "", `arguments of every instance, a JSON array ("@FILE": read from a file, "@-": from standard input)`)
	fl.StringVar(&f.cron, "cron", "", `cron spec ("0 6 * * *", "@hourly"); one of --cron and --interval`)
	fl.StringVar(&f.tz, "tz", "", "IANA time zone of the cron spec (default UTC)")
	fl.DurationVar(&f.interval, "interval", 0, "fire at this interval")
	fl.BoolVar(&f.paused, "paused", false, "create it paused")
	fl.StringVar(&f.overlap, "overlap", "", "when the previous tick still runs: allow, forbid or replace")
	fl.StringVar(&f.missed, "missed", "", "ticks missed while no scheduler ran: skip or catch-up-once")
	fl.DurationVar(&f.catchUpWithin, "catch-up-within", 0, "with --missed catch-up-once: how old a missed tick may be")
	fl.StringVar(&f.calendar, "calendar", "", `run on this stored calendar (see "jobctl calendars"); "" for none`)
	fl.StringVar(&f.calPolicy, "calendar-policy", "", "with --calendar: workdays (default), skip-dates or next-workday")
	_ = cmd.RegisterFlagCompletionFunc("calendar-policy", fixedCompletion("workdays", "skip-dates", "next-workday"))
	cmd.MarkFlagsMutuallyExclusive("cron", "interval")
	_ = cmd.RegisterFlagCompletionFunc("overlap", fixedCompletion("allow", "forbid", "replace"))
	_ = cmd.RegisterFlagCompletionFunc("missed", fixedCompletion("skip", "catch-up-once"))
	if update {
		fl.Int64Var(&f.ifVersion, "if-version", 0, "replace only if the stored version is this (default: the version read just before)")
	}
}

func (f *trigFlags) apply(cmd *cobra.Command, t *jobkitv1.Trigger) error {
	fl := cmd.Flags()
	if fl.Changed("kind") {
		t.Kind, t.WorkflowTemplate, t.ParamsJson = f.kind, "", ""
	}
	if fl.Changed("workflow-template") {
		t.WorkflowTemplate, t.Kind, t.ArgsJson = f.template, "", ""
	}
	if fl.Changed("param") || fl.Changed("params-json") {
		pj, err := templateParams(f.params, f.paramsJSON)
		if err != nil {
			return err
		}
		t.ParamsJson = pj
	}
	if fl.Changed("args") {
		a, err := argsValue(f.args, cmd.InOrStdin())
		if err != nil {
			return err
		}
		t.ArgsJson = a
	}
	if fl.Changed("cron") {
		t.Cron, t.Interval = f.cron, nil
	}
	if fl.Changed("interval") {
		t.Interval, t.Cron = durationpb.New(f.interval), ""
	}
	if fl.Changed("tz") {
		t.TimeZone = f.tz
	}
	if fl.Changed("paused") {
		t.Paused = f.paused
	}
	if fl.Changed("overlap") {
		v, ok := jobkitv1.OverlapPolicy_value["OVERLAP_POLICY_"+strings.ToUpper(f.overlap)]
		if !ok || v == 0 {
			return usagef("--overlap %q: want allow, forbid or replace", f.overlap)
		}
		t.Overlap = jobkitv1.OverlapPolicy(v)
	}
	if fl.Changed("missed") {
		v, ok := jobkitv1.MissedTickPolicy_value["MISSED_TICK_POLICY_"+strings.ToUpper(strings.ReplaceAll(f.missed, "-", "_"))]
		if !ok || v == 0 {
			return usagef("--missed %q: want skip or catch-up-once", f.missed)
		}
		t.Missed = jobkitv1.MissedTickPolicy(v)
	}
	if fl.Changed("catch-up-within") {
		t.CatchUpWithin = durationpb.New(f.catchUpWithin)
	}
	if fl.Changed("calendar") {
		t.Calendar = f.calendar
		if f.calendar == "" {
			t.CalendarPolicy = jobkitv1.CalendarPolicy_CALENDAR_POLICY_UNSPECIFIED
		}
	}
	if fl.Changed("calendar-policy") {
		p, err := parseCalendarPolicy(f.calPolicy)
		if err != nil {
			return err
		}
		t.CalendarPolicy = p
	}
	return nil
}

func newTriggersCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "triggers", Short: "Create, show, list, update, delete, pause, resume and run stored triggers"}
	cmd.AddCommand(newTriggerCreateCmd(g), newTriggerGetCmd(g), newTriggerListCmd(g), newTriggerUpdateCmd(g),
		byName(g, "delete", "Delete a trigger", func(ctx context.Context, c *client.Client, name string) error {
			if err := c.Admin().DeleteTrigger(ctx, name); err != nil {
				return err
			}
			return g.printer().done(&jobkitv1.DeleteTriggerResponse{}, "deleted trigger "+name)
		}),
		byName(g, "pause", "Stop a trigger's ticks", func(ctx context.Context, c *client.Client, name string) error {
			t, err := c.Admin().PauseTrigger(ctx, name)
			if err != nil {
				return err
			}
			return printTriggers(g, &jobkitv1.PauseTriggerResponse{Trigger: t}, t)
		}),
		byName(g, "resume", "Start a paused trigger's ticks again", func(ctx context.Context, c *client.Client, name string) error {
			t, err := c.Admin().ResumeTrigger(ctx, name)
			if err != nil {
				return err
			}
			return printTriggers(g, &jobkitv1.ResumeTriggerResponse{Trigger: t}, t)
		}),
		byName(g, "run", "Schedule one instance of the trigger now, outside its schedule", func(ctx context.Context, c *client.Client, name string) error {
			in, err := c.Admin().RunTrigger(ctx, name)
			if err != nil {
				return err
			}
			pr := g.printer()
			if pr.structured() {
				return pr.message(&jobkitv1.RunTriggerResponse{Instance: in.Proto()}, false)
			}
			return instanceTable(pr, []*jobkitv1.Instance{in.Proto()})
		}),
	)
	return cmd
}

// byName is a command "USE NAME" that makes one call about the named
// object: call runs within g.call.
func byName(g *globals, use, short string, call func(ctx context.Context, c *client.Client, name string) error) *cobra.Command {
	return &cobra.Command{Use: use + " NAME", Short: short, Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error { return call(ctx, c, args[0]) })
		}}
}

func newTriggerCreateCmd(g *globals) *cobra.Command {
	var cf trigFlags
	create := &cobra.Command{
		Use: "create NAME", Short: "Store a new trigger", Args: exactArgs("NAME"),
		Example: `  jobctl triggers create nightly --kind report --cron '0 2 * * *' --tz Europe/Paris
  jobctl triggers create ping --kind ping --interval 30s --overlap forbid
  jobctl triggers create nightly-images --workflow-template images --param url=https://example.org/a.png --cron '0 3 * * *'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			t := &jobkitv1.Trigger{}
			if cf.file != "" {
				if err := readMessage(g, cf.file, t); err != nil {
					return err
				}
			}
			t.Name = args[0]
			if err := cf.apply(cmd, t); err != nil {
				return err
			}
			if t.Kind == "" && t.WorkflowTemplate == "" {
				return usagef("triggers create needs --kind (or --workflow-template)")
			}
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				got, err := c.Admin().CreateTrigger(ctx, t)
				if err != nil {
					return err
				}
				return printTriggers(g, &jobkitv1.CreateTriggerResponse{Trigger: got}, got)
			})
		},
	}
	cf.add(create, false)
	return create
}

func newTriggerUpdateCmd(g *globals) *cobra.Command {
	var uf trigFlags
	update := &cobra.Command{
		Use: "update NAME", Short: "Change a stored trigger (the fields given; the rest kept)", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				t, err := c.Admin().GetTrigger(ctx, args[0], 0)
				if err != nil {
					return err
				}
				ifVersion := t.GetVersion()
				if cmd.Flags().Changed("if-version") {
					ifVersion = uf.ifVersion
				}
				if uf.file != "" {
					t = &jobkitv1.Trigger{}
					if err := readMessage(g, uf.file, t); err != nil {
						return err
					}
				}
				t.Name = args[0]
				t.NextFireTimes = nil
				if err := uf.apply(cmd, t); err != nil {
					return err
				}
				got, err := c.Admin().UpdateTrigger(ctx, t, ifVersion)
				if err != nil {
					return err
				}
				return printTriggers(g, &jobkitv1.UpdateTriggerResponse{Trigger: got}, got)
			})
		},
	}
	uf.add(update, true)
	return update
}

func newTriggerGetCmd(g *globals) *cobra.Command {
	var next int
	get := &cobra.Command{
		Use: "get NAME", Short: "Show a trigger with its next fire times", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				t, err := c.Admin().GetTrigger(ctx, args[0], next)
				if err != nil {
					return err
				}
				pr := g.printer()
				if pr.structured() {
					return pr.message(&jobkitv1.GetTriggerResponse{Trigger: t}, false)
				}
				if err := printTriggers(g, nil, t); err != nil {
					return err
				}
				for _, ft := range t.GetNextFireTimes() {
					if _, err := io.WriteString(pr.w, "next: "+ts(ft)+"\n"); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	get.Flags().IntVar(&next, "next", 0, "how many next fire times to show (0: 5)")
	return get
}

func newTriggerListCmd(g *globals) *cobra.Command {
	var pg pageFlags
	list := &cobra.Command{
		Use: "list", Short: "List triggers by name", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				page, err := c.Admin().ListTriggers(ctx, pg.size, pg.token)
				if err != nil {
					return err
				}
				ts, nextTok := page.Items, page.Next
				return printTriggers(g, &jobkitv1.ListTriggersResponse{Triggers: ts, NextPageToken: nextTok}, ts...)
			})
		},
	}
	pg.add(list, "triggers")
	return list
}

// printTriggers prints res (JSON, YAML) or a table of ts.
func printTriggers(g *globals, res protoMsg, ts ...*jobkitv1.Trigger) error {
	pr := g.printer()
	if pr.structured() && res != nil {
		return pr.message(res, false)
	}
	t := newTable(pr.w, "NAME", "KIND", "SCHEDULE", "PAUSED", "LAST TICK", "NEXT", "VERSION")
	for _, tr := range ts {
		sched := tr.GetCron()
		if tr.GetInterval() != nil {
			sched = "every " + dur(tr.GetInterval())
		}
		if tz := tr.GetTimeZone(); tz != "" {
			sched += " (" + tz + ")"
		}
		if c := tr.GetCalendar(); c != "" {
			sched += " on " + c + " (" + calendarPolicyStr(tr.GetCalendarPolicy()) + ")"
		}
		next := "-"
		if n := tr.GetNextFireTimes(); len(n) > 0 {
			next = tsFmt(n[0])
		}
		kind := tr.GetKind()
		if wt := tr.GetWorkflowTemplate(); wt != "" {
			kind = "workflow template " + wt
		}
		t.row(tr.GetName(), kind, sched, boolStr(tr.GetPaused()), tsFmt(tr.GetLastTick()), next, i64(tr.GetVersion()))
	}
	return t.flush()
}

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// calFlags are the fields of a calendar a command line sets.
type calFlags struct {
	file        string
	tz          string
	workdays    string
	dates       []string
	yearly      []string
	addDates    []string
	removeDates []string
	description string
	ifVersion   int64
}

func (f *calFlags) add(cmd *cobra.Command, update bool) {
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", `read the calendar from this JSON file (a jobkit.v1.Calendar; "-": stdin); flags override its fields`)
	fl.StringVar(&f.tz, "tz", "", "IANA time zone its days are read in (default UTC)")
	fl.StringVar(&f.workdays, "workdays", "", `working weekdays: "mon-fri", "mon,tue,thu" (default mon-fri when created)`)
	fl.StringArrayVar(&f.dates, "date", nil, `a day off, "2026-12-25" or "2026-12-25=Christmas" (repeat; replaces the dates)`)
	fl.StringArrayVar(&f.yearly, "yearly", nil, `a day off every year from then on, "2026-05-01=Labour Day" (repeat)`)
	fl.StringVar(&f.description, "description", "", "free text for people")
	if update {
		fl.StringArrayVar(&f.addDates, "add-date", nil, `add a day off, "2027-07-14=Fête nationale" (repeat)`)
		fl.StringArrayVar(&f.removeDates, "remove-date", nil, `remove the day off of this date (repeat)`)
		fl.Int64Var(&f.ifVersion, "if-version", 0, "replace only if the stored version is this (default: the version read just before)")
	}
}

// parseCalDate reads "2026-12-25" or "2026-12-25=Name".
func parseCalDate(flag, v string, yearly bool) (*jobkitv1.CalendarDate, error) {
	d, name, _ := strings.Cut(v, "=")
	d = strings.TrimSpace(d)
	if _, err := time.Parse(time.DateOnly, d); err != nil {
		return nil, usagef("--%s %q: want YYYY-MM-DD or YYYY-MM-DD=Name", flag, v)
	}
	return &jobkitv1.CalendarDate{Date: d, Name: strings.TrimSpace(name), Yearly: yearly}, nil
}

// weekdayNames are the weekdays in the API's order, by their short names.
var weekdayNames = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

// parseWorkdays reads "mon-fri", "mon,wed,fri" or "mon-thu,sat".
func parseWorkdays(v string) ([]jobkitv1.Weekday, error) {
	idx := func(s string) int {
		return slices.Index(weekdayNames, strings.ToLower(strings.TrimSpace(s))[:min(3, len(strings.TrimSpace(s)))])
	}
	var out []jobkitv1.Weekday
	for _, part := range strings.Split(v, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, b := idx(from), idx(from)
		if isRange {
			b = idx(to)
		}
		if a < 0 || b < 0 || b < a {
			return nil, usagef("--workdays %q: want weekdays such as mon-fri or mon,wed,fri", v)
		}
		for d := a; d <= b; d++ {
			w := jobkitv1.Weekday(d + 1)
			if !slices.Contains(out, w) {
				out = append(out, w)
			}
		}
	}
	return out, nil
}

func (f *calFlags) apply(cmd *cobra.Command, c *jobkitv1.Calendar) error {
	fl := cmd.Flags()
	if fl.Changed("tz") {
		c.TimeZone = f.tz
	}
	if fl.Changed("workdays") {
		w, err := parseWorkdays(f.workdays)
		if err != nil {
			return err
		}
		c.Workdays = w
	}
	if fl.Changed("description") {
		c.Description = f.description
	}
	if fl.Changed("date") || fl.Changed("yearly") {
		c.Dates = nil
		for _, v := range f.dates {
			d, err := parseCalDate("date", v, false)
			if err != nil {
				return err
			}
			c.Dates = append(c.Dates, d)
		}
		for _, v := range f.yearly {
			d, err := parseCalDate("yearly", v, true)
			if err != nil {
				return err
			}
			c.Dates = append(c.Dates, d)
		}
	}
	for _, v := range f.removeDates {
		n := len(c.Dates)
		c.Dates = slices.DeleteFunc(c.Dates, func(d *jobkitv1.CalendarDate) bool { return d.GetDate() == strings.TrimSpace(v) })
		if len(c.Dates) == n {
			return usagef("--remove-date %q: the calendar has no such date", v)
		}
	}
	for _, v := range f.addDates {
		d, err := parseCalDate("add-date", v, false)
		if err != nil {
			return err
		}
		c.Dates = append(c.Dates, d)
	}
	return nil
}

func newCalendarsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "calendars", Aliases: []string{"calendar"},
		Short: "Create, show, list, update, delete and import calendars (working days and holidays), and preview fire times"}
	cmd.AddCommand(newCalendarCreateCmd(g), newCalendarGetCmd(g), newCalendarListCmd(g), newCalendarUpdateCmd(g),
		newCalendarDeleteCmd(g), newCalendarImportCmd(g), newCalendarNextCmd(g))
	return cmd
}

func newCalendarCreateCmd(g *globals) *cobra.Command {
	var cf calFlags
	create := &cobra.Command{
		Use: "create NAME", Short: "Store a new calendar", Args: exactArgs("NAME"),
		Example: `  jobctl calendars create fr --tz Europe/Paris --workdays mon-fri --yearly 2026-05-01=Labour --date 2026-11-11=Armistice`,
		RunE: func(cmd *cobra.Command, args []string) error {
			c := &jobkitv1.Calendar{}
			if cf.file != "" {
				if err := readMessage(g, cf.file, c); err != nil {
					return err
				}
			}
			c.Name = args[0]
			if len(c.Workdays) == 0 && !cmd.Flags().Changed("workdays") {
				c.Workdays, _ = parseWorkdays("mon-fri")
			}
			if err := cf.apply(cmd, c); err != nil {
				return err
			}
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				got, err := cl.Admin().CreateCalendar(ctx, c)
				if err != nil {
					return err
				}
				return printCalendar(g, &jobkitv1.CreateCalendarResponse{Calendar: got}, got)
			})
		},
	}
	cf.add(create, false)
	return create
}

func newCalendarUpdateCmd(g *globals) *cobra.Command {
	var uf calFlags
	update := &cobra.Command{
		Use: "update NAME", Short: "Change a stored calendar (the fields given; the rest kept)", Args: exactArgs("NAME"),
		Example: `  jobctl calendars update fr --add-date 2027-07-14=Bastille --remove-date 2026-11-11`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				c, err := cl.Admin().GetCalendar(ctx, args[0])
				if err != nil {
					return err
				}
				ifVersion := c.GetVersion()
				if cmd.Flags().Changed("if-version") {
					ifVersion = uf.ifVersion
				}
				if uf.file != "" {
					c = &jobkitv1.Calendar{}
					if err := readMessage(g, uf.file, c); err != nil {
						return err
					}
				}
				c.Name, c.UsedBy = args[0], nil
				if err := uf.apply(cmd, c); err != nil {
					return err
				}
				got, err := cl.Admin().UpdateCalendar(ctx, c, ifVersion)
				if err != nil {
					return err
				}
				return printCalendar(g, &jobkitv1.UpdateCalendarResponse{Calendar: got}, got)
			})
		},
	}
	uf.add(update, true)
	return update
}

func newCalendarGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "get NAME", Short: "Show a calendar: its zone, working days, days off and the triggers on it", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				c, err := cl.Admin().GetCalendar(ctx, args[0])
				if err != nil {
					return err
				}
				return printCalendar(g, &jobkitv1.GetCalendarResponse{Calendar: c}, c)
			})
		},
	}
}

func newCalendarListCmd(g *globals) *cobra.Command {
	var pg pageFlags
	list := &cobra.Command{
		Use: "list", Short: "List calendars by name", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				page, err := cl.Admin().ListCalendars(ctx, pg.size, pg.token)
				if err != nil {
					return err
				}
				cs, next := page.Items, page.Next
				pr := g.printer()
				if pr.structured() {
					return pr.message(&jobkitv1.ListCalendarsResponse{Calendars: cs, NextPageToken: next}, false)
				}
				t := newTable(pr.w, "NAME", "ZONE", "WORKDAYS", "DAYS OFF", "USED BY", "VERSION")
				for _, c := range cs {
					t.row(c.GetName(), orDash(c.GetTimeZone()), workdaysStr(c.GetWorkdays()), fmt.Sprint(len(c.GetDates())),
						orDash(strings.Join(c.GetUsedBy(), ", ")), i64(c.GetVersion()))
				}
				return t.flush()
			})
		},
	}
	pg.add(list, "calendars")
	return list
}

func newCalendarDeleteCmd(g *globals) *cobra.Command {
	var delVersion int64
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete a calendar (refused while triggers run on it)", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				if err := cl.Admin().DeleteCalendar(ctx, args[0], delVersion); err != nil {
					return err
				}
				return g.printer().done(&jobkitv1.DeleteCalendarResponse{}, "deleted calendar "+args[0])
			})
		},
	}
	del.Flags().Int64Var(&delVersion, "if-version", 0, "delete only if the stored version is this")
	return del
}

func newCalendarImportCmd(g *globals) *cobra.Command {
	var (
		impTZ, impWorkdays, impDesc string
		impReplace                  bool
		impYears                    int
	)
	imp := &cobra.Command{
		Use: "import NAME FILE", Short: `Create a calendar from an iCalendar file (.ics; "-": stdin): its events are the days off`, Args: exactArgs("NAME", "FILE"),
		Example: `  jobctl calendars import fr holidays-fr.ics --workdays mon-fri
  curl -sS https://example.org/holidays.ics | jobctl calendars import fr - --replace`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[1] == "-" {
				data, err = readAll(g.env.stdin)
			} else {
				data, err = os.ReadFile(args[1])
			}
			if err != nil {
				return usagef("calendars import: %v", err)
			}
			req := &jobkitv1.ImportCalendarRequest{Name: args[0], Ical: data, TimeZone: impTZ, Replace: impReplace, Years: int32(impYears), Description: impDesc}
			if impWorkdays != "" {
				if req.Workdays, err = parseWorkdays(impWorkdays); err != nil {
					return err
				}
			}
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				c, events, err := cl.Admin().ImportCalendar(ctx, req)
				if err != nil {
					return err
				}
				pr := g.printer()
				if pr.structured() {
					return pr.message(&jobkitv1.ImportCalendarResponse{Calendar: c, Events: int32(events)}, false)
				}
				if _, err := fmt.Fprintf(pr.w, "imported %d events into calendar %s\n", events, c.GetName()); err != nil {
					return err
				}
				return printCalendar(g, nil, c)
			})
		},
	}
	imp.Flags().StringVar(&impTZ, "tz", "", "IANA time zone (default: the file's X-WR-TIMEZONE, else UTC)")
	imp.Flags().StringVar(&impWorkdays, "workdays", "", "working weekdays (default mon-fri)")
	imp.Flags().BoolVar(&impReplace, "replace", false, "replace a stored calendar of that name")
	imp.Flags().IntVar(&impYears, "years", 0, "years of repeating events to list, from the start of this year (0: 10)")
	imp.Flags().StringVar(&impDesc, "description", "", "free text (default: the file's X-WR-CALNAME)")
	return imp
}

// nextFlags are the flags of calendars next.
type nextFlags struct {
	trigger, cron, tz, calendar, policy, after string
	interval                                   time.Duration
	count                                      int
}

// request is the ListFireTimes request the flags ask for, and the time
// after which the fire times are wanted (zero: now).
func (f *nextFlags) request() (*jobkitv1.ListFireTimesRequest, time.Time, error) {
	req := &jobkitv1.ListFireTimesRequest{TriggerName: f.trigger, Count: int32(f.count)}
	if f.trigger == "" {
		if f.cron == "" && f.interval == 0 {
			return nil, time.Time{}, usagef("calendars next needs --trigger, or --cron or --interval with --calendar")
		}
		t := &jobkitv1.Trigger{Cron: f.cron, TimeZone: f.tz, Calendar: f.calendar}
		if f.interval != 0 {
			t.Interval = durationpb.New(f.interval)
		}
		if f.policy != "" {
			p, err := parseCalendarPolicy(f.policy)
			if err != nil {
				return nil, time.Time{}, err
			}
			t.CalendarPolicy = p
		}
		req.Trigger = t
	} else if f.cron != "" || f.interval != 0 || f.calendar != "" || f.policy != "" {
		return nil, time.Time{}, usagef("calendars next: --trigger takes the stored trigger's schedule and calendar; drop --cron, --interval, --calendar and --policy")
	}
	var after time.Time
	if f.after != "" {
		var err error
		if after, err = time.Parse(time.RFC3339Nano, f.after); err != nil {
			return nil, time.Time{}, usagef("--after %q: want an RFC 3339 time such as 2027-01-01T00:00:00Z", f.after)
		}
	}
	return req, after, nil
}

func newCalendarNextCmd(g *globals) *cobra.Command {
	var nf nextFlags
	next := &cobra.Command{
		Use: "next", Short: "Preview the next fire times of a trigger (stored, or a spec) with a calendar", Args: noArgs,
		Example: `  jobctl calendars next --trigger nightly
  jobctl calendars next --cron '0 9 * * *' --tz Europe/Paris --calendar fr --policy next-workday --count 10`,
		RunE: func(cmd *cobra.Command, args []string) error {
			req, after, err := nf.request()
			if err != nil {
				return err
			}
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				fire, raw, err := cl.Admin().ListFireTimes(ctx, req, after)
				if err != nil {
					return err
				}
				return printFireTimes(g.printer(), fire, raw)
			})
		},
	}
	fl := next.Flags()
	fl.StringVar(&nf.trigger, "trigger", "", "a stored trigger, by name")
	fl.StringVar(&nf.cron, "cron", "", "a cron spec to try")
	fl.DurationVar(&nf.interval, "interval", 0, "an interval to try")
	fl.StringVar(&nf.tz, "tz", "", "the cron spec's time zone")
	fl.StringVar(&nf.calendar, "calendar", "", "the stored calendar to try it with")
	fl.StringVar(&nf.policy, "policy", "", "workdays, skip-dates or next-workday (default workdays)")
	fl.IntVar(&nf.count, "count", 0, "how many fire times (0: 5)")
	fl.StringVar(&nf.after, "after", "", "fire times after this RFC 3339 time (default now)")
	_ = next.RegisterFlagCompletionFunc("policy", fixedCompletion("workdays", "skip-dates", "next-workday"))
	return next
}

// printFireTimes prints the fire times with the calendar (fire) and
// without it (raw): in a table, each time once, saying whether it fires,
// fires moved by the calendar, or is skipped.
func printFireTimes(pr *printer, fire, raw []time.Time) error {
	if pr.structured() {
		res := &jobkitv1.ListFireTimesResponse{}
		for _, f := range fire {
			res.FireTimes = append(res.FireTimes, tspb(f))
		}
		for _, f := range raw {
			res.RawFireTimes = append(res.RawFireTimes, tspb(f))
		}
		return pr.message(res, false)
	}
	fires := map[time.Time]bool{}
	for _, f := range fire {
		fires[f] = true
	}
	t := newTable(pr.w, "TIME", "WITH THE CALENDAR")
	all := append(slices.Clone(fire), raw...)
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	all = slices.CompactFunc(all, func(a, b time.Time) bool { return a.Equal(b) })
	for _, f := range all {
		what := "fires"
		switch {
		case !fires[f]:
			what = "skipped"
		case !slices.ContainsFunc(raw, f.Equal):
			what = "fires (moved)"
		}
		t.row(ts(tspb(f)), what)
	}
	return t.flush()
}

// parseCalendarPolicy reads workdays, skip-dates or next-workday.
func parseCalendarPolicy(s string) (jobkitv1.CalendarPolicy, error) {
	v, ok := jobkitv1.CalendarPolicy_value["CALENDAR_POLICY_"+strings.ToUpper(strings.ReplaceAll(s, "-", "_"))]
	if !ok || v == 0 {
		return 0, usagef("calendar policy %q: want workdays, skip-dates or next-workday", s)
	}
	return jobkitv1.CalendarPolicy(v), nil
}

// calendarPolicyStr is p as the command line writes it.
func calendarPolicyStr(p jobkitv1.CalendarPolicy) string {
	if p == jobkitv1.CalendarPolicy_CALENDAR_POLICY_UNSPECIFIED {
		return "workdays"
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(p.String(), "CALENDAR_POLICY_")), "_", "-")
}

// workdaysStr writes weekdays as "mon,tue,...".
func workdaysStr(ws []jobkitv1.Weekday) string {
	names := make([]string, 0, len(ws))
	for _, w := range ws {
		if w >= 1 && int(w) <= len(weekdayNames) {
			names = append(names, weekdayNames[w-1])
		}
	}
	return orDash(strings.Join(names, ","))
}

// printCalendar prints res (JSON, YAML) or c: its fields, then a table of
// its days off.
func printCalendar(g *globals, res protoMsg, c *jobkitv1.Calendar) error {
	pr := g.printer()
	if pr.structured() && res != nil {
		return pr.message(res, false)
	}
	if pr.structured() {
		return pr.message(c, false)
	}
	if _, err := fmt.Fprintf(pr.w, "calendar %s (version %d)\nzone:     %s\nworkdays: %s\nused by:  %s\n",
		c.GetName(), c.GetVersion(), orDash(c.GetTimeZone()), workdaysStr(c.GetWorkdays()), orDash(strings.Join(c.GetUsedBy(), ", "))); err != nil {
		return err
	}
	if c.GetDescription() != "" {
		if _, err := fmt.Fprintf(pr.w, "about:    %s\n", c.GetDescription()); err != nil {
			return err
		}
	}
	t := newTable(pr.w, "DATE", "NAME", "REPEATS")
	for _, d := range c.GetDates() {
		rep := "-"
		if d.GetYearly() {
			rep = "yearly"
		}
		t.row(d.GetDate(), orDash(d.GetName()), rep)
	}
	return t.flush()
}

// tspb is t as a protobuf timestamp.
func tspb(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

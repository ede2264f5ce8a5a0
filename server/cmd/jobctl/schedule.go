package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// schedFlags are the flags of jobctl schedule.
type schedFlags struct {
	args, at, cron, tz, name                 string
	in, jitter, timeout, uniqueTTL, interval time.Duration
	retries, priority, shards                int
	queue, uniqueKey, idemKey                string
	meta                                     []string
}

func (f *schedFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.args, "args", "", `the executor's arguments as a JSON array: '[1, "a"]' ("@FILE": read from a file, "@-": from standard input)`)
	fl.StringVar(&f.at, "at", "", "run at this RFC 3339 time")
	fl.DurationVar(&f.in, "in", 0, "run after this long (5m)")
	fl.DurationVar(&f.jitter, "jitter", 0, "delay by a random duration up to this")
	fl.IntVar(&f.retries, "retries", 0, "max retries of a failed attempt (-1: forever)")
	fl.DurationVar(&f.timeout, "timeout", 0, "bound on each attempt")
	fl.IntVar(&f.priority, "priority", 0, "priority: higher runs first")
	fl.StringVar(&f.queue, "queue", "", "queue, instead of the kind's")
	fl.StringVar(&f.uniqueKey, "unique-key", "", "refuse (exit 4) while another instance holds this key")
	fl.DurationVar(&f.uniqueTTL, "unique-ttl", 0, "how long the unique key is held (0: the kind's, else 24h)")
	fl.StringVar(&f.idemKey, "idempotency-key", "", "repeating the command with this key returns the first instance")
	fl.StringArrayVar(&f.meta, "meta", nil, "metadata key=value carried to every attempt (repeat)")
	fl.IntVar(&f.shards, "shards", 0, "schedule a sharded task of this many shards (1 to 1000); prints its parent (jobctl instance get shows the shards)")
	fl.StringVar(&f.cron, "cron", "", `create a trigger on this cron spec instead ("0 6 * * *", "@hourly")`)
	fl.DurationVar(&f.interval, "interval", 0, "create a trigger firing at this interval instead")
	fl.StringVar(&f.tz, "tz", "", "the trigger's IANA time zone (default UTC)")
	fl.StringVar(&f.name, "name", "", "the trigger's name (default: KIND)")
	cmd.MarkFlagsMutuallyExclusive("cron", "interval")
}

// trigger is the trigger --cron or --interval asks for, with the
// arguments args; a flag of a one-off schedule is a usage error.
func (f *schedFlags) trigger(cmd *cobra.Command, kind, args string) (*jobkitv1.Trigger, error) {
	for _, n := range []string{"at", "in", "jitter", "retries", "timeout", "priority", "queue", "unique-key", "unique-ttl", "idempotency-key", "meta", "shards"} {
		if cmd.Flags().Changed(n) {
			return nil, usagef("--%s does not apply to a trigger (--cron, --interval); set the kind's policy with jobctl definitions", n)
		}
	}
	t := &jobkitv1.Trigger{Name: f.name, Kind: kind, ArgsJson: args, Cron: f.cron, TimeZone: f.tz}
	if t.Name == "" {
		t.Name = kind
	}
	if f.interval != 0 {
		t.Interval = durationpb.New(f.interval)
	}
	return t, nil
}

// options are the schedule options the flags set, with the arguments
// args; a trigger's flag is a usage error.
func (f *schedFlags) options(cmd *cobra.Command, args string) ([]client.ScheduleOption, error) {
	fl := cmd.Flags()
	for _, n := range []string{"name", "tz"} {
		if fl.Changed(n) {
			return nil, usagef("--%s goes with --cron or --interval", n)
		}
	}
	var opts []client.ScheduleOption
	if args != "" {
		opts = append(opts, client.WithArgumentsJSON(args))
	}
	if f.at != "" {
		t, err := time.Parse(time.RFC3339Nano, f.at)
		if err != nil {
			return nil, usagef("--at %q: want an RFC 3339 time (2026-11-23T21:00:00Z)", f.at)
		}
		opts = append(opts, client.WithScheduleAt(t))
	}
	if fl.Changed("at") && fl.Changed("in") {
		return nil, usagef("give one of --at and --in")
	}
	if !fl.Changed("unique-key") && fl.Changed("unique-ttl") {
		return nil, usagef("--unique-ttl goes with --unique-key")
	}
	for _, o := range []struct {
		flag string
		opt  func() client.ScheduleOption
	}{
		{"in", func() client.ScheduleOption { return client.WithScheduleAfter(f.in) }},
		{"jitter", func() client.ScheduleOption { return client.WithJitter(f.jitter) }},
		{"retries", func() client.ScheduleOption { return client.WithMaxRetries(f.retries) }},
		{"timeout", func() client.ScheduleOption { return client.WithTimeout(f.timeout) }},
		{"priority", func() client.ScheduleOption { return client.WithPriority(job.Priority(f.priority)) }},
		{"queue", func() client.ScheduleOption { return client.WithQueue(f.queue) }},
		{"unique-key", func() client.ScheduleOption { return client.WithUniqueKey(f.uniqueKey, f.uniqueTTL) }},
		{"idempotency-key", func() client.ScheduleOption { return client.WithIdempotencyKey(f.idemKey) }},
		{"shards", func() client.ScheduleOption { return client.WithShards(f.shards) }},
	} {
		if fl.Changed(o.flag) {
			opts = append(opts, o.opt())
		}
	}
	md, err := parsePairs("meta", f.meta)
	if err != nil {
		return nil, err
	}
	if md != nil {
		opts = append(opts, client.WithMetadata(md))
	}
	return opts, nil
}

func newScheduleCmd(g *globals) *cobra.Command {
	var f schedFlags
	cmd := &cobra.Command{
		Use:   "schedule KIND",
		Short: "Schedule one instance of a kind (or, with --cron/--interval, create a trigger)",
		Example: `  jobctl schedule sum --args '[1,2]'
  jobctl schedule mail --args '["a@example.com"]' --in 5m --retries 5 --queue mail
  jobctl schedule render --args @big-args.json
  jobctl schedule report --cron '0 6 * * *' --name daily-report`,
		Args: exactArgs("KIND"),
		RunE: func(cmd *cobra.Command, pos []string) error {
			kind := pos[0]
			args, err := argsValue(f.args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if f.cron != "" || f.interval != 0 {
				t, err := f.trigger(cmd, kind, args)
				if err != nil {
					return err
				}
				return g.call(cmd, func(ctx context.Context, c *client.Client) error {
					got, err := c.Admin().CreateTrigger(ctx, t)
					if err != nil {
						return err
					}
					return printTriggers(g, &jobkitv1.CreateTriggerResponse{Trigger: got}, got)
				})
			}
			opts, err := f.options(cmd, args)
			if err != nil {
				return err
			}
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				in, err := c.ScheduleJob(ctx, kind, opts...)
				if err != nil {
					return err
				}
				pr := g.printer()
				if pr.structured() {
					return pr.message(&jobkitv1.ScheduleResponse{Instance: in.Proto()}, false)
				}
				return instanceTable(pr, []*jobkitv1.Instance{in.Proto()})
			})
		},
	}
	f.add(cmd)
	return cmd
}

func newScheduleBatchCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "schedule-batch -f FILE",
		Short: "Schedule many instances in one call from a JSON Lines file",
		Long: `schedule-batch reads one jobkit.v1.ScheduleRequest per line, in the
API's JSON form ({"kind":"sum","argsJson":"[1,2]","delay":"300s"}), from
FILE ("-": standard input), and schedules them in one call (at most 1000).
Each line gets its own result. The exit code is 0 when every item was
scheduled, else that of the first failed item's code.`,
		Example: `  printf '%s\n' '{"kind":"sum","argsJson":"[1,2]"}' '{"kind":"sum","argsJson":"[3,4]","queue":"q"}' | jobctl schedule-batch -f -`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader
			if file == "-" {
				r = g.env.stdin
			} else {
				fh, err := os.Open(file)
				if err != nil {
					return usagef("-f: %v", err)
				}
				defer fh.Close()
				r = fh
			}
			var items []client.BatchItem
			sc := bufio.NewScanner(r)
			sc.Buffer(make([]byte, 64<<10), 16<<20)
			for line := 1; sc.Scan(); line++ {
				text := strings.TrimSpace(sc.Text())
				if text == "" || strings.HasPrefix(text, "#") {
					continue
				}
				req := &jobkitv1.ScheduleRequest{}
				if err := protojson.Unmarshal([]byte(text), req); err != nil {
					return usagef("%s line %d: not a jobkit.v1.ScheduleRequest in JSON: %v", file, line, err)
				}
				items = append(items, client.BatchItem{Kind: req.GetKind(), Options: []client.ScheduleOption{client.WithScheduleRequest(req)}})
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("read %s: %w", file, err)
			}
			if len(items) == 0 {
				return usagef("%s holds no request", file)
			}
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				results, err := c.ScheduleJobs(ctx, items...)
				if err != nil {
					return err
				}
				res := &jobkitv1.ScheduleBatchResponse{}
				var first error
				for _, r := range results {
					br := &jobkitv1.ScheduleBatchResult{}
					if r.Err != nil {
						var ce *client.Error
						if e, ok := r.Err.(*client.Error); ok {
							ce = e
							br.Error = &jobkitv1.ItemError{Code: ce.Code().String(), Message: ce.Message(), Fix: ce.Fix()}
						}
						if first == nil {
							first = r.Err
						}
					} else {
						br.Instance = r.Instance.Proto()
					}
					res.Results = append(res.Results, br)
				}
				pr := g.printer()
				if pr.structured() {
					if err := pr.message(res, false); err != nil {
						return err
					}
				} else {
					t := newTable(pr.w, "#", "ID", "KIND", "QUEUE", "STATE", "ERROR")
					for i, r := range res.Results {
						if e := r.GetError(); e != nil {
							t.row(fmt.Sprint(i+1), "-", items[i].Kind, "-", "-", e.GetCode()+": "+withJobctlFix(e.GetMessage(), e.GetFix()))
							continue
						}
						in := r.GetInstance()
						t.row(fmt.Sprint(i+1), in.GetId(), in.GetKind(), in.GetQueue(), stateName(in.GetState()), "-")
					}
					if err := t.flush(); err != nil {
						return err
					}
				}
				return first
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `JSON Lines file of ScheduleRequests ("-": standard input)`)
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// filterFlags are the flags that select instances.
type filterFlags struct {
	states []string
	kind   string
	queue  string
	since  string
	until  string
	labels []string
	parent string
	text   string
}

func (f *filterFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.states, "state", nil, "states (repeat or comma-separate): created, scheduled, processing, completed, terminated, canceled, timedout; failed = terminated,timedout")
	fl.StringVar(&f.kind, "kind", "", "job kind")
	fl.StringVar(&f.queue, "queue", "", "queue")
	fl.StringVar(&f.since, "since", "", "created at or after: RFC 3339 time, or a duration ago (90m)")
	fl.StringVar(&f.until, "until", "", "created before: RFC 3339 time, or a duration ago")
	fl.StringSliceVarP(&f.labels, "label", "l", nil, "required labels the instances carry (repeat)")
	fl.StringVar(&f.parent, "parent", "", "the shards of the sharded task with this parent ID")
	fl.StringVar(&f.text, "text", "", "text in the arguments, result or error, ignoring case (searched on the server, up to 10,000 instances a page; not for bulk actions)")
	_ = cmd.RegisterFlagCompletionFunc("state", fixedCompletion("created", "scheduled", "processing", "completed", "terminated", "canceled", "timedout", "failed"))
}

// query returns the query the flags describe, and whether it selects
// anything in particular.
func (f *filterFlags) query(extra ...client.QueryOption) (*client.Query, bool, error) {
	states, err := parseStates(f.states)
	if err != nil {
		return nil, false, err
	}
	now := time.Now()
	since, err := parseWhen("since", f.since, now)
	if err != nil {
		return nil, false, err
	}
	until, err := parseWhen("until", f.until, now)
	if err != nil {
		return nil, false, err
	}
	opts := []client.QueryOption{
		client.WithQueryKind(f.kind), client.WithQueryQueue(f.queue), client.WithQueryState(states...),
		client.WithQuerySince(since), client.WithQueryUntil(until), client.WithQueryLabels(f.labels...),
		client.WithQueryParent(f.parent), client.WithQueryText(f.text),
	}
	narrow := len(states) > 0 || f.kind != "" || f.queue != "" || !since.IsZero() || !until.IsZero() || len(f.labels) > 0 || f.parent != "" || f.text != ""
	return client.NewQuery(append(opts, extra...)...), narrow, nil
}

func newInstancesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "instances", Aliases: []string{"inst"}, Short: "List, cancel, retry or delete instances by filter"}
	cmd.AddCommand(newInstancesListCmd(g))
	for _, verb := range []string{"cancel", "retry", "delete"} {
		cmd.AddCommand(newInstancesBulkCmd(g, verb))
	}
	return cmd
}

func newInstancesListCmd(g *globals) *cobra.Command {
	var (
		f         filterFlags
		pageSize  int
		pageToken string
		allPages  bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List instances, newest first",
		Example: `  jobctl instances list --state failed --kind mail
  jobctl instances list --queue default --since 1h --all-pages -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q, _, err := f.query(client.WithQueryLimit(pageSize), client.WithQueryCursor(pageToken))
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res := &jobkitv1.ListInstancesResponse{}
			if allPages {
				ctx := cmd.Context()
				for in, err := range c.AllInstances(ctx, q) {
					if err != nil {
						return err
					}
					res.Instances = append(res.Instances, in.Proto())
				}
			} else {
				ctx, cancel := g.callCtx(cmd.Context())
				defer cancel()
				p, err := c.ListInstances(ctx, q)
				if err != nil {
					return err
				}
				for _, in := range p.Items {
					res.Instances = append(res.Instances, in.Proto())
				}
				res.NextPageToken = p.Next
			}
			pr := g.printer()
			if pr.structured() {
				return pr.message(res, false)
			}
			if err := instanceTable(pr, res.Instances); err != nil {
				return err
			}
			if res.NextPageToken != "" {
				fmt.Fprintf(g.env.stderr, "more: --page-token %s (or --all-pages)\n", res.NextPageToken)
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().IntVar(&pageSize, "page-size", 0, "instances per page (0: the server's default, 100; at most 1000)")
	cmd.Flags().StringVar(&pageToken, "page-token", "", "continue after the page that printed this token")
	cmd.Flags().BoolVar(&allPages, "all-pages", false, "read every page")
	cmd.MarkFlagsMutuallyExclusive("page-token", "all-pages")
	return cmd
}

func instanceTable(pr *printer, ins []*jobkitv1.Instance) error {
	t := newTable(pr.w, "ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "RUN AT", "CREATED", "ERROR")
	for _, in := range ins {
		t.row(in.GetId(), in.GetKind(), in.GetQueue(), stateName(in.GetState()), strconv.Itoa(int(in.GetAttempt())),
			ts(in.GetRunAt()), ts(in.GetCreatedAt()), orDash(short(in.GetError(), 60)))
	}
	return t.flush()
}

// stateName is the lower-case name jobctl prints and --state takes.
func stateName(s jobkitv1.State) string { return job.State(s).String() }

func short(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

func newInstancesBulkCmd(g *globals, verb string) *cobra.Command {
	var (
		f     filterFlags
		all   bool
		yes   bool
		reset bool
		at    string
	)
	cmd := &cobra.Command{
		Use:   verb,
		Short: map[string]string{"cancel": "Cancel every instance a filter selects", "retry": "Retry every finished instance a filter selects", "delete": "Delete every instance a filter selects, with history and logs"}[verb],
		Example: fmt.Sprintf(`  jobctl instances %s --state failed --kind mail --yes
  jobctl instances %s --all --yes`, verb, verb),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q, narrow, err := f.query()
			if err != nil {
				return err
			}
			if !narrow && !all {
				return usagef("instances %s with no filter acts on every instance; narrow it (--state, --kind, ...) or say --all", verb)
			}
			if !yes {
				return usagef("instances %s changes many instances; add --yes to go ahead", verb)
			}
			var opts []client.AdminOption
			if all {
				opts = append(opts, client.WithAllInstances())
			}
			if reset {
				opts = append(opts, client.WithResetAttempts())
			}
			if at != "" {
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return usagef("--at %q: want an RFC 3339 time", at)
				}
				opts = append(opts, client.WithRetryAt(t))
			}
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				var r client.BulkResult
				switch verb {
				case "cancel":
					r, err = c.Admin().CancelInstances(ctx, q, opts...)
				case "retry":
					r, err = c.Admin().RetryInstances(ctx, q, opts...)
				case "delete":
					r, err = c.Admin().DeleteInstances(ctx, q, opts...)
				}
				if err != nil {
					return err
				}
				br := &jobkitv1.BulkResult{Matched: r.Matched, Applied: r.Applied, Skipped: r.Skipped}
				pr := g.printer()
				if pr.structured() {
					switch verb {
					case "cancel":
						return pr.message(&jobkitv1.CancelInstancesResponse{Result: br}, false)
					case "retry":
						return pr.message(&jobkitv1.RetryInstancesResponse{Result: br}, false)
					default:
						return pr.message(&jobkitv1.DeleteInstancesResponse{Result: br}, false)
					}
				}
				t := newTable(pr.w, "MATCHED", "APPLIED", "SKIPPED")
				t.row(strconv.FormatInt(r.Matched, 10), strconv.FormatInt(r.Applied, 10), strconv.FormatInt(r.Skipped, 10))
				return t.flush()
			})
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "act with no filter: on every instance")
	cmd.Flags().BoolVar(&yes, "yes", false, "go ahead (required)")
	if verb == "retry" {
		cmd.Flags().BoolVar(&reset, "reset-attempts", false, "count attempts from zero again")
		cmd.Flags().StringVar(&at, "at", "", "run at this RFC 3339 time instead of now")
	}
	return cmd
}

// noArgs refuses positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// exactArgs wants n positional arguments, named in the message.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("%s wants %d argument(s): %v; got %d", cmd.CommandPath(), len(names), names, len(args))
		}
		return nil
	}
}

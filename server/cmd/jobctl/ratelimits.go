package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// jobctl limits rate set|delete: the cluster's rate limits. jobctl limits
// list shows them after the concurrency limits.

func newRateLimitCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "rate", Short: "Set and delete the cluster's rate limits (jobctl limits list shows them)"}
	cmd.AddCommand(newRateLimitSetCmd(g), newRateLimitDeleteCmd(g))
	return cmd
}

func newRateLimitSetCmd(g *globals) *cobra.Command {
	var (
		scope  limitScopeFlags
		rate   int
		period time.Duration
		burst  int
	)
	set := &cobra.Command{
		Use:   "set --rate N --period D [--burst B] [--kind KIND] [--queue QUEUE]",
		Short: "Set a rate limit: at most N starts of what it matches per period D (plus B after a quiet spell), on all nodes",
		Args:  noArgs,
		Example: `  jobctl limits rate set --kind email --rate 100 --period 1s --burst 10
  jobctl limits rate set --queue reports --rate 5 --period 1m`,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case !cmd.Flags().Changed("rate"):
				return usagef("--rate is required: how many may start per period, 1 or more")
			case rate < 1:
				return usagef("--rate %d; give 1 or more starts per period (jobctl limits set --max 0 stops starts altogether)", rate)
			case !cmd.Flags().Changed("period"):
				return usagef("--period is required: the window the rate counts starts in, 1ms to a year (e.g. 1s)")
			case burst < 0:
				return usagef("--burst %d is negative; give 0 (starts spaced period/rate apart) or more", burst)
			}
			l := job.RateLimit{Kind: scope.kind, Queue: scope.queue, Rate: rate, Period: period, Burst: burst}
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				if err := cl.Admin().SetRateLimit(ctx, l); err != nil {
					return err
				}
				return g.printer().done(&jobkitv1.SetRateLimitResponse{Limit: rateLimitProto(l)}, "set the rate limit of "+l.String())
			})
		},
	}
	scope.add(set)
	set.Flags().IntVar(&rate, "rate", 0, "how many may start per period, on all nodes together (1 or more)")
	set.Flags().DurationVar(&period, "period", 0, "the window the rate counts starts in, 1ms to a year (e.g. 1s, 1m)")
	set.Flags().IntVar(&burst, "burst", 0, "how many more than the rate may start at once after a quiet spell (0: spaced period/rate apart)")
	return set
}

func newRateLimitDeleteCmd(g *globals) *cobra.Command {
	var scope limitScopeFlags
	del := &cobra.Command{
		Use: "delete [--kind KIND] [--queue QUEUE]", Short: "Delete the rate limit of a kind and queue, as it was set", Args: noArgs,
		Example: `  jobctl limits rate delete --kind email`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				if err := cl.Admin().DeleteRateLimit(ctx, scope.kind, scope.queue); err != nil {
					return err
				}
				l := store.RateLimit{Kind: scope.kind, Queue: scope.queue}
				return g.printer().done(&jobkitv1.DeleteRateLimitResponse{}, "deleted the rate limit of "+l.Scope())
			})
		},
	}
	scope.add(del)
	return del
}

// printRateLimits writes the rate limits' table after the concurrency
// limits' one, a blank line between.
func printRateLimits(pr *printer, rates []job.RateLimitUse) error {
	fmt.Fprintln(pr.w)
	t := newTable(pr.w, "KIND", "QUEUE", "RATE", "PERIOD", "BURST", "RUNNING", "WAITING")
	for _, u := range rates {
		t.row(orAny(u.Kind), orAny(u.Queue), fmt.Sprint(u.Rate), u.Period.String(), fmt.Sprint(u.Burst), fmt.Sprint(u.Running), fmt.Sprint(u.Waiting))
	}
	return t.flush()
}

// rateLimitProto converts a rate limit for -o json|yaml.
func rateLimitProto(l job.RateLimit) *jobkitv1.RateLimit {
	return &jobkitv1.RateLimit{Kind: l.Kind, Queue: l.Queue, Rate: int32(l.Rate), Period: durationpb.New(l.Period), Burst: int32(l.Burst)}
}

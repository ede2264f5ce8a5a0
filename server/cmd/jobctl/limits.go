package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

func newLimitsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "limits", Aliases: []string{"limit"},
		Short: "Set, delete and list the cluster's concurrency and rate limits, with how many run and wait for each"}
	cmd.AddCommand(newLimitSetCmd(g), newLimitDeleteCmd(g), newLimitListCmd(g), newRateLimitCmd(g))
	return cmd
}

// limitScopeFlags are the --kind and --queue flags naming a limit.
type limitScopeFlags struct{ kind, queue string }

func (f *limitScopeFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kind, "kind", "", "the kind it bounds (empty: every kind)")
	cmd.Flags().StringVar(&f.queue, "queue", "", "the queue it bounds (empty: every queue)")
}

func newLimitSetCmd(g *globals) *cobra.Command {
	var (
		scope  limitScopeFlags
		maxN   int
		perKey bool
	)
	set := &cobra.Command{
		Use: "set --max N [--kind KIND] [--queue QUEUE] [--per-key]", Short: "Set a concurrency limit: at most N of what it matches running at once, on all nodes", Args: noArgs,
		Example: `  jobctl limits set --kind email --max 64
  jobctl limits set --queue reports --max 8
  jobctl limits set --kind export --max 0     # none may start
  jobctl limits set --kind charge --max 1 --per-key   # one at a time per limit key`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("max") {
				return usagef("--max is required: how many may run at once (0 lets none start)")
			}
			if maxN < 0 {
				return usagef("--max %d is negative; give 0 (none may start) or more", maxN)
			}
			l := job.ConcurrencyLimit{Kind: scope.kind, Queue: scope.queue, Max: maxN, PerKey: perKey}
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				if err := cl.Admin().SetConcurrencyLimit(ctx, l); err != nil {
					return err
				}
				return g.printer().done(&jobkitv1.SetConcurrencyLimitResponse{Limit: limitProto(l)}, "set the concurrency limit of "+l.String())
			})
		},
	}
	scope.add(set)
	set.Flags().IntVar(&maxN, "max", 0, "how many may run at once, on all nodes together (0: none may start)")
	set.Flags().BoolVar(&perKey, "per-key", false, "bound each limit key (the key an instance was scheduled with) apart")
	return set
}

func newLimitDeleteCmd(g *globals) *cobra.Command {
	var scope limitScopeFlags
	del := &cobra.Command{
		Use: "delete [--kind KIND] [--queue QUEUE]", Short: "Delete the concurrency limit of a kind and queue, as it was set", Args: noArgs,
		Example: `  jobctl limits delete --kind email`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				if err := cl.Admin().DeleteConcurrencyLimit(ctx, scope.kind, scope.queue); err != nil {
					return err
				}
				l := store.ConcurrencyLimit{Kind: scope.kind, Queue: scope.queue}
				return g.printer().done(&jobkitv1.DeleteConcurrencyLimitResponse{}, "deleted the concurrency limit of "+l.Scope())
			})
		},
	}
	scope.add(del)
	return del
}

func newLimitListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "List the concurrency and rate limits with how many of what each matches run and wait now", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				uses, err := cl.Admin().ListConcurrencyLimits(ctx)
				if err != nil {
					return err
				}
				rates, err := cl.Admin().ListRateLimits(ctx)
				if err != nil {
					return err
				}
				pr := g.printer()
				if pr.structured() {
					res := &jobkitv1.ListLimitsResponse{}
					for _, u := range uses {
						res.ConcurrencyLimits = append(res.ConcurrencyLimits, &jobkitv1.ConcurrencyLimitUse{Limit: limitProto(u.ConcurrencyLimit), Running: u.Running, Waiting: u.Waiting})
					}
					for _, u := range rates {
						res.RateLimits = append(res.RateLimits, &jobkitv1.RateLimitUse{Limit: rateLimitProto(u.RateLimit), Running: u.Running, Waiting: u.Waiting})
					}
					return pr.message(res, false)
				}
				t := newTable(pr.w, "KIND", "QUEUE", "MAX", "RUNNING", "WAITING")
				for _, u := range uses {
					maxN := fmt.Sprint(u.Max)
					if u.PerKey {
						maxN += "/key"
					}
					t.row(orAny(u.Kind), orAny(u.Queue), maxN, fmt.Sprint(u.Running), fmt.Sprint(u.Waiting))
				}
				if err := t.flush(); err != nil || len(rates) == 0 {
					return err
				}
				return printRateLimits(pr, rates)
			})
		},
	}
}

// limitProto converts a limit for -o json|yaml.
func limitProto(l job.ConcurrencyLimit) *jobkitv1.ConcurrencyLimit {
	return &jobkitv1.ConcurrencyLimit{Kind: l.Kind, Queue: l.Queue, Max: int32(l.Max), PerKey: l.PerKey}
}

// orAny returns s, or "*" (every kind or queue) when it is empty.
func orAny(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

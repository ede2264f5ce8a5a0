package main

import (
	"context"
	"github.com/jobkit/job/api/client"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

func newQueuesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "queues", Short: "List, pause and resume queues"}
	cmd.AddCommand(&cobra.Command{
		Use: "list", Short: "List queues with their counts and lag", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				qs, err := c.Admin().ListQueues(ctx)
				if err != nil {
					return err
				}
				return printQueues(g, &jobkitv1.ListQueuesResponse{Queues: qs}, qs...)
			})
		},
	})
	for _, verb := range []string{"pause", "resume"} {
		var create bool
		sub := &cobra.Command{
			Use: verb + " QUEUE", Short: map[string]string{"pause": "Stop claims from a queue on every node", "resume": "Let nodes claim from a paused queue again"}[verb],
			Args: exactArgs("QUEUE"),
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.call(cmd, func(ctx context.Context, c *client.Client) error {
					if verb == "pause" {
						// A typo would create a paused queue nothing
						// uses: pause only a queue that holds jobs, that
						// a live node claims from or that a definition
						// names, unless --create.
						if !create {
							qs, err := c.Admin().ListQueues(ctx)
							if err != nil {
								return err
							}
							nodes, err := c.Admin().ListNodes(ctx)
							if err != nil {
								return err
							}
							var known []string
							for _, q := range qs {
								known = append(known, q.GetName())
							}
							for _, n := range nodes {
								known = append(known, n.GetQueues()...)
							}
							// And the queues stored definitions name.
							for tok := ""; ; {
								page, err := c.Admin().ListDefinitions(ctx, 500, tok)
								if err != nil {
									return err
								}
								defs, next := page.Items, page.Next
								for _, d := range defs {
									if q := d.GetQueue(); q != "" {
										known = append(known, q)
									}
								}
								if tok = next; tok == "" {
									break
								}
							}
							slices.Sort(known)
							known = slices.Compact(known)
							if !slices.Contains(known, args[0]) {
								return notFoundf("queue %q is unknown (known: %s); check the name, or pass --create to pause it before any job, node or definition uses it", args[0], orNone(known))
							}
						}
						q, err := c.Admin().PauseQueue(ctx, args[0])
						if err != nil {
							return err
						}
						return printQueues(g, &jobkitv1.PauseQueueResponse{Queue: q}, q)
					}
					q, err := c.Admin().ResumeQueue(ctx, args[0])
					if err != nil {
						return err
					}
					return printQueues(g, &jobkitv1.ResumeQueueResponse{Queue: q}, q)
				})
			},
		}
		if verb == "pause" {
			sub.Flags().BoolVar(&create, "create", false, "pause the queue even if no job uses it yet")
		}
		cmd.AddCommand(sub)
	}
	return cmd
}

func printQueues(g *globals, res protoMsg, qs ...*jobkitv1.Queue) error {
	pr := g.printer()
	if pr.structured() {
		return pr.message(res, false)
	}
	t := newTable(pr.w, "QUEUE", "PAUSED", "SCHEDULED", "PROCESSING", "COMPLETED", "FAILED", "CANCELED", "LAG")
	for _, q := range qs {
		n := q.GetCounts()
		t.row(q.GetName(), strconv.FormatBool(q.GetPaused()), i64(n.GetScheduled()), i64(n.GetProcessing()),
			i64(n.GetCompleted()), i64(n.GetTerminated()+n.GetTimedOut()), i64(n.GetCanceled()), dur(q.GetLag()))
	}
	return t.flush()
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }

func newKindsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "kinds", Short: "List the job kinds: seen in the store, registered on a live node or defined, with counts and lag", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				ks, err := c.Admin().ListKinds(ctx)
				if err != nil {
					return err
				}
				pr := g.printer()
				if pr.structured() {
					return pr.message(&jobkitv1.ListKindsResponse{Kinds: ks}, false)
				}
				t := newTable(pr.w, "KIND", "SCHEDULED", "PROCESSING", "COMPLETED", "FAILED", "CANCELED", "LAG")
				for _, k := range ks {
					n := k.GetCounts()
					t.row(k.GetName(), i64(n.GetScheduled()), i64(n.GetProcessing()), i64(n.GetCompleted()),
						i64(n.GetTerminated()+n.GetTimedOut()), i64(n.GetCanceled()), dur(k.GetLag()))
				}
				return t.flush()
			})
		},
	}
}

func newNodesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "nodes", Short: "List the nodes sharing the server's store", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				ns, err := c.Admin().ListNodes(ctx)
				if err != nil {
					return err
				}
				pr := g.printer()
				if pr.structured() {
					return pr.message(&jobkitv1.ListNodesResponse{Nodes: ns}, false)
				}
				t := newTable(pr.w, "ID", "HOST", "STATUS", "WORKERS", "BUSY", "KINDS", "LAST SEEN")
				for _, n := range ns {
					status := strings.ToLower(strings.TrimPrefix(n.GetStatus().String(), "NODE_STATUS_"))
					t.row(n.GetId(), orDash(n.GetHost()), status, strconv.Itoa(int(n.GetWorkers())), strconv.Itoa(int(n.GetBusy())),
						orDash(strings.Join(n.GetKinds(), ",")), ts(n.GetLastSeen()))
				}
				return t.flush()
			})
		},
	}
}

// orNone joins names, or says there are none.
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// newExecutorsCmd is the executors group: which built-in executor types
// (webhook, command, wasm) each node sharing the store enables, so an
// operator sees where a kind defined as data can run.
func newExecutorsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "executors", Short: "Show the built-in executor types the nodes enable"}
	var typ string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the nodes with the executor types each enables (--type: only the nodes enabling it)",
		Long: `List the nodes sharing the server's store, each with the built-in executor
types it enables (jobd's --webhook, --command-allow and --wasm-modules;
job.WithExecutorTypes in a Go worker). A kind whose stored definition names a
type runs only on the live nodes listed with it.`,
		Example: `  jobctl executors list
  jobctl executors list --type command -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				ns, err := c.Admin().ListNodes(ctx)
				if err != nil {
					return err
				}
				if typ != "" {
					ns = slices.DeleteFunc(ns, func(n *jobkitv1.Node) bool { return !slices.Contains(n.GetExecutorTypes(), typ) })
				}
				pr := g.printer()
				if pr.structured() {
					return pr.message(&jobkitv1.ListNodesResponse{Nodes: ns}, false)
				}
				t := newTable(pr.w, "NODE", "HOST", "STATUS", "EXECUTOR TYPES")
				live := false
				for _, n := range ns {
					status := strings.ToLower(strings.TrimPrefix(n.GetStatus().String(), "NODE_STATUS_"))
					t.row(n.GetId(), orDash(n.GetHost()), status, orDash(strings.Join(n.GetExecutorTypes(), ",")))
					live = live || (n.GetStatus() == jobkitv1.NodeStatus_NODE_STATUS_LIVE && len(n.GetExecutorTypes()) > 0)
				}
				if err := t.flush(); err != nil {
					return err
				}
				if !live {
					what := "any executor type"
					if typ != "" {
						what = fmt.Sprintf("executor type %q", typ)
					}
					fmt.Fprintf(g.env.stderr, "No live node enables %s: start jobd with --webhook, --command-allow or --wasm-modules (doc/executors.md).\n", what)
				}
				return nil
			})
		},
	}
	list.Flags().StringVar(&typ, "type", "", "only the nodes that enable this executor type (webhook, command, wasm)")
	cmd.AddCommand(list)
	return cmd
}

package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

func newWatchCmd(g *globals) *cobra.Command {
	var (
		kinds    []string
		instance string
		cursor   string
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print state changes as they happen (until interrupted)",
		Long: `watch prints every state change from now on (or after --cursor, the
cursor of the last event handled, to resume without a gap), one line per
change; -o json prints one WatchResponse per line.`,
		Example: `  jobctl watch --kind mail
  jobctl watch -o json --cursor "$LAST_CURSOR"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			opts := []client.EventOption{client.WithEventKinds(kinds...), client.WithEventInstanceID(instance)}
			if cursor != "" {
				opts = append(opts, client.WithEventCursor(cursor))
			}
			pr := g.printer()
			for ev, err := range c.Watch(cmd.Context(), opts...) {
				if err != nil {
					return err
				}
				if pr.structured() {
					err = pr.message(&jobkitv1.WatchResponse{Event: ev}, true)
				} else {
					_, err = fmt.Fprintf(pr.w, "%s %s %s/%s attempt %s %s%s\n", ts(ev.GetTime()), stateName(ev.GetState()),
						orDash(ev.GetKind()), ev.GetInstanceId(), strconv.Itoa(int(ev.GetAttempt())), orDash(ev.GetNode()), errSuffix(ev.GetError()))
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&kinds, "kind", nil, "only these kinds (repeat)")
	cmd.Flags().StringVar(&instance, "instance", "", "only this instance")
	cmd.Flags().StringVar(&cursor, "cursor", "", "resume after the event with this cursor")
	return cmd
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return ": " + e
}

package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

func newInstanceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "instance", Short: "Show or operate one instance by ID"}
	cmd.AddCommand(
		newInstanceGetCmd(g),
		&cobra.Command{
			Use: "cancel ID", Short: "Cancel an instance (a running one is asked to stop)", Args: exactArgs("ID"),
			RunE: func(cmd *cobra.Command, args []string) error {
				return oneInstance(g, cmd, func(c *client.Client, ctx ctxT) (*client.Instance, error) {
					return c.CancelInstance(ctx, args[0])
				}, func(in *client.Instance) protoMsg { return &jobkitv1.CancelInstanceResponse{Instance: in.Proto()} })
			},
		},
		newInstanceRetryCmd(g),
		&cobra.Command{
			Use: "delete ID", Short: "Delete an instance with its history and logs", Args: exactArgs("ID"),
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.call(cmd, func(ctx context.Context, c *client.Client) error {
					if err := c.DeleteInstance(ctx, args[0]); err != nil {
						return err
					}
					return g.printer().done(&jobkitv1.DeleteInstanceResponse{}, "deleted "+args[0])
				})
			},
		},
		newInstanceHistoryCmd(g),
		newInstanceLogsCmd(g),
	)
	return cmd
}

func newInstanceGetCmd(g *globals) *cobra.Command {
	var (
		follow   bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use: "get ID", Short: "Show an instance (--follow: its progress until it finishes)", Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !follow {
				return getInstance(g, cmd, args[0])
			}
			if interval <= 0 {
				return usagef("--interval %v: want a positive duration (e.g. 1s)", interval)
			}
			return followInstance(g, cmd, args[0], interval)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "re-read the instance and print its state and progress as they change, until it is final")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often --follow re-reads the instance")
	return cmd
}

// followInstance re-reads instance id every interval and prints a line
// (table output) or a GetInstanceResponse (json, yaml) whenever its state
// or progress changed, until it reaches a final state.
func followInstance(g *globals, cmd *cobra.Command, id string, interval time.Duration) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	pr := g.printer()
	var last string
	for {
		ctx, cancel := g.callCtx(cmd.Context())
		in, err := c.GetInstance(ctx, id)
		cancel()
		if err != nil {
			return err
		}
		p := in.Proto()
		key := p.GetState().String() + "\x00" + strconv.FormatFloat(p.GetProgress(), 'g', -1, 64) + "\x00" + p.GetProgressMessage() + "\x00" + strconv.Itoa(int(p.GetAttempt()))
		if key != last {
			last = key
			if pr.structured() {
				err = pr.message(&jobkitv1.GetInstanceResponse{Instance: p}, true)
			} else {
				err = progressLine(pr, p)
			}
			if err != nil {
				return err
			}
		}
		if job.State(p.GetState()).Final() {
			return nil
		}
		t := time.NewTimer(interval)
		select {
		case <-cmd.Context().Done():
			t.Stop()
			return cmd.Context().Err()
		case <-t.C:
		}
	}
}

// progressLine prints "state  attempt  percent  message" for --follow.
func progressLine(pr *printer, p *jobkitv1.Instance) error {
	line := stateName(p.GetState()) + " #" + strconv.Itoa(int(p.GetAttempt())) + " " +
		strconv.FormatFloat(p.GetProgress()*100, 'f', 0, 64) + "%"
	if m := p.GetProgressMessage(); m != "" {
		line += " " + m
	}
	if e := p.GetError(); e != "" && job.State(p.GetState()).Final() {
		line += " error: " + short(e, 120)
	}
	_, err := pr.w.Write([]byte(line + "\n"))
	return err
}

func newInstanceRetryCmd(g *globals) *cobra.Command {
	var (
		reset bool
		at    string
	)
	cmd := &cobra.Command{
		Use: "retry ID", Short: "Run a finished instance again", Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []client.AdminOption
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
			return oneInstance(g, cmd, func(c *client.Client, ctx ctxT) (*client.Instance, error) {
				return c.RetryInstance(ctx, args[0], opts...)
			}, func(in *client.Instance) protoMsg { return &jobkitv1.RetryInstanceResponse{Instance: in.Proto()} })
		},
	}
	cmd.Flags().BoolVar(&reset, "reset-attempts", false, "count attempts from zero again")
	cmd.Flags().StringVar(&at, "at", "", "run at this RFC 3339 time instead of now")
	return cmd
}

// getInstance prints instance id; for the parent of a sharded task, a
// table of its shards follows (in table output only: -o json and yaml
// print the GetInstanceResponse, and jobctl instances list --parent
// lists the shards).
func getInstance(g *globals, cmd *cobra.Command, id string) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	ctx, cancel := g.callCtx(cmd.Context())
	defer cancel()
	in, err := c.GetInstance(ctx, id)
	if err != nil {
		return err
	}
	pr := g.printer()
	if pr.structured() {
		return pr.message(&jobkitv1.GetInstanceResponse{Instance: in.Proto(), Waiting: in.WaitingProto()}, false)
	}
	if err := instanceDetail(pr, in); err != nil {
		return err
	}
	_, n := in.Shard()
	if n == 0 || in.Parent() != "" {
		return nil
	}
	p, err := c.ListInstances(ctx, client.NewQuery(client.WithQueryParent(id), client.WithQueryLimit(min(n, 1000))))
	if err != nil {
		return err
	}
	shards := slices.SortedFunc(slices.Values(p.Items), func(a, b *client.Instance) int {
		ia, _ := a.Shard()
		ib, _ := b.Shard()
		return ia - ib
	})
	fmt.Fprintln(pr.w)
	t := newTable(pr.w, "SHARD", "ID", "STATE", "ATTEMPT", "RUNNING ON", "ERROR")
	for _, s := range shards {
		sp := s.Proto()
		t.row(strconv.Itoa(int(sp.GetShardIndex())), sp.GetId(), stateName(sp.GetState()), strconv.Itoa(int(sp.GetAttempt())), orDash(sp.GetLeaseOwner()), orDash(short(sp.GetError(), 60)))
	}
	return t.flush()
}

// oneInstance runs a call that answers one instance and prints it.
func oneInstance(g *globals, cmd *cobra.Command, call func(*client.Client, ctxT) (*client.Instance, error), wrap func(*client.Instance) protoMsg) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	ctx, cancel := g.callCtx(cmd.Context())
	defer cancel()
	in, err := call(c, ctx)
	if err != nil {
		return err
	}
	pr := g.printer()
	if pr.structured() {
		return pr.message(wrap(in), false)
	}
	return instanceDetail(pr, in)
}

// instanceDetail prints one instance as "FIELD  value" lines.
func instanceDetail(pr *printer, in *client.Instance) error {
	p := in.Proto()
	t := newTable(pr.w, "FIELD", "VALUE")
	t.row("id", p.GetId())
	t.row("kind", p.GetKind())
	t.row("queue", p.GetQueue())
	t.row("state", stateName(p.GetState()))
	t.row("args", orDash(p.GetArgsJson()))
	t.row("priority", strconv.Itoa(int(p.GetPriority())))
	t.row("attempt", strconv.Itoa(int(p.GetAttempt())))
	t.row("max retries", strconv.Itoa(int(p.GetMaxRetries())))
	t.row("timeout", dur(p.GetTimeout()))
	t.row("run at", ts(p.GetRunAt()))
	t.row("created", ts(p.GetCreatedAt()))
	t.row("updated", ts(p.GetUpdatedAt()))
	t.row("finished", ts(p.GetFinishedAt()))
	t.row("unique key", orDash(p.GetUniqueKey()))
	t.row("lease owner", orDash(p.GetLeaseOwner()))
	t.row("cancel requested", strconv.FormatBool(p.GetCancelRequested()))
	t.row("result", orDash(p.GetResultJson()))
	t.row("error", orDash(p.GetError()))
	switch {
	case p.GetParentId() != "":
		t.row("shard", fmt.Sprintf("%d of %d", p.GetShardIndex(), p.GetShardCount()))
		t.row("parent", p.GetParentId())
	case p.GetShardCount() > 0:
		t.row("shards", strconv.Itoa(int(p.GetShardCount())))
	}
	if p.GetWorkflowId() != "" {
		t.row("workflow", p.GetWorkflowId())
		t.row("task", p.GetTask())
		t.row("depends on", orDash(strings.Join(p.GetDependsOn(), " ")))
	}
	if p.GetProgressAt() != nil {
		t.row("progress", strconv.FormatFloat(p.GetProgress()*100, 'f', 0, 64)+"% "+p.GetProgressMessage())
		t.row("progress at", ts(p.GetProgressAt()))
	}
	t.row("labels", orDash(strings.Join(p.GetLabels(), " ")))
	if w := in.WaitingProto(); w != nil {
		msg := w.GetMessage()
		if w.GetReason() == string(job.WaitQueuePaused) { // the API's names QueueService.ResumeQueue
			msg = fmt.Sprintf("queue %q is paused; resume it with 'jobctl queues resume %s' to run its instances", p.GetQueue(), p.GetQueue())
		}
		t.row("waiting", w.GetReason()+": "+msg)
		for _, u := range w.GetUnmatchedNodes() {
			t.row("  node "+u.GetNode(), "has ["+strings.Join(u.GetLabels(), " ")+"], fails ["+strings.Join(u.GetUnmet(), " ")+"]")
		}
	}
	return t.flush()
}

func newInstanceHistoryCmd(g *globals) *cobra.Command {
	var (
		pageSize  int
		pageToken string
	)
	cmd := &cobra.Command{
		Use: "history ID", Short: "Show an instance's state changes, oldest first", Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				p, err := c.ListHistory(ctx, client.NewQuery(client.WithQueryInstanceID(args[0]),
					client.WithQueryLimit(pageSize), client.WithQueryCursor(pageToken)))
				if err != nil {
					return err
				}
				pr := g.printer()
				if pr.structured() {
					return pr.message(&jobkitv1.ListHistoryResponse{Changes: p.Items, NextPageToken: p.Next}, false)
				}
				t := newTable(pr.w, "TIME", "STATE", "ATTEMPT", "NODE", "ERROR")
				for _, ch := range p.Items {
					t.row(ts(ch.GetTime()), stateName(ch.GetState()), strconv.Itoa(int(ch.GetAttempt())), orDash(ch.GetNode()), orDash(short(ch.GetError(), 60)))
				}
				return t.flush()
			})
		},
	}
	cmd.Flags().IntVar(&pageSize, "page-size", 0, "changes per page (0: 100)")
	cmd.Flags().StringVar(&pageToken, "page-token", "", "continue after the page that gave this token")
	return cmd
}

func newInstanceLogsCmd(g *globals) *cobra.Command {
	var (
		follow    bool
		levels    []string
		pageSize  int
		pageToken string
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Show the messages an instance's executor logged (--follow: until it finishes)",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			lv, err := parseLevels(levels)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			pr := g.printer()
			if follow {
				for rec, err := range c.FollowLogs(cmd.Context(), args[0], client.NewQuery(client.WithQueryLevel(lv...))) {
					if err != nil {
						return err
					}
					if pr.structured() {
						err = pr.message(&jobkitv1.FollowLogsResponse{Record: rec}, true)
					} else {
						err = logLine(pr, rec)
					}
					if err != nil {
						return err
					}
				}
				return nil
			}
			ctx, cancel := g.callCtx(cmd.Context())
			defer cancel()
			p, err := c.ListLogs(ctx, client.NewQuery(client.WithQueryInstanceID(args[0]), client.WithQueryLevel(lv...),
				client.WithQueryLimit(pageSize), client.WithQueryCursor(pageToken)))
			if err != nil {
				return err
			}
			if pr.structured() {
				return pr.message(&jobkitv1.ListLogsResponse{Records: p.Items, NextPageToken: p.Next}, false)
			}
			for _, rec := range p.Items {
				if err := logLine(pr, rec); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new records until the instance finishes")
	cmd.Flags().StringSliceVar(&levels, "level", nil, "levels: debug, info, warn, error")
	cmd.Flags().IntVar(&pageSize, "page-size", 0, "records per page (0: 100)")
	cmd.Flags().StringVar(&pageToken, "page-token", "", "continue after the page that gave this token")
	cmd.MarkFlagsMutuallyExclusive("follow", "page-token")
	return cmd
}

// logLine prints a log record as "time level attempt message".
func logLine(pr *printer, rec *jobkitv1.LogRecord) error {
	_, err := pr.w.Write([]byte(ts(rec.GetTime()) + " " + job.LogLevel(rec.GetLevel()).String() + " #" +
		strconv.Itoa(int(rec.GetAttempt())) + " " + rec.GetMessage() + "\n"))
	return err
}

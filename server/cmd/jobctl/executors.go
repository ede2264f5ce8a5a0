package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// Executors as data (issue 22): the flags that set a definition's
// executor, and "definitions test", which runs one instance and shows
// what it did.

// execFlags set a definition's executor spec.
type execFlags struct {
	executor string
	config   string
	wasmFile string
	check    bool
}

func (f *execFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.executor, "executor", "", `run the kind with a built-in executor: webhook, command or wasm ("none" removes it)`)
	fl.StringVar(&f.config, "config", "", `the executor's config, a JSON object ("@file": read it from a file); doc/executors.md`)
	fl.StringVar(&f.wasmFile, "wasm-file", "", "a WebAssembly module to upload; the jobd stores it by content hash and sets the config's module")
	fl.BoolVar(&f.check, "check", false, "only have the server check the definition, as a save would (the executor config too, on a jobd that enables its type), and print it as it would be stored; nothing is stored")
}

// apply sets the executor of d from the flags given, and returns the
// module to upload (nil: none).
func (f *execFlags) apply(cmd *cobra.Command, d *jobkitv1.Definition) ([]byte, error) {
	fl := cmd.Flags()
	if fl.Changed("executor") {
		if f.executor == "none" || f.executor == "" {
			d.Executor = nil
		} else {
			if d.Executor == nil {
				d.Executor = &jobkitv1.ExecutorSpec{}
			}
			d.Executor.Type = f.executor
		}
	}
	if fl.Changed("config") {
		if d.GetExecutor() == nil {
			return nil, usagef("--config needs --executor (or a definition that has one)")
		}
		cfg := f.config
		if name, ok := strings.CutPrefix(cfg, "@"); ok {
			b, err := os.ReadFile(name)
			if err != nil {
				return nil, usagef("--config %s: %v", cfg, err)
			}
			cfg = string(b)
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(cfg), &obj); err != nil {
			return nil, usagef("--config: not a JSON object: %v", err)
		}
		d.Executor.ConfigJson = cfg
	}
	if f.wasmFile == "" {
		return nil, nil
	}
	if d.GetExecutor().GetType() != "wasm" {
		return nil, usagef("--wasm-file goes with --executor wasm")
	}
	b, err := os.ReadFile(f.wasmFile)
	if err != nil {
		return nil, usagef("--wasm-file: %v", err)
	}
	return b, nil
}

// errNotCompleted is the error of a test run that did not complete.
var errNotCompleted = errors.New("the test instance did not complete")

func newDefinitionTestCmd(g *globals) *cobra.Command {
	var (
		args    string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "test KIND",
		Short: "Run one instance of a kind now and show its outcome: state, result (a webhook's response, a command's exit code), error and log",
		Example: `  jobctl definitions test notify --args '["deploy done"]'
  jobctl definitions test backup -o json`,
		Args: exactArgs("KIND"),
		RunE: func(cmd *cobra.Command, pos []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var opts []client.ScheduleOption
			args, err := argsValue(args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if args != "" {
				opts = append(opts, client.WithArgumentsJSON(args))
			}
			ctx, cancel := g.callCtx(cmd.Context())
			in, err := c.ScheduleJob(ctx, pos[0], opts...)
			cancel()
			if err != nil {
				return err
			}
			id := in.Proto().GetId()
			deadline := time.Now().Add(timeout)
			var p *jobkitv1.Instance
			for {
				ctx, cancel := g.callCtx(cmd.Context())
				got, err := c.GetInstance(ctx, id)
				cancel()
				if err != nil {
					return err
				}
				p = got.Proto()
				if job.State(p.GetState()).Final() {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("instance %s still %s after %v (--wait); follow it with jobctl instance get %s --follow", id, stateName(p.GetState()), timeout, id)
				}
				t := time.NewTimer(100 * time.Millisecond)
				select {
				case <-cmd.Context().Done():
					t.Stop()
					return cmd.Context().Err()
				case <-t.C:
				}
			}
			pr := g.printer()
			if pr.structured() {
				if err := pr.message(&jobkitv1.GetInstanceResponse{Instance: p}, false); err != nil {
					return err
				}
			} else {
				lines := []string{
					"instance " + id,
					"state    " + stateName(p.GetState()) + fmt.Sprintf(" (attempt %d)", p.GetAttempt()),
				}
				if r := p.GetResultJson(); r != "" {
					lines = append(lines, "result   "+r)
				}
				if e := p.GetError(); e != "" {
					lines = append(lines, "error    "+e)
				}
				ctx, cancel := g.callCtx(cmd.Context())
				page, err := c.ListLogs(ctx, client.NewQuery(client.WithQueryInstanceID(id)))
				cancel()
				if err == nil && len(page.Items) > 0 {
					lines = append(lines, "log")
					for _, r := range page.Items {
						lines = append(lines, "  "+r.GetMessage())
					}
				}
				if _, err := pr.w.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
					return err
				}
			}
			if job.State(p.GetState()) != job.Completed {
				return fmt.Errorf("%w: %s", errNotCompleted, stateName(p.GetState()))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&args, "args", "", `the arguments as a JSON array: '["a", 1]' ("@FILE": read from a file, "@-": from standard input)`)
	cmd.Flags().DurationVar(&timeout, "wait", time.Minute, "how long to wait for the outcome")
	return cmd
}

// createDefinition calls the API with or without a module; with check,
// it only has the server check the definition.
func createDefinition(ctx context.Context, c *client.Client, d *jobkitv1.Definition, module []byte, check bool) (*jobkitv1.Definition, error) {
	if check {
		return c.Admin().CheckDefinition(ctx, d, module)
	}
	if module != nil {
		return c.Admin().CreateDefinitionWithModule(ctx, d, module)
	}
	return c.Admin().CreateDefinition(ctx, d)
}

// updateDefinition is createDefinition for a stored definition.
func updateDefinition(ctx context.Context, c *client.Client, d *jobkitv1.Definition, ifVersion int64, module []byte, check bool) (*jobkitv1.Definition, error) {
	if check {
		return c.Admin().CheckDefinition(ctx, d, module)
	}
	if module != nil {
		return c.Admin().UpdateDefinitionWithModule(ctx, d, ifVersion, module)
	}
	return c.Admin().UpdateDefinition(ctx, d, ifVersion)
}

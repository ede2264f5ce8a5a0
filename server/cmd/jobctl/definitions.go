package main

import (
	"context"
	"github.com/jobkit/job/api/client"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// readMessage fills m from a JSON file in the API's form ("-": stdin).
func readMessage(g *globals, file string, m proto.Message) error {
	var b []byte
	var err error
	if file == "-" {
		b, err = readAll(g.env.stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return usagef("-f: %v", err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return usagef("-f %s: not a %s in JSON: %v", file, m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// defFlags are the fields of a definition a command line sets.
type defFlags struct {
	file        string
	queue       string
	priority    int
	retries     int
	timeout     time.Duration
	labels      []string
	description string
	convertArgs bool
	uniqueBy    string
	uniqueTTL   time.Duration
	ifVersion   int64
}

func (f *defFlags) add(cmd *cobra.Command, update bool) {
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", `read the definition from this JSON file (a jobkit.v1.Definition; "-": stdin); flags override its fields`)
	fl.StringVar(&f.queue, "queue", "", "queue of its instances")
	fl.IntVar(&f.priority, "priority", 0, "priority")
	fl.IntVar(&f.retries, "retries", 0, "max retries (-1: forever)")
	fl.DurationVar(&f.timeout, "timeout", 0, "bound on each attempt")
	fl.StringSliceVarP(&f.labels, "label", "l", nil, "label requirements a node must satisfy to run it, repeated or comma-separated: region=eu, region=eu|us (one of), region!=eu, gpu (has the key), !gpu (lacks it)")
	fl.StringVar(&f.description, "description", "", "what the kind does")
	fl.BoolVar(&f.convertArgs, "convert-arguments", false, `convert arguments to the executor's parameter types ("42" for an int, JSON text for a struct) where the kind runs`)
	fl.StringVar(&f.uniqueBy, "unique-by", "", "make instances unique by args or key")
	fl.DurationVar(&f.uniqueTTL, "unique-ttl", 0, "how long an instance holds its unique key")
	if update {
		fl.Int64Var(&f.ifVersion, "if-version", 0, "replace only if the stored version is this (default: the version read just before)")
	}
}

// apply sets the fields whose flags were given on d.
func (f *defFlags) apply(cmd *cobra.Command, d *jobkitv1.Definition) error {
	fl := cmd.Flags()
	if fl.Changed("queue") {
		d.Queue = f.queue
	}
	if fl.Changed("priority") {
		d.Priority = int32(f.priority)
	}
	if fl.Changed("retries") {
		d.MaxRetries = int32(f.retries)
	}
	if fl.Changed("timeout") {
		d.Timeout = durationpb.New(f.timeout)
	}
	if fl.Changed("label") {
		d.Labels = f.labels
	}
	if fl.Changed("description") {
		d.Description = f.description
	}
	if fl.Changed("convert-arguments") {
		d.ConvertArguments = f.convertArgs
	}
	if fl.Changed("unique-by") || fl.Changed("unique-ttl") {
		if d.Unique == nil {
			d.Unique = &jobkitv1.UniquePolicy{}
		}
		switch strings.ToLower(f.uniqueBy) {
		case "":
		case "args":
			d.Unique.By = jobkitv1.UniqueBy_UNIQUE_BY_ARGS
		case "key":
			d.Unique.By = jobkitv1.UniqueBy_UNIQUE_BY_KEY
		default:
			return usagef("--unique-by %q: want args or key", f.uniqueBy)
		}
		if fl.Changed("unique-ttl") {
			d.Unique.Ttl = durationpb.New(f.uniqueTTL)
		}
	}
	return nil
}

func newDefinitionsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "definitions", Aliases: []string{"defs"}, Short: "Create, show, list, update and delete job definitions (kinds' policies as data)"}
	cmd.AddCommand(newDefinitionCreateCmd(g), &cobra.Command{
		Use: "get KIND", Short: "Show a definition", Args: exactArgs("KIND"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				d, err := c.Admin().GetDefinition(ctx, args[0])
				if err != nil {
					return err
				}
				return printDefinitions(g, &jobkitv1.GetDefinitionResponse{Definition: d}, d)
			})
		},
	}, newDefinitionListCmd(g), newDefinitionUpdateCmd(g), newDefinitionDeleteCmd(g), newDefinitionTestCmd(g))
	return cmd
}

func newDefinitionCreateCmd(g *globals) *cobra.Command {
	var cf defFlags
	var cx execFlags
	create := &cobra.Command{
		Use: "create KIND", Short: "Store a new definition", Args: exactArgs("KIND"),
		Example: `  jobctl definitions create mail --queue mail --retries 5 --timeout 30s
  jobctl definitions create notify --executor webhook --config '{"url": "https://hooks.example.com/x", "secret_ref": "hook-key"}'
  jobctl definitions create greet --executor wasm --wasm-file greet.wasm`,
		RunE: func(cmd *cobra.Command, args []string) error {
			d := &jobkitv1.Definition{}
			if cf.file != "" {
				if err := readMessage(g, cf.file, d); err != nil {
					return err
				}
			}
			d.Kind = args[0]
			if err := cf.apply(cmd, d); err != nil {
				return err
			}
			module, err := cx.apply(cmd, d)
			if err != nil {
				return err
			}
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				got, err := createDefinition(ctx, c, d, module, cx.check)
				if err != nil {
					return err
				}
				return printDefinitions(g, &jobkitv1.CreateDefinitionResponse{Definition: got}, got)
			})
		},
	}
	cf.add(create, false)
	cx.add(create)
	return create
}

func newDefinitionUpdateCmd(g *globals) *cobra.Command {
	var uf defFlags
	var ux execFlags
	update := &cobra.Command{
		Use: "update KIND", Short: "Change a stored definition (the fields given; the rest kept)", Args: exactArgs("KIND"),
		Example: `  jobctl definitions update mail --retries 10`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				d, err := c.Admin().GetDefinition(ctx, args[0])
				if err != nil {
					return err
				}
				ifVersion := d.GetVersion()
				if cmd.Flags().Changed("if-version") {
					ifVersion = uf.ifVersion
				}
				if uf.file != "" {
					d = &jobkitv1.Definition{}
					if err := readMessage(g, uf.file, d); err != nil {
						return err
					}
				}
				d.Kind = args[0]
				if err := uf.apply(cmd, d); err != nil {
					return err
				}
				module, err := ux.apply(cmd, d)
				if err != nil {
					return err
				}
				got, err := updateDefinition(ctx, c, d, ifVersion, module, ux.check)
				if err != nil {
					return err
				}
				return printDefinitions(g, &jobkitv1.UpdateDefinitionResponse{Definition: got}, got)
			})
		},
	}
	uf.add(update, true)
	ux.add(update)
	return update
}

func newDefinitionListCmd(g *globals) *cobra.Command {
	var pg pageFlags
	list := &cobra.Command{
		Use: "list", Short: "List definitions by kind", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				page, err := c.Admin().ListDefinitions(ctx, pg.size, pg.token)
				if err != nil {
					return err
				}
				ds, next := page.Items, page.Next
				return printDefinitions(g, &jobkitv1.ListDefinitionsResponse{Definitions: ds, NextPageToken: next}, ds...)
			})
		},
	}
	pg.add(list, "definitions")
	return list
}

func newDefinitionDeleteCmd(g *globals) *cobra.Command {
	var delIf int64
	del := &cobra.Command{
		Use: "delete KIND", Short: "Delete a definition", Args: exactArgs("KIND"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.Admin().DeleteDefinition(ctx, args[0], delIf); err != nil {
					return err
				}
				return g.printer().done(&jobkitv1.DeleteDefinitionResponse{}, "deleted definition "+args[0])
			})
		},
	}
	del.Flags().Int64Var(&delIf, "if-version", 0, "delete only if the stored version is this")
	return del
}

func printDefinitions(g *globals, res protoMsg, ds ...*jobkitv1.Definition) error {
	pr := g.printer()
	if pr.structured() {
		return pr.message(res, false)
	}
	// The EXECUTOR column (issue 22) only when a definition has one.
	withExec := false
	for _, d := range ds {
		withExec = withExec || d.GetExecutor() != nil
	}
	cols := []string{"KIND", "QUEUE", "PRIORITY", "RETRIES", "TIMEOUT", "LABELS", "VERSION"}
	if withExec {
		cols = append(cols, "EXECUTOR")
	}
	t := newTable(pr.w, cols...)
	for _, d := range ds {
		row := []string{d.GetKind(), d.GetQueue(), strconv.Itoa(int(d.GetPriority())), strconv.Itoa(int(d.GetMaxRetries())),
			dur(d.GetTimeout()), orDash(strings.Join(d.GetLabels(), ",")), i64(d.GetVersion())}
		if withExec {
			row = append(row, orDash(d.GetExecutor().GetType()))
		}
		t.row(row...)
	}
	return t.flush()
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// workflowTemplateExample is a template file, as `workflow template put
// --help` shows it.
const workflowTemplateExample = `name: images
description: resize an image and publish it
params:
  - name: url                        # required: every run gives it
  - name: width
    default: 64
tasks:
  - name: download
    kind: http.get
    args: ["${url}"]                 # "${p}" alone: the value, of any JSON type
  - name: resize
    kind: image.resize
    args: ["${width}", "w${width}"]  # inside a string: its text; $${ writes ${
    after: [download]
    timeout: 5m
  - name: publish
    kind: cdn.publish
    after: [resize]
    on_dependency_failure: run`

func newWorkflowTemplateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "template", Aliases: []string{"templates", "tpl"},
		Short: "Store workflow templates (workflows as data, with parameters) and run them"}
	cmd.AddCommand(newTemplatePutCmd(g), newTemplateGetCmd(g), newTemplateListCmd(g), newTemplateDeleteCmd(g), newTemplateRunCmd(g))
	return cmd
}

// templateFileJSON reads a template file, YAML or JSON, as JSON.
func templateFileJSON(g *globals, file string) (string, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = readAll(g.env.stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return "", usagef("-f: %v", err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return "", usagef("template file %s: not YAML or JSON: %v", file, err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return "", usagef("template file %s is not a mapping; give name, params and tasks (see jobctl workflow template put --help)", file)
	}
	j, err := json.Marshal(doc)
	if err != nil {
		return "", usagef("template file %s: %v", file, err)
	}
	return string(j), nil
}

func newTemplatePutCmd(g *globals) *cobra.Command {
	var (
		file      string
		ifVersion int64
		create    bool
	)
	put := &cobra.Command{
		Use: "put -f FILE", Short: `Store a workflow template from a YAML or JSON file ("-": stdin), under its name`, Args: noArgs,
		Long: "Store a workflow template: a workflow file (see jobctl workflow create --help) with params, whose\n" +
			"values a run fills in where args or metadata name them as ${name}. The server checks it (names,\n" +
			"dependencies, cycles, parameters) and stores nothing when it is wrong.\n\n" + workflowTemplateExample,
		Example: `  jobctl workflow template put -f images.yaml
  jobctl workflow template put -f images.yaml --create          # refuse a name taken
  jobctl workflow template put -f images.yaml --if-version 3    # replace only version 3`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usagef("workflow template put: -f FILE is required; give the template file (see --help)")
			}
			j, err := templateFileJSON(g, file)
			if err != nil {
				return err
			}
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				t, err := cl.Admin().PutWorkflowTemplate(ctx, j, ifVersion, create)
				if err != nil {
					return err
				}
				return printTemplates(g, &jobkitv1.PutWorkflowTemplateResponse{Template: t}, t)
			})
		},
	}
	put.Flags().StringVarP(&file, "file", "f", "", `the template file, YAML or JSON ("-": stdin)`)
	put.Flags().Int64Var(&ifVersion, "if-version", 0, "replace only this version (0: whatever is stored)")
	put.Flags().BoolVar(&create, "create", false, "create only: fail when a template has the name")
	return put
}

func newTemplateGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "get NAME", Short: "Show a workflow template (-o yaml or json: the whole template)", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				t, err := cl.Admin().GetWorkflowTemplate(ctx, args[0])
				if err != nil {
					return err
				}
				pr := g.printer()
				if pr.structured() {
					return pr.message(&jobkitv1.GetWorkflowTemplateResponse{Template: t}, false)
				}
				y, err := jsonToYAML([]byte(t.GetTemplateJson()))
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(pr.w, "# version %d, updated %s\n%s", t.GetVersion(), ts(t.GetUpdatedAt()), y)
				return err
			})
		},
	}
}

func newTemplateListCmd(g *globals) *cobra.Command {
	var pg pageFlags
	list := &cobra.Command{
		Use: "list", Short: "List the workflow templates by name", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				page, err := cl.Admin().ListWorkflowTemplates(ctx, pg.size, pg.token)
				if err != nil {
					return err
				}
				if err := printTemplates(g, &jobkitv1.ListWorkflowTemplatesResponse{Templates: page.Items, NextPageToken: page.Next}, page.Items...); err != nil {
					return err
				}
				if page.Next != "" && !g.printer().structured() {
					_, err = fmt.Fprintf(g.printer().w, "next page: --page-token %s\n", page.Next)
				}
				return err
			})
		},
	}
	pg.add(list, "templates")
	return list
}

func newTemplateDeleteCmd(g *globals) *cobra.Command {
	var ifVersion int64
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete a workflow template (the workflows it ran stay)", Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				if err := cl.Admin().DeleteWorkflowTemplate(ctx, args[0], ifVersion); err != nil {
					return err
				}
				_, err := fmt.Fprintf(g.printer().w, "deleted workflow template %s\n", args[0])
				return err
			})
		},
	}
	del.Flags().Int64Var(&ifVersion, "if-version", 0, "delete only this version (0: whatever is stored)")
	return del
}

// templateParams reads --param name=value flags into a JSON object: a
// value that is JSON (64, true, "x", [1]) is taken as such, any other as
// a string.
func templateParams(params []string, paramsJSON string) (string, error) {
	if paramsJSON != "" && len(params) > 0 {
		return "", usagef("--params-json with --param; give one of them")
	}
	if len(params) == 0 {
		return paramsJSON, nil
	}
	obj := map[string]json.RawMessage{}
	for _, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return "", usagef("--param %q; write --param name=value", p)
		}
		if json.Valid([]byte(v)) {
			obj[k] = json.RawMessage(v)
		} else {
			b, _ := json.Marshal(v)
			obj[k] = b
		}
	}
	b, err := json.Marshal(obj)
	return string(b), err
}

func newTemplateRunCmd(g *globals) *cobra.Command {
	var (
		params     []string
		paramsJSON string
		id         string
	)
	run := &cobra.Command{
		Use: "run NAME [--param name=value]...", Short: "Create a workflow from a stored template with parameters", Args: exactArgs("NAME"),
		Example: `  jobctl workflow template run images --param url=https://example.org/a.png --param width=128
  jobctl workflow template run images --params-json '{"url": "https://example.org/a.png"}' --id images-2026-11-29`,
		RunE: func(cmd *cobra.Command, args []string) error {
			pj, err := templateParams(params, paramsJSON)
			if err != nil {
				return err
			}
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				w, err := cl.RunWorkflowTemplate(ctx, args[0], pj, id)
				if err != nil {
					return err
				}
				return printWorkflow(g, &jobkitv1.RunWorkflowTemplateResponse{Workflow: w}, w)
			})
		},
	}
	run.Flags().StringArrayVarP(&params, "param", "p", nil, `a parameter, name=value (a JSON value, else a string); repeat for each`)
	run.Flags().StringVar(&paramsJSON, "params-json", "", `the parameters as one JSON object`)
	run.Flags().StringVar(&id, "id", "", "the workflow's ID (default: a new UUID); a repeated run with the same ID stores nothing twice")
	return run
}

// printTemplates prints res (json, yaml) or a table of tps.
func printTemplates(g *globals, res protoMsg, tps ...*jobkitv1.WorkflowTemplate) error {
	pr := g.printer()
	if pr.structured() {
		return pr.message(res, false)
	}
	t := newTable(pr.w, "NAME", "TASKS", "PARAMS", "VERSION", "UPDATED")
	for _, tp := range tps {
		var body struct {
			Params []struct {
				Name    string          `json:"name"`
				Default json.RawMessage `json:"default"`
			} `json:"params"`
			Tasks []json.RawMessage `json:"tasks"`
		}
		_ = json.Unmarshal([]byte(tp.GetTemplateJson()), &body)
		var ps []string
		for _, p := range body.Params {
			if p.Default == nil {
				ps = append(ps, p.Name+"*")
			} else {
				ps = append(ps, p.Name)
			}
		}
		t.row(tp.GetName(), fmt.Sprint(len(body.Tasks)), orDash(strings.Join(ps, ",")), i64(tp.GetVersion()), ts(tp.GetUpdatedAt()))
	}
	return t.flush()
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

func newWorkflowsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workflows", Aliases: []string{"workflow", "wf"},
		Short: "Create workflows (tasks with dependencies) from a file or a stored template, show, list and cancel them, retry a failed task"}
	cmd.AddCommand(newWorkflowCreateCmd(g), newWorkflowGetCmd(g), newWorkflowListCmd(g), newWorkflowCancelCmd(g), newWorkflowRetryCmd(g), newWorkflowTemplateCmd(g))
	return cmd
}

// workflowFileExample is a workflow file, as `workflow create --help`
// shows it.
const workflowFileExample = `name: images
on_dependency_failure: cancel        # cancel (default), run or cancel-workflow
tasks:
  - name: download
    kind: http.get
    args: ["https://example.org/a.png"]
  - name: small
    kind: image.resize
    args: [64]
    after: [download]
  - name: publish
    kind: cdn.publish
    after: [small]
    on_dependency_failure: run
    max_retries: 5
    queue: slow`

// taskJobFields are the fields a task of a workflow file may give beside
// name, after and on_dependency_failure: those of a ScheduleRequest.
var taskJobFields = []string{"kind", "args", "args_json", "priority", "max_retries", "timeout", "queue", "metadata", "run_at", "delay", "jitter"}

// depFailureNames are the file's and flags' names of the policies.
var depFailureNames = map[string]jobkitv1.DependencyFailure{
	"cancel": jobkitv1.DependencyFailure_DEPENDENCY_FAILURE_CANCEL, "run": jobkitv1.DependencyFailure_DEPENDENCY_FAILURE_RUN,
	"cancel-workflow": jobkitv1.DependencyFailure_DEPENDENCY_FAILURE_CANCEL_WORKFLOW,
}

// parseWorkflowFile reads a workflow file, YAML or JSON (see
// workflowFileExample): each task's kind, args and options sit beside its
// name; "args" is the arguments as a list and "after" the dependencies.
// A jobkit.v1.CreateWorkflowRequest in JSON (tasks with "job" and
// "dependsOn") is read as well.
func parseWorkflowFile(name string, b []byte) (*jobkitv1.CreateWorkflowRequest, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, usagef("workflow file %s: not YAML or JSON: %v", name, err)
	}
	if doc == nil {
		return nil, usagef("workflow file %s is empty; give a name and tasks (see jobctl workflow create --help)", name)
	}
	fix := func(field string, v any) (any, error) {
		s, ok := v.(string)
		if !ok {
			return v, nil
		}
		if p, ok := depFailureNames[s]; ok {
			return p.String(), nil
		}
		if _, ok := jobkitv1.DependencyFailure_value[s]; ok {
			return s, nil
		}
		return nil, usagef("workflow file %s: %s %q; want cancel, run or cancel-workflow", name, field, s)
	}
	if v, ok := doc["on_dependency_failure"]; ok {
		var err error
		if doc["on_dependency_failure"], err = fix("on_dependency_failure", v); err != nil {
			return nil, err
		}
	}
	tasks, _ := doc["tasks"].([]any)
	for i, t := range tasks {
		task, ok := t.(map[string]any)
		if !ok {
			return nil, usagef("workflow file %s: tasks[%d] is not a mapping; give name, kind, args and after", name, i)
		}
		what := fmt.Sprintf("tasks[%d] (%v)", i, task["name"])
		jobMsg, _ := task["job"].(map[string]any)
		for _, f := range taskJobFields {
			v, ok := task[f]
			if !ok {
				continue
			}
			if jobMsg == nil {
				jobMsg = map[string]any{}
			}
			delete(task, f)
			if f == "args" {
				list, ok := v.([]any)
				if !ok {
					return nil, usagef("workflow file %s: %s: args is not a list; write args: [1, \"a\"]", name, what)
				}
				b, err := json.Marshal(list)
				if err != nil {
					return nil, usagef("workflow file %s: %s: args: %v", name, what, err)
				}
				f, v = "args_json", string(b)
			}
			jobMsg[f] = v
		}
		if jobMsg != nil {
			task["job"] = jobMsg
		}
		if v, ok := task["after"]; ok {
			delete(task, "after")
			task["depends_on"] = v
		}
		if v, ok := task["on_dependency_failure"]; ok {
			var err error
			if task["on_dependency_failure"], err = fix(what+" on_dependency_failure", v); err != nil {
				return nil, err
			}
		}
	}
	j, err := json.Marshal(doc)
	if err != nil {
		return nil, usagef("workflow file %s: %v", name, err)
	}
	req := &jobkitv1.CreateWorkflowRequest{}
	if err := protojson.Unmarshal(j, req); err != nil {
		return nil, usagef("workflow file %s: %v (a task has name, kind, args, after, on_dependency_failure, priority, max_retries, timeout, queue, metadata, run_at, delay, jitter)", name, err)
	}
	if req.GetName() == "" {
		return nil, usagef("workflow file %s has no name; add name: <workflow name>", name)
	}
	if len(req.GetTasks()) == 0 {
		return nil, usagef("workflow file %s has no tasks; add tasks: with at least one (name, kind)", name)
	}
	return req, nil
}

func newWorkflowCreateCmd(g *globals) *cobra.Command {
	var file, id string
	create := &cobra.Command{
		Use: "create -f FILE", Short: `Create a workflow from a YAML or JSON file ("-": stdin)`, Args: noArgs,
		Long: "Create a workflow from a YAML or JSON file: a name and its tasks, each with a name, a kind, its\n" +
			"arguments (args, a list), the tasks it waits for (after) and the options of its instance.\n\n" + workflowFileExample,
		Example: `  jobctl workflow create -f images.yaml
  jobctl workflow create -f images.yaml --id nightly-2026-11-29   # a repeat stores nothing twice`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usagef("workflow create: -f FILE is required; give the workflow file (see --help)")
			}
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
			req, err := parseWorkflowFile(file, b)
			if err != nil {
				return err
			}
			if id != "" {
				req.Id = id
			}
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				w, err := cl.CreateWorkflow(ctx, req)
				if err != nil {
					return err
				}
				return printWorkflow(g, &jobkitv1.CreateWorkflowResponse{Workflow: w}, w)
			})
		},
	}
	create.Flags().StringVarP(&file, "file", "f", "", `the workflow file, YAML or JSON ("-": stdin)`)
	create.Flags().StringVar(&id, "id", "", "the workflow's ID (default: a new UUID); a repeated create with the same ID stores nothing twice")
	return create
}

func newWorkflowGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "get ID", Short: "Show a workflow: its state and each task's state, dependencies and instance", Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				w, err := cl.GetWorkflow(ctx, args[0])
				if err != nil {
					return err
				}
				return printWorkflow(g, &jobkitv1.GetWorkflowResponse{Workflow: w}, w)
			})
		},
	}
}

// workflowStateNames are the command line's names of workflow states.
var workflowStateNames = map[string]jobkitv1.WorkflowState{
	"pending": jobkitv1.WorkflowState_WORKFLOW_STATE_PENDING, "running": jobkitv1.WorkflowState_WORKFLOW_STATE_RUNNING,
	"completed": jobkitv1.WorkflowState_WORKFLOW_STATE_COMPLETED, "failed": jobkitv1.WorkflowState_WORKFLOW_STATE_FAILED,
	"canceled": jobkitv1.WorkflowState_WORKFLOW_STATE_CANCELED,
}

func workflowStateName(s jobkitv1.WorkflowState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_STATE_"))
}

func newWorkflowListCmd(g *globals) *cobra.Command {
	var (
		pg     pageFlags
		states []string
		name   string
	)
	list := &cobra.Command{
		Use: "list", Short: "List workflows, newest first, with their task counts", Args: noArgs,
		Example: `  jobctl workflow list --state failed --name images`,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &jobkitv1.ListWorkflowsRequest{PageSize: int32(pg.size), PageToken: pg.token, Name: name}
			for _, s := range states {
				for _, s := range strings.Split(s, ",") {
					st, ok := workflowStateNames[strings.ToLower(strings.TrimSpace(s))]
					if !ok {
						return usagef("--state %q; want pending, running, completed, failed or canceled", s)
					}
					req.States = append(req.States, st)
				}
			}
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				page, err := cl.ListWorkflows(ctx, req)
				if err != nil {
					return err
				}
				pr := g.printer()
				if pr.structured() {
					return pr.message(&jobkitv1.ListWorkflowsResponse{Workflows: page.Items, NextPageToken: page.Next}, false)
				}
				t := newTable(pr.w, "ID", "NAME", "STATE", "TASKS", "DONE", "FAILED", "CREATED", "ENDED")
				for _, w := range page.Items {
					c := w.GetTaskCounts()
					total := c.GetCreated() + c.GetScheduled() + c.GetProcessing() + c.GetCompleted() + c.GetTerminated() + c.GetCanceled() + c.GetTimedOut()
					t.row(w.GetId(), w.GetName(), workflowStateName(w.GetState()), fmt.Sprint(total), fmt.Sprint(c.GetCompleted()),
						fmt.Sprint(c.GetTerminated()+c.GetCanceled()+c.GetTimedOut()), ts(w.GetCreatedAt()), orDash(ts(w.GetEndedAt())))
				}
				if err := t.flush(); err != nil {
					return err
				}
				if page.Next != "" {
					_, err = fmt.Fprintf(pr.w, "next page: --page-token %s\n", page.Next)
				}
				return err
			})
		},
	}
	pg.add(list, "workflows")
	list.Flags().StringArrayVar(&states, "state", nil, "only workflows in these states: pending, running, completed, failed, canceled (repeat or comma-separate)")
	list.Flags().StringVar(&name, "name", "", "only workflows of this name")
	return list
}

func newWorkflowCancelCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "cancel ID", Short: "Cancel a workflow: its pending and running tasks", Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				w, err := cl.CancelWorkflow(ctx, args[0])
				if err != nil {
					return err
				}
				return printWorkflow(g, &jobkitv1.CancelWorkflowResponse{Workflow: w}, w)
			})
		},
	}
}

func newWorkflowRetryCmd(g *globals) *cobra.Command {
	var reset bool
	retry := &cobra.Command{
		Use: "retry ID TASK", Short: "Retry a task that failed; the dependents its failure canceled wait for it again", Args: exactArgs("ID", "TASK"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, func(ctx context.Context, cl *client.Client) error {
				w, err := cl.RetryWorkflowTask(ctx, args[0], args[1], reset)
				if err != nil {
					return err
				}
				return printWorkflow(g, &jobkitv1.RetryWorkflowTaskResponse{Workflow: w}, w)
			})
		},
	}
	retry.Flags().BoolVar(&reset, "reset-attempts", false, "count the task's attempts from zero again")
	return retry
}

// printWorkflow prints res (json, yaml) or w as a table of its tasks,
// each with the names of the tasks it waits for.
func printWorkflow(g *globals, res proto.Message, w *jobkitv1.Workflow) error {
	pr := g.printer()
	if pr.structured() {
		return pr.message(res, false)
	}
	fmt.Fprintf(pr.w, "workflow %s (%s): %s\n", w.GetName(), w.GetId(), workflowStateName(w.GetState()))
	if e := w.GetError(); e != "" {
		fmt.Fprintf(pr.w, "error: %s\n", e)
	}
	names := map[string]string{}
	for _, t := range w.GetTasks() {
		names[t.GetId()] = t.GetTask()
	}
	t := newTable(pr.w, "TASK", "STATE", "AFTER", "KIND", "INSTANCE", "ERROR")
	for _, in := range w.GetTasks() {
		var after []string
		for _, d := range in.GetDependsOn() {
			if n, ok := names[d]; ok && !strings.HasPrefix(n, "$") {
				after = append(after, n)
			}
		}
		slices.Sort(after)
		t.row(in.GetTask(), stateName(in.GetState()), orDash(strings.Join(after, ",")), in.GetKind(), in.GetId(), orDash(firstLine(in.GetError())))
	}
	return t.flush()
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestWorkflows creates workflows from a YAML and a JSON file through
// jobctl against a real server, reads, lists, cancels and retries them,
// and walks the bad files.
func TestWorkflows(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, sk storeKind) { workflows(t, newTestServerOn(t, false, sk)) })
}

// waitWorkflowCLI reads the workflow through jobctl until it is in state.
func waitWorkflowCLI(t *testing.T, s *testServer, id string, want jobkitv1.WorkflowState) *jobkitv1.Workflow {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var res jobkitv1.GetWorkflowResponse
		s.okJSON(t, &res, "workflow", "get", id)
		if res.GetWorkflow().GetState() == want {
			return res.GetWorkflow()
		}
		if time.Now().After(deadline) {
			t.Fatalf("workflow %s is %v, want %v", id, res.GetWorkflow().GetState(), want)
		}
		time.Sleep(20 * time.Millisecond) // polling a CLI: each call is a process-like run
	}
}

func workflows(t *testing.T, s *testServer) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	yml := write("sums.yaml", `name: sums
tasks:
  - name: a
    kind: sum
    args: [1, 2]
  - name: b
    kind: sum
    args: [3, 4]
    after: [a]
    max_retries: 2
  - name: c
    kind: sum
    args: [5, 6]
    after: [a, b]
    on_dependency_failure: run
`)
	var cr jobkitv1.CreateWorkflowResponse
	s.okJSON(t, &cr, "workflow", "create", "-f", yml)
	w := cr.GetWorkflow()
	if w.GetName() != "sums" || len(w.GetTasks()) != 3 {
		t.Fatalf("created %v", w)
	}
	done := waitWorkflowCLI(t, s, w.GetId(), jobkitv1.WorkflowState_WORKFLOW_STATE_COMPLETED)
	for _, in := range done.GetTasks() {
		if in.GetTask() == "b" && in.GetMaxRetries() != 2 {
			t.Errorf("b has max_retries %d, want 2 from the file", in.GetMaxRetries())
		}
	}
	table := s.ok(t, "workflow", "get", w.GetId())
	for _, want := range []string{"workflow sums", "completed", "TASK", "a,b"} {
		if !strings.Contains(table, want) {
			t.Errorf("workflow get lacks %q:\n%s", want, table)
		}
	}

	// A JSON file (the API's own request shape), a task canceled, a retry
	// re-arms its dependent, then cancel the workflow.
	js := write("block.json", `{"name": "blocked", "tasks": [
		{"name": "wait", "job": {"kind": "block"}},
		{"name": "after", "job": {"kind": "sum", "argsJson": "[1, 1]"}, "dependsOn": ["wait"]}]}`)
	s.okJSON(t, &cr, "workflow", "create", "-f", js, "--id", "blocked-1")
	if cr.GetWorkflow().GetId() != "blocked-1" {
		t.Fatalf("--id: created %s", cr.GetWorkflow().GetId())
	}
	var wait string
	for _, in := range cr.GetWorkflow().GetTasks() {
		if in.GetTask() == "wait" {
			wait = in.GetId()
		}
	}
	waitWorkflowCLI(t, s, "blocked-1", jobkitv1.WorkflowState_WORKFLOW_STATE_RUNNING)
	s.ok(t, "instance", "cancel", wait)
	waitWorkflowCLI(t, s, "blocked-1", jobkitv1.WorkflowState_WORKFLOW_STATE_FAILED)
	out := s.ok(t, "workflow", "retry", "blocked-1", "wait")
	if !strings.Contains(out, "running") && !strings.Contains(out, "pending") {
		t.Errorf("retry printed:\n%s", out)
	}
	var cancel jobkitv1.CancelWorkflowResponse
	s.okJSON(t, &cancel, "workflow", "cancel", "blocked-1")
	if cancel.GetWorkflow().GetState() != jobkitv1.WorkflowState_WORKFLOW_STATE_CANCELED {
		t.Fatalf("cancel: %v", cancel.GetWorkflow().GetState())
	}

	// List, as a table and filtered.
	list := s.ok(t, "workflow", "list")
	if !strings.Contains(list, "sums") || !strings.Contains(list, "blocked-1") || !strings.Contains(list, "canceled") {
		t.Errorf("workflow list:\n%s", list)
	}
	var lr jobkitv1.ListWorkflowsResponse
	s.okJSON(t, &lr, "workflow", "list", "--state", "completed")
	if len(lr.GetWorkflows()) != 1 || lr.GetWorkflows()[0].GetName() != "sums" {
		t.Fatalf("list --state completed: %v", lr.GetWorkflows())
	}

	// Bad input: usage errors before any call, the server's refusals after.
	for _, c := range []struct {
		body string
		code int
		says string
	}{
		{"name: x\n", exitUsage, "no tasks"},
		{"tasks:\n  - {name: a, kind: sum}\n", exitUsage, "no name"},
		{"name: x\ntasks: [{name: a, kind: sum, args: 3}]\n", exitUsage, "args: [1"},
		{"name: x\ntasks: [{name: a, kind: sum, colour: red}]\n", exitUsage, "colour"},
		{"name: x\ntasks: [{name: a, kind: sum, on_dependency_failure: sometimes}]\n", exitUsage, "cancel, run or cancel-workflow"},
		{"name: x\ntasks: [{name: a, kind: sum, args: [1, 2], after: [b]}, {name: b, kind: sum, args: [1, 2], after: [a]}]\n", exitUsage, "cycle"},
		{"name: x\ntasks: [{name: a, kind: nosuchkind}]\n", exitNotFound, "nosuchkind"},
		{"[1, 2", exitUsage, "not YAML or JSON"},
	} {
		r := s.jobctl(t, "workflow", "create", "-f", write("bad.yaml", c.body))
		if r.code != c.code || !strings.Contains(r.stderr, c.says) {
			t.Errorf("create from %q: exit %d (want %d), stderr lacks %q:\n%s", c.body, r.code, c.code, c.says, r.stderr)
		}
	}
	for _, args := range [][]string{{"workflow", "create"}, {"workflow", "list", "--state", "done"}, {"workflow", "retry", "blocked-1"}} {
		if r := s.jobctl(t, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
	if r := s.jobctl(t, "workflow", "get", "no-such-workflow"); r.code != exitNotFound {
		t.Errorf("get of an unknown workflow: exit %d, want %d\n%s", r.code, exitNotFound, r.stderr)
	}
	if r := s.jobctl(t, "workflow", "retry", "blocked-1", "nope"); r.code != exitNotFound || !strings.Contains(r.stderr, `"wait"`) {
		t.Errorf("retry of an unknown task: exit %d\n%s", r.code, r.stderr)
	}
}

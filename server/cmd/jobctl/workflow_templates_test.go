package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestWorkflowTemplates stores a template from a YAML file through jobctl
// against a real server, lists and shows it, runs it with parameters, and
// walks the bad input.
func TestWorkflowTemplates(t *testing.T) {
	t.Parallel()
	s := newTestServerOn(t, false, memdb)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := write("sums.yaml", `name: sums
description: two sums
params:
  - name: x
  - name: y
    default: 10
tasks:
  - name: a
    kind: sum
    args: ["${x}", "${y}"]
  - name: b
    kind: sum
    args: ["${x}", 1]
    after: [a]
    max_retries: 2
`)
	var pr jobkitv1.PutWorkflowTemplateResponse
	s.okJSON(t, &pr, "workflow", "template", "put", "-f", file, "--create")
	if pr.GetTemplate().GetName() != "sums" || pr.GetTemplate().GetVersion() != 1 {
		t.Fatalf("put: %v", pr.GetTemplate())
	}
	if r := s.jobctl(t, "workflow", "template", "put", "-f", file, "--create"); r.code != exitConflict || !strings.Contains(r.stderr, "without create_only") {
		t.Errorf("put --create of a name taken: exit %d, want %d\n%s", r.code, exitConflict, r.stderr)
	}
	list := s.ok(t, "workflow", "template", "list")
	for _, want := range []string{"NAME", "sums", "x*,y"} {
		if !strings.Contains(list, want) {
			t.Errorf("template list lacks %q:\n%s", want, list)
		}
	}
	if got := s.ok(t, "workflow", "template", "get", "sums"); !strings.Contains(got, "${x}") || !strings.Contains(got, "description: two sums") {
		t.Errorf("template get:\n%s", got)
	}

	var rr jobkitv1.RunWorkflowTemplateResponse
	s.okJSON(t, &rr, "workflow", "template", "run", "sums", "--param", "x=5", "--id", "sums-5")
	done := waitWorkflowCLI(t, s, "sums-5", jobkitv1.WorkflowState_WORKFLOW_STATE_COMPLETED)
	for _, in := range done.GetTasks() {
		want := map[string]string{"a": "[15]", "b": "[6]"}[in.GetTask()]
		if in.GetResultJson() != want {
			t.Errorf("task %s returned %s, want %s", in.GetTask(), in.GetResultJson(), want)
		}
	}
	s.okJSON(t, &rr, "workflow", "template", "run", "sums", "--params-json", `{"x": 1, "y": 2}`)
	waitWorkflowCLI(t, s, rr.GetWorkflow().GetId(), jobkitv1.WorkflowState_WORKFLOW_STATE_COMPLETED)

	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"put"}, exitUsage, "-f FILE is required"},
		{[]string{"put", "-f", write("bad.yaml", "[1]")}, exitUsage, "not a mapping"},
		{[]string{"put", "-f", write("undeclared.yaml", "name: u\ntasks: [{name: a, kind: sum, args: [\"${z}\", 1]}]\n")}, exitUsage, "add it to params"},
		{[]string{"put", "-f", write("field.yaml", "name: u\ntasks: [{name: a, kind: sum, colour: red}]\n")}, exitUsage, "colour"},
		{[]string{"run", "sums"}, exitUsage, `parameter "x" is required`},
		{[]string{"run", "sums", "--param", "z=1", "--param", "x=1"}, exitUsage, `no parameter "z"`},
		{[]string{"run", "sums", "--param", "x"}, exitUsage, "name=value"},
		{[]string{"run", "nope"}, exitNotFound, "nope"},
	} {
		r := s.jobctl(t, append([]string{"workflow", "template"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%v: exit %d (want %d), stderr lacks %q:\n%s", c.args, r.code, c.code, c.says, r.stderr)
		}
	}
	s.ok(t, "workflow", "template", "delete", "sums")
	if r := s.jobctl(t, "workflow", "template", "get", "sums"); r.code != exitNotFound {
		t.Errorf("get after delete: exit %d, want %d", r.code, exitNotFound)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestTriggerOfWorkflowTemplate creates a trigger that runs a stored
// workflow template with parameters through jobctl against a real
// server, shows it, runs it once, and walks the bad input.
func TestTriggerOfWorkflowTemplate(t *testing.T) {
	t.Parallel()
	s := newTestServerOn(t, false, memdb)
	file := filepath.Join(t.TempDir(), "sums.yaml")
	if err := os.WriteFile(file, []byte("name: sums\nparams:\n  - name: x\ntasks:\n  - name: a\n    kind: sum\n    args: [\"${x}\", 1]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.ok(t, "workflow", "template", "put", "-f", file, "--create")
	var cr jobkitv1.CreateTriggerResponse
	s.okJSON(t, &cr, "triggers", "create", "nightly-sums", "--workflow-template", "sums", "--param", "x=41", "--cron", "0 3 * * *", "--paused")
	if got := cr.GetTrigger(); got.GetWorkflowTemplate() != "sums" || got.GetParamsJson() != `{"x":41}` || got.GetKind() != "" {
		t.Fatalf("created: template %q, params %q, kind %q", got.GetWorkflowTemplate(), got.GetParamsJson(), got.GetKind())
	}
	if list := s.ok(t, "triggers", "list"); !strings.Contains(list, "workflow template sums") {
		t.Errorf("triggers list does not show the template:\n%s", list)
	}
	var rr jobkitv1.RunTriggerResponse
	s.okJSON(t, &rr, "triggers", "run", "nightly-sums")
	id := rr.GetInstance().GetId()
	if id == "" || rr.GetInstance().GetTask() != "$end" {
		t.Fatalf("triggers run of a template's trigger: %v; want the workflow's end", rr.GetInstance())
	}
	if got := s.ok(t, "workflow", "get", id); !strings.Contains(got, "sums") {
		t.Errorf("workflow get %s:\n%s", id, got)
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"triggers", "create", "x", "--workflow-template", "nope", "--cron", "@hourly"}, exitNotFound, `"nope"`},
		{[]string{"triggers", "create", "x", "--workflow-template", "sums", "--cron", "@hourly"}, exitUsage, `"x" is required`},
		{[]string{"triggers", "create", "x", "--workflow-template", "sums", "--kind", "sum", "--cron", "@hourly"}, exitUsage, "kind"},
		{[]string{"triggers", "create", "x", "--workflow-template", "sums", "--param", "x", "--cron", "@hourly"}, exitUsage, "name=value"},
	} {
		if r := s.jobctl(t, c.args...); r.code != c.code || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%v: exit %d, want %d saying %q\n%s", c.args, r.code, c.code, c.says, r.stderr)
		}
	}
}

package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

const imagesTemplate = `{
  "name": "images",
  "params": [{"name": "url"}, {"name": "width", "default": 64}, {"name": "tag", "default": "v1"}],
  "tasks": [
    {"name": "download", "kind": "tpl.download", "args": ["${url}"], "metadata": {"source": "from ${url} ($${literal})"}},
    {"name": "resize", "kind": "tpl.resize", "args": ["${width}", {"label": "${tag}-${width}"}], "after": ["download"], "max_retries": 2, "timeout": "1m"},
    {"name": "publish", "kind": "tpl.publish", "after": ["resize"], "on_dependency_failure": "run", "queue": "default"}
  ]
}`

// TestWorkflowTemplateRun: a template stored as data runs with parameters
// (given, defaulted, substituted whole and inside strings), as a workflow
// whose tasks read each other's results; a repeated run with the same ID
// stores nothing twice.
func TestWorkflowTemplateRun(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]string{}
	record := func(k, v string) {
		mu.Lock()
		defer mu.Unlock()
		got[k] = v
	}
	download := mustJob(t, job.WithKind("tpl.download"), job.WithExecutor(func(ji job.Instance, url string) (string, error) {
		record("download", url+" "+ji.Info().Metadata["source"])
		return "/tmp/" + url, nil
	}))
	type label struct {
		Label string `json:"label"`
	}
	resize := mustJob(t, job.WithKind("tpl.resize"), job.WithExecutor(func(ctx context.Context, ji job.Instance, width int, l label) (string, error) {
		var path string
		if err := job.DependencyResultsInto(ctx, ji, "download", &path); err != nil {
			return "", err
		}
		record("resize", fmt.Sprintf("%s %d %s retries=%d", path, width, l.Label, ji.Info().MaxRetries))
		return fmt.Sprintf("%s@%d", path, width), nil
	}))
	publish := mustJob(t, job.WithKind("tpl.publish"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
		var p string
		if err := job.DependencyResultsInto(ctx, ji, "resize", &p); err != nil {
			return err
		}
		record("publish", p)
		return nil
	}))
	m := wfManager(t, newMemdb(t), download, resize, publish)
	ctx := context.Background()
	adm := m.Admin()

	tpl, err := job.ParseWorkflowTemplate([]byte(imagesTemplate))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := adm.PutWorkflowTemplate(ctx, tpl, 0)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Version != 1 || len(stored.Tasks) != 3 {
		t.Fatalf("stored template: version %d, %d tasks; want 1, 3", stored.Version, len(stored.Tasks))
	}
	if _, err := adm.PutWorkflowTemplate(ctx, tpl, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("creating the template twice: %v, want ErrConflict", err)
	}

	info, err := m.ScheduleWorkflowTemplate(ctx, "images", map[string]any{"url": "cat.png", "width": 128}, job.WithWorkflowID("images-1"))
	if err != nil {
		t.Fatalf("ScheduleWorkflowTemplate: %v", err)
	}
	if info.Name != "images" || len(info.Tasks) != 3 {
		t.Fatalf("run: name %q, %d tasks; want images, 3", info.Name, len(info.Tasks))
	}
	waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
	mu.Lock()
	want := map[string]string{
		"download": "cat.png from cat.png (${literal})",
		"resize":   "/tmp/cat.png 128 v1-128 retries=2",
		"publish":  "/tmp/cat.png@128",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s saw %q, want %q", k, got[k], v)
		}
	}
	mu.Unlock()
	again, err := m.ScheduleWorkflowTemplate(ctx, "images", map[string]any{"url": "cat.png", "width": 128}, job.WithWorkflowID("images-1"))
	if err != nil || again.State != job.WorkflowCompleted {
		t.Fatalf("repeated run: %v, %v; want the completed workflow", again, err)
	}

	page, err := adm.ListWorkflowTemplates(ctx, "", 0)
	if err != nil || len(page.Items) != 1 || page.Items[0].Name != "images" {
		t.Fatalf("ListWorkflowTemplates: %v, %v; want the one template", page, err)
	}
	if err := adm.DeleteWorkflowTemplate(ctx, "images", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ScheduleWorkflowTemplate(ctx, "images", map[string]any{"url": "x"}); !errors.Is(err, job.ErrTemplateNotFound) || !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "PutWorkflowTemplate") {
		t.Fatalf("running a deleted template: %v, want ErrTemplateNotFound naming PutWorkflowTemplate", err)
	}
}

// TestWorkflowTemplateBadInput: every mistake is refused with an error
// naming the task or parameter and the fix, and nothing is stored or run.
func TestWorkflowTemplateBadInput(t *testing.T) {
	t.Parallel()
	noop := mustJob(t, job.WithKind("tpl.noop"), job.WithExecutor(func(string) error { return nil }))
	st := newMemdb(t)
	m := wfManager(t, st, noop)
	ctx := context.Background()
	base := func(edit func(map[string]any)) []byte {
		var doc map[string]any
		if err := json.Unmarshal([]byte(`{"name": "t", "params": [{"name": "p"}],
			"tasks": [{"name": "a", "kind": "tpl.noop", "args": ["${p}"]}, {"name": "b", "kind": "tpl.noop", "args": ["x"], "after": ["a"]}]}`), &doc); err != nil {
			t.Fatal(err)
		}
		edit(doc)
		b, _ := json.Marshal(doc)
		return b
	}
	task := func(doc map[string]any, i int) map[string]any { return doc["tasks"].([]any)[i].(map[string]any) }
	for _, c := range []struct {
		name string
		body []byte
		want []string
	}{
		{"unknown field", base(func(d map[string]any) { task(d, 0)["argz"] = []any{} }), []string{`unknown field "argz"`, "a task has name, kind, args"}},
		{"no name", base(func(d map[string]any) { delete(d, "name") }), []string{"without a name", "give it one"}},
		{"no tasks", base(func(d map[string]any) { d["tasks"] = []any{} }), []string{"has no tasks", "add at least one"}},
		{"undeclared parameter", base(func(d map[string]any) { task(d, 1)["args"] = []any{"${q}"} }), []string{`task "b"`, "${q}", "add it to params"}},
		{"undeclared in metadata", base(func(d map[string]any) { task(d, 1)["metadata"] = map[string]any{"k": "v ${zz}"} }), []string{`task "b"`, `metadata "k"`, "${zz}"}},
		{"bad parameter name", base(func(d map[string]any) { d["params"] = []any{map[string]any{"name": "1x"}} }), []string{`params[0] is named "1x"`, "a letter or '_'"}},
		{"duplicate parameter", base(func(d map[string]any) {
			d["params"] = []any{map[string]any{"name": "p"}, map[string]any{"name": "p"}}
		}), []string{`two parameters are named "p"`}},
		{"unknown dependency", base(func(d map[string]any) { task(d, 1)["after"] = []any{"zz"} }), []string{`task "b" is after "zz"`, "add that task"}},
		{"cycle", base(func(d map[string]any) { task(d, 0)["after"] = []any{"b"} }), []string{"cycle", "a -> b -> a"}},
		{"duplicate task", base(func(d map[string]any) { task(d, 1)["name"] = "a" }), []string{`two tasks are named "a"`}},
		{"dollar in a task name", base(func(d map[string]any) { task(d, 1)["name"] = "$b" }), []string{"contains '$'", "rename it"}},
		{"bad policy", base(func(d map[string]any) { task(d, 1)["on_dependency_failure"] = "ignore" }), []string{`task "b"`, "want cancel, run or cancel-workflow"}},
		{"bad timeout", base(func(d map[string]any) { task(d, 1)["timeout"] = "soon" }), []string{`task "b"`, `timeout "soon"`, "90s"}},
		{"delay after", base(func(d map[string]any) { task(d, 1)["delay"] = "1m" }), []string{`task "b"`, "delay a task without dependencies"}},
		{"args not a list", base(func(d map[string]any) { task(d, 1)["args"] = map[string]any{"x": 1} }), []string{`task "b"`, "args is not a JSON array"}},
		{"no kind", base(func(d map[string]any) { delete(task(d, 1), "kind") }), []string{`task "b"`, "no kind"}},
	} {
		_, err := job.ParseWorkflowTemplate(c.body)
		if !errors.Is(err, job.ErrWorkflow) {
			t.Errorf("%s: ParseWorkflowTemplate: %v, want ErrWorkflow", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
		if c.name == "unknown field" {
			continue // a Go struct has no unknown fields
		}
		// Put checks too (a template built in Go skips Parse).
		var tpl job.WorkflowTemplate
		_ = json.Unmarshal(c.body, &tpl)
		if _, err := m.Admin().PutWorkflowTemplate(ctx, &tpl, 0); err == nil {
			t.Errorf("%s: PutWorkflowTemplate stored it", c.name)
		}
	}
	if page, err := m.Admin().ListWorkflowTemplates(ctx, "", 0); err != nil || len(page.Items) != 0 {
		t.Fatalf("templates stored by refused puts: %v, %v", page, err)
	}

	// Run-time mistakes: parameters, and a kind no manager knows.
	good, err := job.ParseWorkflowTemplate(base(func(map[string]any) {}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admin().PutWorkflowTemplate(ctx, good, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		params map[string]any
		want   []string
	}{
		{"missing parameter", nil, []string{`parameter "p" is required`, "p=..."}},
		{"unknown parameter", map[string]any{"p": "x", "q": 1}, []string{`has no parameter "q"`, "it takes p"}},
	} {
		_, err := m.ScheduleWorkflowTemplate(ctx, "t", c.params)
		if !errors.Is(err, job.ErrWorkflow) {
			t.Errorf("%s: %v, want ErrWorkflow", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}
	unknown, err := job.ParseWorkflowTemplate([]byte(`{"name": "u", "tasks": [{"name": "a", "kind": "tpl.nosuch"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admin().PutWorkflowTemplate(ctx, unknown, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ScheduleWorkflowTemplate(ctx, "u", nil); !errors.Is(err, job.ErrUnknownKind) || !strings.Contains(err.Error(), `task "a"`) {
		t.Fatalf("a template of an unknown kind: %v, want ErrUnknownKind naming task a", err)
	}
	// Arguments the executor does not take (a number for a string).
	if _, err := m.ScheduleWorkflowTemplate(ctx, "t", map[string]any{"p": 5}); !errors.Is(err, job.ErrInvalidArguments) || !strings.Contains(err.Error(), `task "a"`) {
		t.Fatalf("a parameter of the wrong type: %v, want ErrInvalidArguments naming task a", err)
	}
	res, err := st.LookupInstances(ctx, &store.Query{Limit: 10})
	if err != nil || len(res) != 0 {
		t.Fatalf("refused runs stored %d instances (%v); want none", len(res), err)
	}
}

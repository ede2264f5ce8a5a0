package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Workflow templates: a workflow defined as data, stored under a name
// (documents of WorkflowTemplateCollection), and run from Go
// (Manager.ScheduleWorkflowTemplate), the API or jobctl with parameters,
// so that a jobd without Go code runs a pipeline of data-defined kinds
// (webhook, command, Wasm). See doc/workflows.md.

// WorkflowTemplateCollection is the Documents collection that keeps
// workflow templates, one document per template, named by the template.
const WorkflowTemplateCollection = "workflow-templates"

// ErrTemplateNotFound: no workflow template is stored under that name.
var ErrTemplateNotFound = errors.New("job: workflow template not found")

// WorkflowTemplate is a workflow as data: its tasks (each a kind with
// arguments and options, and the tasks it waits for) and the parameters a
// run fills in. Its JSON form, with these field names, is what
// Admin.PutWorkflowTemplate stores and what `jobctl workflow template
// put` reads (as YAML or JSON); the workflow file of `jobctl workflow
// create` is the same form without params.
//
// A string in a task's args or metadata values may name parameters:
// "${name}" alone is replaced by the parameter's value, of any JSON type;
// "${name}" inside a longer string by the value's text (a string as it
// is, a number or boolean as JSON writes it); "$${" writes "${".
type WorkflowTemplate struct {
	// Name names the template and the workflows it runs (for people and
	// metrics): 1 to store.MaxDocumentName bytes of text.
	Name string `json:"name"`
	// Description is for people.
	Description string `json:"description,omitempty"`
	// Params are the parameters a run gives, in the order shown to
	// people.
	Params []TemplateParam `json:"params,omitempty"`
	// OnDependencyFailure is the workflow's policy: "cancel" (default),
	// "run" or "cancel-workflow" (see WithDepFailure).
	OnDependencyFailure string `json:"on_dependency_failure,omitempty"`
	// Tasks are the workflow's tasks: at least one.
	Tasks []TemplateTask `json:"tasks"`

	// Version, CreatedAt and UpdatedAt are the stored document's (set on
	// reads, ignored on writes): pass Version as PutWorkflowTemplate's
	// ifVersion to replace what was read.
	Version   int64     `json:"-"`
	CreatedAt time.Time `json:"-"`
	UpdatedAt time.Time `json:"-"`
}

// TemplateParam is a parameter of a workflow template.
type TemplateParam struct {
	// Name is referred to as "${name}": a letter or '_', then letters,
	// digits and '_'.
	Name string `json:"name"`
	// Default is the value when a run does not give one (JSON); without
	// it, every run must give the parameter.
	Default json.RawMessage `json:"default,omitempty"`
	// Description is for people.
	Description string `json:"description,omitempty"`
}

// TemplateTask is one task of a workflow template: the fields of a
// workflow task (Workflow.Add) as data.
type TemplateTask struct {
	// Name is unique in the template; no '$'.
	Name string `json:"name"`
	// Kind is a registered kind or one with a stored definition.
	Kind string `json:"kind"`
	// Args is the arguments, a JSON array (parameters substituted).
	Args json.RawMessage `json:"args,omitempty"`
	// After names the tasks it waits for.
	After []string `json:"after,omitempty"`
	// OnDependencyFailure overrides the template's policy for this task.
	OnDependencyFailure string `json:"on_dependency_failure,omitempty"`
	// Queue, Priority, MaxRetries and Timeout override the kind's
	// policy; Timeout and Delay are Go durations ("90s", "1h").
	Queue      string `json:"queue,omitempty"`
	Priority   *int   `json:"priority,omitempty"`
	MaxRetries *int   `json:"max_retries,omitempty"`
	Timeout    string `json:"timeout,omitempty"`
	// Delay postpones a task without dependencies.
	Delay string `json:"delay,omitempty"`
	// Metadata is set on the task's instance (WithMetadata); values may
	// name parameters.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// paramRef matches a parameter reference in a string.
var paramRef = regexp.MustCompile(`\$\$\{|\$\{([^}]*)\}`)

// paramName is what a parameter's name may be.
var paramName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseWorkflowTemplate reads a template from its JSON form and checks it
// (see WorkflowTemplate.Validate). A field it does not know is an error
// naming it.
func ParseWorkflowTemplate(b []byte) (*WorkflowTemplate, error) {
	t := new(WorkflowTemplate)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(t); err != nil {
		return nil, fmt.Errorf("%w: workflow template: %v (a template has name, description, params, on_dependency_failure and tasks; a task has name, kind, args, after, on_dependency_failure, queue, priority, max_retries, timeout, delay, metadata)", ErrWorkflow, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: workflow template: more than one JSON value; send one object", ErrWorkflow)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// Validate checks t without reading the store: a name, at least one task
// and at most MaxWorkflowTasks, parameters with good and distinct names,
// every "${name}" a declared parameter, policies and durations that
// parse, args that are a JSON array, and the graph (task names unique
// and without '$', dependencies the template has, no cycle). Kinds and
// arguments are checked against the kinds when a run stores the
// workflow. An error wraps ErrWorkflow and names the task or parameter
// and the fix.
func (t *WorkflowTemplate) Validate() error {
	if t == nil {
		return fmt.Errorf("%w: nil workflow template", ErrWorkflow)
	}
	if t.Name == "" {
		return fmt.Errorf("%w: workflow template without a name; give it one (name: nightly-report)", ErrWorkflow)
	}
	if err := store.CheckDocumentKey(WorkflowTemplateCollection, t.Name); err != nil {
		return fmt.Errorf("%w: workflow template name: %w", ErrWorkflow, err)
	}
	what := fmt.Sprintf("workflow template %q", t.Name)
	declared := map[string]bool{}
	for i, p := range t.Params {
		switch {
		case !paramName.MatchString(p.Name):
			return fmt.Errorf("%w: %s: params[%d] is named %q; a parameter's name is a letter or '_' then letters, digits and '_'", ErrWorkflow, what, i, p.Name)
		case declared[p.Name]:
			return fmt.Errorf("%w: %s: two parameters are named %q; give each its own name", ErrWorkflow, what, p.Name)
		case p.Default != nil && !json.Valid(p.Default):
			return fmt.Errorf("%w: %s: parameter %q: default is not JSON", ErrWorkflow, what, p.Name)
		}
		declared[p.Name] = true
	}
	if _, err := templatePolicy(t.OnDependencyFailure); err != nil {
		return fmt.Errorf("%w: %s: on_dependency_failure: %w", ErrWorkflow, what, err)
	}
	switch {
	case len(t.Tasks) == 0:
		return fmt.Errorf("%w: %s has no tasks; add at least one (name, kind)", ErrWorkflow, what)
	case len(t.Tasks) > MaxWorkflowTasks:
		return fmt.Errorf("%w: %s has %d tasks, more than MaxWorkflowTasks (%d); split it", ErrWorkflow, what, len(t.Tasks), MaxWorkflowTasks)
	}
	byName := make(map[string]int, len(t.Tasks))
	for i := range t.Tasks {
		tt := &t.Tasks[i]
		if err := validTaskName(tt.Name); err != nil {
			return fmt.Errorf("%w: %s: tasks[%d] (kind %q): %v", ErrWorkflow, what, i, tt.Kind, err)
		}
		if _, dup := byName[tt.Name]; dup {
			return fmt.Errorf("%w: %s: two tasks are named %q; give each task its own name", ErrWorkflow, what, tt.Name)
		}
		byName[tt.Name] = i
		if err := tt.check(declared); err != nil {
			return fmt.Errorf("%w: %s: task %q: %w", ErrWorkflow, what, tt.Name, err)
		}
	}
	specs := make([]*TaskSpec, len(t.Tasks))
	deps := make([][]int, len(t.Tasks))
	for i := range t.Tasks {
		tt := &t.Tasks[i]
		specs[i] = &TaskSpec{name: tt.Name, kind: tt.Kind}
		for _, d := range tt.After {
			k, ok := byName[d]
			switch {
			case !ok:
				return fmt.Errorf("%w: %s: task %q is after %q, which the template does not have; add that task, or remove it from after", ErrWorkflow, what, tt.Name, d)
			case k == i:
				return fmt.Errorf("%w: %s: task %q is after itself; remove it from its after", ErrWorkflow, what, tt.Name)
			}
			deps[i] = append(deps[i], k)
		}
	}
	if cyc := findCycle(specs, deps); cyc != nil {
		return fmt.Errorf("%w: %s: the dependencies make a cycle: %s; remove one of these dependencies", ErrWorkflow, what, strings.Join(cyc, " -> "))
	}
	return nil
}

// check checks one task's fields, and that the parameters it names are
// declared.
func (tt *TemplateTask) check(declared map[string]bool) error {
	if tt.Kind == "" {
		return errors.New("no kind; name the kind of job it runs (kind: http.get)")
	}
	if err := store.ValidateKind(tt.Kind); err != nil {
		return err
	}
	if _, err := templatePolicy(tt.OnDependencyFailure); err != nil {
		return fmt.Errorf("on_dependency_failure: %w", err)
	}
	for _, f := range []struct{ name, v string }{{"timeout", tt.Timeout}, {"delay", tt.Delay}} {
		if f.v == "" {
			continue
		}
		if d, err := time.ParseDuration(f.v); err != nil || d < 0 {
			return fmt.Errorf("%s %q is not a duration; write it as 90s, 5m or 1h30m", f.name, f.v)
		}
	}
	if tt.Delay != "" && len(tt.After) > 0 {
		return errors.New("a delay on a task with dependencies (after); it runs when they complete: delay a task without dependencies instead")
	}
	unknown := func(s string) error {
		for _, m := range paramRef.FindAllStringSubmatch(s, -1) {
			if m[0] == "$${" {
				continue
			}
			if !declared[m[1]] {
				return fmt.Errorf("names the parameter ${%s}, which the template does not declare; add it to params (name: %s), or write $${ for a literal ${", m[1], m[1])
			}
		}
		return nil
	}
	if len(tt.Args) > 0 {
		var args []any
		if err := json.Unmarshal(tt.Args, &args); err != nil {
			return fmt.Errorf("args is not a JSON array (%v); write args: [1, \"a\"]", err)
		}
		var bad error
		walkStrings(args, func(s string) {
			if bad == nil {
				bad = unknown(s)
			}
		})
		if bad != nil {
			return fmt.Errorf("args %w", bad)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(tt.Metadata)) {
		if err := unknown(tt.Metadata[k]); err != nil {
			return fmt.Errorf("metadata %q %w", k, err)
		}
	}
	return nil
}

// walkStrings calls f for every string inside v (decoded JSON).
func walkStrings(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case []any:
		for _, e := range x {
			walkStrings(e, f)
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			walkStrings(x[k], f)
		}
	}
}

// templatePolicy parses a policy name; "" is DepCancel.
func templatePolicy(s string) (DepFailure, error) {
	if s == "" {
		return DepCancel, nil
	}
	return store.ParseDepFailure(s)
}

// Workflow returns the workflow t makes with params (JSON values by
// parameter name; a parameter not given takes its default), with opts
// (WithWorkflowID to make a repeated run store nothing twice). It refuses,
// with an error wrapping ErrWorkflow that names the parameter, a
// parameter t does not declare and a declared one without a default that
// params lacks.
func (t *WorkflowTemplate) Workflow(params map[string]any, opts ...WorkflowOption) (*Workflow, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	what := fmt.Sprintf("workflow template %q", t.Name)
	values := make(map[string]any, len(t.Params))
	for _, p := range t.Params {
		v, ok := params[p.Name]
		switch {
		case ok:
			values[p.Name] = v
		case p.Default != nil:
			values[p.Name] = p.Default
		default:
			return nil, fmt.Errorf("%w: %s: parameter %q is required; give it a value (%s=...)", ErrWorkflow, what, p.Name, p.Name)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if _, ok := values[k]; !ok {
			names := make([]string, len(t.Params))
			for i, p := range t.Params {
				names[i] = p.Name
			}
			return nil, fmt.Errorf("%w: %s has no parameter %q; it takes %s", ErrWorkflow, what, k, orNone(names))
		}
	}
	// Each value as JSON, and as text for a reference inside a string.
	asJSON := make(map[string]json.RawMessage, len(values))
	asText := make(map[string]string, len(values))
	for k, v := range values {
		b, ok := v.(json.RawMessage)
		if !ok {
			var err error
			if b, err = json.Marshal(v); err != nil {
				return nil, fmt.Errorf("%w: %s: parameter %q: %v; give a value JSON can encode", ErrWorkflow, what, k, err)
			}
		}
		asJSON[k] = b
		var s string
		if json.Unmarshal(b, &s) == nil {
			asText[k] = s
		} else {
			asText[k] = string(b)
		}
	}
	subst := func(s string) string {
		return paramRef.ReplaceAllStringFunc(s, func(m string) string {
			if m == "$${" {
				return "${"
			}
			return asText[m[2:len(m)-1]]
		})
	}
	var fill func(v any) any
	fill = func(v any) any {
		switch x := v.(type) {
		case string:
			if m := paramRef.FindStringSubmatchIndex(x); m != nil && m[0] == 0 && m[1] == len(x) && m[2] >= 0 {
				return asJSON[x[2:len(x)-1]] // "${name}" alone: the value itself
			}
			return subst(x)
		case []any:
			for i, e := range x {
				x[i] = fill(e)
			}
		case map[string]any:
			for k, e := range x {
				x[k] = fill(e)
			}
		}
		return v
	}
	policy, _ := templatePolicy(t.OnDependencyFailure) // checked by Validate
	wf := NewWorkflow(t.Name, append([]WorkflowOption{WithDepFailure(policy)}, opts...)...)
	for _, tt := range t.Tasks {
		var o []ScheduleOption
		if len(tt.Args) > 0 {
			dec := json.NewDecoder(bytes.NewReader(tt.Args))
			dec.UseNumber() // numbers kept as written
			var args []any
			if err := dec.Decode(&args); err != nil {
				return nil, fmt.Errorf("%w: %s: task %q: args: %v", ErrWorkflow, what, tt.Name, err)
			}
			for i, a := range args {
				b, err := json.Marshal(fill(a))
				if err != nil {
					return nil, fmt.Errorf("%w: %s: task %q: args: %v", ErrWorkflow, what, tt.Name, err)
				}
				args[i] = json.RawMessage(b)
			}
			o = append(o, WithArguments(args...))
		}
		if len(tt.After) > 0 {
			o = append(o, After(tt.After...))
		}
		if tt.OnDependencyFailure != "" {
			p, _ := templatePolicy(tt.OnDependencyFailure)
			o = append(o, WithDepFailure(p))
		}
		if tt.Queue != "" {
			o = append(o, WithQueue(tt.Queue))
		}
		if tt.Priority != nil {
			o = append(o, WithPriority(Priority(*tt.Priority)))
		}
		if tt.MaxRetries != nil {
			o = append(o, WithMaxRetries(*tt.MaxRetries))
		}
		if tt.Timeout != "" {
			d, _ := time.ParseDuration(tt.Timeout)
			o = append(o, WithTimeout(d))
		}
		if tt.Delay != "" {
			d, _ := time.ParseDuration(tt.Delay)
			o = append(o, WithScheduleAfter(d))
		}
		for _, k := range slices.Sorted(maps.Keys(tt.Metadata)) {
			o = append(o, WithMetadata(k, subst(tt.Metadata[k])))
		}
		wf.Add(tt.Name, tt.Kind, o...)
	}
	return wf, nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// ScheduleWorkflowTemplate runs the stored workflow template name with
// params (JSON values by parameter name): it reads the template, fills in
// the parameters (WorkflowTemplate.Workflow) and stores the workflow as
// ScheduleWorkflow does, whole or not at all. opts apply to the workflow
// (WithWorkflowID makes a repeated run store nothing twice). A template
// not stored is an error wrapping ErrTemplateNotFound and
// store.ErrNotFound; a missing or unknown parameter, or a kind or
// arguments the managers refuse, an error naming it.
func (m *Manager) ScheduleWorkflowTemplate(ctx context.Context, name string, params map[string]any, opts ...WorkflowOption) (*WorkflowInfo, error) {
	t, err := m.Admin().GetWorkflowTemplate(ctx, name)
	if err != nil {
		return nil, err
	}
	wf, err := t.Workflow(params, opts...)
	if err != nil {
		return nil, fmt.Errorf("job: run %w", err)
	}
	return m.ScheduleWorkflow(ctx, wf)
}

// PutWorkflowTemplate checks t (WorkflowTemplate.Validate: nothing is
// stored when it fails) and stores it under t.Name: ifVersion 0 creates
// (an error wrapping store.ErrConflict when the name is taken), the
// Version read replaces that version, store.AnyVersion writes whatever is
// stored. It returns the template as stored, with its Version.
func (a *Admin) PutWorkflowTemplate(ctx context.Context, t *WorkflowTemplate, ifVersion int64) (*WorkflowTemplate, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("job: put %w", err)
	}
	body, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("job: put workflow template %q: %w", t.Name, err)
	}
	d, err := a.m.store.PutDocument(ctx, &store.PutDocumentParams{Collection: WorkflowTemplateCollection, Name: t.Name, Body: body, IfVersion: ifVersion, Now: a.m.clock.Now()})
	if err != nil {
		return nil, fmt.Errorf("job: put workflow template %q: %w", t.Name, err)
	}
	return decodeTemplate(d)
}

// GetWorkflowTemplate returns the stored template name; an error wrapping
// ErrTemplateNotFound and store.ErrNotFound when there is none.
func (a *Admin) GetWorkflowTemplate(ctx context.Context, name string) (*WorkflowTemplate, error) {
	d, err := a.m.store.GetDocument(ctx, WorkflowTemplateCollection, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, templateNotFound(name)
	}
	if err != nil {
		return nil, fmt.Errorf("job: get workflow template %q: %w", name, err)
	}
	return decodeTemplate(d)
}

// ListWorkflowTemplates returns one page of the stored templates in name
// order: at most limit (0: store.DefaultDocumentPage) after cursor (""
// from the first), with the cursor of the next page ("" on the last).
func (a *Admin) ListWorkflowTemplates(ctx context.Context, cursor string, limit int) (*Page[*WorkflowTemplate], error) {
	page, err := a.m.store.ListDocuments(ctx, &store.ListDocumentsParams{Collection: WorkflowTemplateCollection, After: cursor, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("job: list workflow templates: %w", err)
	}
	out := &Page[*WorkflowTemplate]{Items: make([]*WorkflowTemplate, 0, len(page.Documents)), Next: page.Next}
	for _, d := range page.Documents {
		t, err := decodeTemplate(d)
		if err != nil {
			return nil, fmt.Errorf("job: list workflow templates: %w", err)
		}
		out.Items = append(out.Items, t)
	}
	return out, nil
}

// DeleteWorkflowTemplate deletes the stored template name (only at
// ifVersion when not 0). Workflows it ran are not touched.
func (a *Admin) DeleteWorkflowTemplate(ctx context.Context, name string, ifVersion int64) error {
	err := a.m.store.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: WorkflowTemplateCollection, Name: name, IfVersion: ifVersion})
	if errors.Is(err, store.ErrNotFound) {
		return templateNotFound(name)
	}
	if err != nil {
		return fmt.Errorf("job: delete workflow template %q: %w", name, err)
	}
	return nil
}

func templateNotFound(name string) error {
	return fmt.Errorf("%w: %w: no workflow template %q is stored; store it first (Admin.PutWorkflowTemplate, jobctl workflow template put)", ErrTemplateNotFound, store.ErrNotFound, name)
}

// decodeTemplate reads a stored template.
func decodeTemplate(d *store.Document) (*WorkflowTemplate, error) {
	t := new(WorkflowTemplate)
	if err := json.Unmarshal(d.Body, t); err != nil {
		return nil, fmt.Errorf("%w: stored workflow template %q: %v", store.ErrCorrupt, d.Name, err)
	}
	t.Version, t.CreatedAt, t.UpdatedAt = d.Version, d.CreatedAt, d.UpdatedAt
	return t, nil
}

// Package tmpl renders the text/template strings of executor configs
// (URLs, headers, bodies, argv entries) against an instance.
package tmpl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/jobkit/job"
)

// Data is what a template sees: {{.ID}}, {{.Kind}}, {{.Attempt}},
// {{index .Args 0}} (numbers as written), {{json .Args}}.
type Data struct {
	ID      string
	Kind    string
	Attempt int
	Args    []any
}

// NewData decodes args for templates.
func NewData(inst job.Instance, args []json.RawMessage) (*Data, error) {
	info := inst.Info()
	d := &Data{ID: info.ID, Kind: info.Kind, Attempt: info.Attempt, Args: make([]any, len(args))}
	for i, a := range args {
		v, err := decodeArg(a)
		if err != nil {
			return nil, fmt.Errorf("%w: argument %d is not JSON: %v", job.ErrInvalidArguments, i+1, err)
		}
		d.Args[i] = v
	}
	return d, nil
}

// decodeArg decodes one JSON value, numbers as json.Number. A string, the
// commonest argument, skips the decoder that objects and arrays need.
func decodeArg(a json.RawMessage) (any, error) {
	a = bytes.TrimSpace(a)
	if len(a) > 0 && a[0] == '"' {
		var s string
		if err := json.Unmarshal(a, &s); err != nil {
			return nil, err
		}
		return s, nil
	}
	dec := json.NewDecoder(bytes.NewReader(a))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// Template is a parsed template. The common simple ones — text with
// {{.ID}}, {{.Kind}}, {{.Attempt}}, {{index .Args N}}, optionally through
// json or urlquery — render without text/template's reflection; anything
// else, and any value those cannot print as text/template would, renders
// through text/template itself, so the output is the same either way.
type Template struct {
	t     *template.Template
	plan  []step // nil: no fast path
	text  string // the whole text of a template without actions
	plain bool   // no actions at all
}

// Name returns the template's name.
func (t *Template) Name() string { return t.t.Name() }

// Text returns the text of a template without actions, which renders the
// same for every instance, and whether t is one.
func Text(t *Template) (string, bool) {
	if t == nil {
		return "", false
	}
	return t.text, t.plain
}

// step is one piece of a fast-path template: literal text, or a value of
// the data through functions.
type step struct {
	text  string
	field string // "" (text), "ID", "Kind", "Attempt" or "Args"
	arg   int    // for Args: the index
	funcs []func(any) (any, bool)
}

// Funcs are the functions every template may call besides text/template's
// own (index, printf, urlquery, ...): json encodes a value as JSON.
var Funcs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
}

// Parse parses text as a template named name; a reference to a missing
// map key is an error when it runs. extra adds functions (nil: none).
func Parse(name, text string, extra template.FuncMap) (*Template, error) {
	t := template.New(name).Option("missingkey=error").Funcs(Funcs)
	if extra != nil {
		t = t.Funcs(extra)
	}
	t, err := t.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	x := &Template{t: t}
	if t.Tree == nil || t.Tree.Root == nil || len(t.Tree.Root.Nodes) == 0 {
		x.plain = true
		return x, nil
	}
	if nodes := t.Tree.Root.Nodes; len(nodes) == 1 {
		if tn, ok := nodes[0].(*parse.TextNode); ok {
			x.text, x.plain = string(tn.Text), true
			return x, nil
		}
	}
	x.plan = plan(t.Tree.Root.Nodes)
	return x, nil
}

// plan returns the fast path of nodes, or nil when one is not simple.
func plan(nodes []parse.Node) []step {
	steps := make([]step, 0, len(nodes))
	for _, n := range nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			steps = append(steps, step{text: string(n.Text)})
		case *parse.ActionNode:
			st, ok := planPipe(n.Pipe)
			if !ok {
				return nil
			}
			steps = append(steps, st)
		default:
			return nil
		}
	}
	return steps
}

// planPipe plans "value", "value | f | g" and "f value" (value itself
// possibly parenthesised), f and g being json or urlquery.
func planPipe(p *parse.PipeNode) (step, bool) {
	if p == nil || len(p.Decl) > 0 || len(p.Cmds) == 0 {
		return step{}, false
	}
	st, ok := planCommand(p.Cmds[0])
	if !ok {
		return step{}, false
	}
	for _, c := range p.Cmds[1:] {
		if len(c.Args) != 1 {
			return step{}, false
		}
		id, ok := c.Args[0].(*parse.IdentifierNode)
		if !ok {
			return step{}, false
		}
		f, ok := fastFunc(id.Ident)
		if !ok {
			return step{}, false
		}
		st.funcs = append(st.funcs, f)
	}
	return st, true
}

func planCommand(c *parse.CommandNode) (step, bool) {
	switch len(c.Args) {
	case 1:
		switch a := c.Args[0].(type) {
		case *parse.FieldNode:
			if len(a.Ident) == 1 && (a.Ident[0] == "ID" || a.Ident[0] == "Kind" || a.Ident[0] == "Attempt") {
				return step{field: a.Ident[0]}, true
			}
		case *parse.PipeNode:
			return planPipe(a)
		}
	case 2:
		id, ok := c.Args[0].(*parse.IdentifierNode)
		if !ok {
			return step{}, false
		}
		f, ok := fastFunc(id.Ident)
		if !ok {
			return step{}, false
		}
		var inner step
		switch a := c.Args[1].(type) {
		case *parse.FieldNode:
			inner, ok = planCommand(&parse.CommandNode{NodeType: parse.NodeCommand, Args: []parse.Node{a}})
		case *parse.PipeNode:
			inner, ok = planPipe(a)
		default:
			ok = false
		}
		if !ok {
			return step{}, false
		}
		inner.funcs = append(inner.funcs, f)
		return inner, true
	case 3:
		id, ok := c.Args[0].(*parse.IdentifierNode)
		field, ok2 := c.Args[1].(*parse.FieldNode)
		num, ok3 := c.Args[2].(*parse.NumberNode)
		if ok && ok2 && ok3 && id.Ident == "index" && len(field.Ident) == 1 && field.Ident[0] == "Args" && num.IsInt && num.Int64 >= 0 && num.Int64 < 1<<20 {
			return step{field: "Args", arg: int(num.Int64)}, true
		}
	}
	return step{}, false
}

// fastFunc is the fast path's version of a template function: the same
// function, applied to a value it prints as text/template would.
func fastFunc(name string) (func(any) (any, bool), bool) {
	switch name {
	case "urlquery":
		return func(v any) (any, bool) {
			switch v.(type) {
			case string, json.Number, int:
				return template.URLQueryEscaper(v), true
			}
			return nil, false
		}, true
	case "json":
		enc := Funcs["json"].(func(any) (string, error))
		return func(v any) (any, bool) {
			if v == nil {
				return nil, false
			}
			s, err := enc(v)
			return s, err == nil // an error: let text/template report it
		}, true
	}
	return nil, false
}

// fast renders t's plan on d; false when a value is not one the fast path
// prints exactly as text/template does (the caller then executes t).
func (t *Template) fast(d *Data, b *limitedBuffer) (bool, error) {
	for _, st := range t.plan {
		var v any
		switch st.field {
		case "":
			if _, err := b.WriteString(st.text); err != nil {
				return true, err
			}
			continue
		case "ID":
			v = d.ID
		case "Kind":
			v = d.Kind
		case "Attempt":
			v = d.Attempt
		case "Args":
			if st.arg >= len(d.Args) {
				return false, nil
			}
			v = d.Args[st.arg]
		}
		for _, f := range st.funcs {
			var ok bool
			if v, ok = f(v); !ok {
				return false, nil
			}
		}
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case json.Number:
			s = string(v)
		case int:
			s = strconv.Itoa(v)
		default:
			return false, nil
		}
		if _, err := b.WriteString(s); err != nil {
			return true, err
		}
	}
	return true, nil
}

// Render runs t on d, bounded to max bytes (0: unbounded).
func Render(t *Template, d *Data, max int) (string, error) {
	return render(t, d, max, true)
}

func render(t *Template, d *Data, max int, fast bool) (string, error) {
	if t.plain {
		if max > 0 && len(t.text) > max {
			return "", fmt.Errorf("%w: render %s: rendered text over %d bytes", job.ErrInvalidArguments, t.Name(), max)
		}
		return t.text, nil
	}
	var b limitedBuffer
	b.max = max
	if fast && t.plan != nil {
		done, err := t.fast(d, &b)
		if err != nil {
			return "", fmt.Errorf("%w: render %s: %v", job.ErrInvalidArguments, t.Name(), err)
		}
		if done {
			return b.String(), nil
		}
		b.Reset()
	}
	if err := t.t.Execute(&b, d); err != nil {
		return "", fmt.Errorf("%w: render %s: %v", job.ErrInvalidArguments, t.Name(), err)
	}
	return b.String(), nil
}

type limitedBuffer struct {
	strings.Builder
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.max > 0 && b.Len()+len(p) > b.max {
		return 0, fmt.Errorf("rendered text over %d bytes", b.max)
	}
	return b.Builder.Write(p)
}

func (b *limitedBuffer) WriteString(s string) (int, error) {
	if b.max > 0 && b.Len()+len(s) > b.max {
		return 0, fmt.Errorf("rendered text over %d bytes", b.max)
	}
	return b.Builder.WriteString(s)
}

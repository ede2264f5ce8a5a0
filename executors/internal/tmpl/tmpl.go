// Package tmpl renders the text/template strings of executor configs
// (URLs, headers, bodies, argv entries) against an instance.
package tmpl

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	d := &Data{ID: inst.ID(), Kind: inst.Kind(), Attempt: inst.Attempt(), Args: make([]any, len(args))}
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

// Text returns the text of a template without actions, which renders the
// same for every instance, and whether t is one.
func Text(t *template.Template) (string, bool) {
	if t == nil || t.Tree == nil || t.Tree.Root == nil {
		return "", t != nil
	}
	switch nodes := t.Tree.Root.Nodes; len(nodes) {
	case 0:
		return "", true
	case 1:
		if tn, ok := nodes[0].(*parse.TextNode); ok {
			return string(tn.Text), true
		}
	}
	return "", false
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
func Parse(name, text string, extra template.FuncMap) (*template.Template, error) {
	t := template.New(name).Option("missingkey=error").Funcs(Funcs)
	if extra != nil {
		t = t.Funcs(extra)
	}
	t, err := t.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return t, nil
}

// Render runs t on d, bounded to max bytes (0: unbounded).
func Render(t *template.Template, d any, max int) (string, error) {
	if s, ok := Text(t); ok {
		if max > 0 && len(s) > max {
			return "", fmt.Errorf("%w: render %s: rendered text over %d bytes", job.ErrInvalidArguments, t.Name(), max)
		}
		return s, nil
	}
	var b limitedBuffer
	b.max = max
	if err := t.Execute(&b, d); err != nil {
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

package tmpl

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"text/template"

	"github.com/jobkit/job"
)

// TestFastPathMatchesTextTemplate: every template renders the same (text,
// or error) through the fast path as through text/template alone, for
// arguments of every JSON type, missing ones included.
func TestFastPathMatchesTextTemplate(t *testing.T) {
	t.Parallel()
	templates := []string{
		"",
		"plain text",
		"https://h.example/{{index .Args 0}}",
		"https://h.example/{{index .Args 0 | urlquery}}?k={{.Kind}}&a={{.Attempt}}&id={{.ID}}",
		"{{urlquery (index .Args 1)}}",
		`{"ref": {{json (index .Args 1)}}, "id": "{{.ID}}"}`,
		"{{index .Args 2 | json | urlquery}}",
		"{{json .ID}}-{{json .Attempt}}-{{.Attempt | urlquery}}-{{.Attempt}}",
		"{{ index .Args 0 -}}  x  {{- index .Args 1 }}",
		"{{(index .Args 0)}}",
		"{{index .Args 5}}",
		"{{.Args}}",                      // not a fast one
		"{{printf \"%s/%v\" .Kind .ID}}", // not a fast one
		"{{if .Args}}yes{{end}}",         // not a fast one
		"{{with index .Args 0}}{{.}}{{end}}",
	}
	argSets := [][]string{
		nil,
		{`"a b/c"`, `"x"`, `"y"`},
		{`12`, `1.5e3`, `-7`},
		{`true`, `null`, `{"k":[1,2]}`},
		{`[1,"2"]`, `{"a":"b"}`, `"é&="`},
	}
	for _, text := range templates {
		tt, err := Parse("t", text, nil)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		for _, set := range argSets {
			raw := make([]json.RawMessage, len(set))
			for i, a := range set {
				raw[i] = json.RawMessage(a)
			}
			d := &Data{ID: "id-1", Kind: "k", Attempt: 3, Args: make([]any, len(raw))}
			for i, a := range raw {
				if d.Args[i], err = decodeArg(a); err != nil {
					t.Fatal(err)
				}
			}
			fast, ferr := render(tt, d, 0, true)
			slow, serr := render(tt, d, 0, false)
			if fast != slow || (ferr == nil) != (serr == nil) {
				t.Errorf("%q on %v: fast %q, %v; text/template %q, %v", text, set, fast, ferr, slow, serr)
			}
		}
	}
	// The fast path is taken for the simple ones.
	for _, text := range templates[2:10] {
		tt, _ := Parse("t", text, nil)
		if tt.plan == nil {
			t.Errorf("%q has no fast path", text)
		}
	}
}

// TestRenderLimit: both paths refuse output over the limit.
func TestRenderLimit(t *testing.T) {
	t.Parallel()
	d := &Data{ID: "id", Args: []any{strings.Repeat("x", 100)}}
	for _, text := range []string{"{{index .Args 0}}", "{{printf \"%s\" (index .Args 0)}}", strings.Repeat("y", 100)} {
		tt, err := Parse("t", text, template.FuncMap{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Render(tt, d, 50); !errors.Is(err, job.ErrInvalidArguments) || !strings.Contains(err.Error(), "over 50 bytes") {
			t.Errorf("%q over the limit: %v", text, err)
		}
		if s, err := Render(tt, d, 100); err != nil || len(s) != 100 {
			t.Errorf("%q at the limit: %q, %v", text, s, err)
		}
	}
}

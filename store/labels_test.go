package store

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseLabelRequirement(t *testing.T) {
	t.Parallel()
	ok := map[string]string{ // input -> compact form
		"region=eu":             "region=eu",
		"gpu":                   "gpu",
		"!gpu":                  "!gpu",
		"region=us|eu":          "region=eu|us",
		"region=eu|eu":          "region=eu",
		"region!=eu":            "region!=eu",
		"region!=us|eu":         "region!=eu|us",
		"region in (us,eu)":     "region=eu|us",
		"region in ( us , eu )": "region=eu|us",
		"region  in(eu)":        "region=eu",
		"region notin (eu,us)":  "region!=eu|us",
		"empty=":                "empty=",
		"empty!=":               "empty!=",
		"zone=eu-west-1a":       "zone=eu-west-1a",
		"ключ=значение":         "ключ=значение",
	}
	for in, want := range ok {
		r, err := ParseLabelRequirement(in)
		if err != nil {
			t.Errorf("ParseLabelRequirement(%q) = %v; want %q", in, err, want)
			continue
		}
		if r.String() != want {
			t.Errorf("ParseLabelRequirement(%q).String() = %q; want %q", in, r.String(), want)
		}
		if again, err := ParseLabelRequirement(r.String()); err != nil || again.String() != want {
			t.Errorf("compact form %q does not parse back: %v, %v", want, again, err)
		}
	}
	bad := map[string]string{ // input -> a word the error must hold
		"":                       "without a key",
		"=eu":                    "without a key",
		"!":                      "without a key",
		"!=eu":                   "key!=value",
		"!gpu=a":                 "key!=value",
		"a=b=c":                  "more than one",
		"region=eu||us":          "empty value",
		"region=|eu":             "empty value",
		"region in (eu,us":       "unbalanced",
		"region in eu,us)":       "unbalanced",
		"region in ()":           "empty value set",
		"region in ( )":          "empty value set",
		"region in (eu,,us)":     "empty value in the set",
		"region in ((eu))":       "nested",
		"region in (eu) x":       "after",
		"region within (eu)":     "\"in\" or \"notin\"",
		"in (eu)":                "\"in\" or \"notin\"",
		"region = eu":            "whitespace",
		"region=e u":             "whitespace",
		"gpu,ssd":                "commas",
		"re(gion=eu":             "before",
		"region=e!u":             "holds",
		"reg|ion=eu":             "holds",
		"region in (e|u)":        "holds",
		"region=\x01":            "control",
		"region=\xff":            "UTF-8",
		strings.Repeat("k", 300): "bytes",
	}
	for in, word := range bad {
		_, err := ParseLabelRequirement(in)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseLabelRequirement(%q) = %v; want ErrInvalid", in, err)
			continue
		}
		if !strings.Contains(err.Error(), word) {
			t.Errorf("ParseLabelRequirement(%q) error %q; want it to mention %q", in, err, word)
		}
	}
}

func TestValidateLabel(t *testing.T) {
	t.Parallel()
	for _, l := range []string{"gpu", "region=eu", "k=", "zone=eu-west-1a", "a.b/c=d_e"} {
		if err := ValidateLabel(l); err != nil {
			t.Errorf("ValidateLabel(%q) = %v; want nil", l, err)
		}
	}
	// Node labels never hold requirement operators: a node label
	// "region=eu|us" would read as a set where a task requires it.
	for _, l := range []string{"", "=x", "!gpu", "region!=eu", "region=eu|us", "a=b=c", "region in (eu)", "a,b", "a b", "(x)"} {
		if err := ValidateLabel(l); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateLabel(%q) = %v; want ErrInvalid", l, err)
		}
	}
	many := make([]string, MaxLabels+1)
	for i := range many {
		many[i] = "k" + strings.Repeat("x", i)
	}
	if err := ValidateLabels(many); !errors.Is(err, ErrInvalid) {
		t.Errorf("ValidateLabels(%d labels) = %v; want ErrInvalid", len(many), err)
	}
	if err := ValidateLabelRequirements(many); !errors.Is(err, ErrInvalid) {
		t.Errorf("ValidateLabelRequirements(%d) = %v; want ErrInvalid", len(many), err)
	}
}

func TestLabelsSatisfy(t *testing.T) {
	t.Parallel()
	nodes := map[string][]string{
		"none":   nil,
		"eu":     {"region=eu"},
		"us":     {"region=us"},
		"ap":     {"region=ap"},
		"gpu":    {"gpu"},
		"gpuval": {"gpu=a100"},
		"eu-gpu": {"gpu", "region=eu"},
		"empty":  {"region="},
	}
	cases := []struct {
		req  []string
		want []string // the nodes that satisfy req
	}{
		{nil, []string{"none", "eu", "us", "ap", "gpu", "gpuval", "eu-gpu", "empty"}},
		{[]string{"region=eu"}, []string{"eu", "eu-gpu"}},
		{[]string{"region=eu|us"}, []string{"eu", "us", "eu-gpu"}},
		{[]string{"region in (eu,us)"}, []string{"eu", "us", "eu-gpu"}},
		{[]string{"region!=eu"}, []string{"none", "us", "ap", "gpu", "gpuval", "empty"}},
		{[]string{"region!=eu|us"}, []string{"none", "ap", "gpu", "gpuval", "empty"}},
		{[]string{"region notin (eu,us)"}, []string{"none", "ap", "gpu", "gpuval", "empty"}},
		{[]string{"region"}, []string{"eu", "us", "ap", "eu-gpu", "empty"}},
		{[]string{"!region"}, []string{"none", "gpu", "gpuval"}},
		{[]string{"gpu"}, []string{"gpu", "gpuval", "eu-gpu"}},
		{[]string{"!gpu"}, []string{"none", "eu", "us", "ap", "empty"}},
		{[]string{"gpu", "region=eu|us"}, []string{"eu-gpu"}},
		{[]string{"!gpu", "region=eu|us"}, []string{"eu", "us"}},
		{[]string{"region="}, []string{"empty"}},
		{[]string{"gpu=a100"}, []string{"gpuval"}},
		{[]string{"region=eu", "region=us"}, nil},
	}
	for _, c := range cases {
		var got []string
		for _, name := range []string{"none", "eu", "us", "ap", "gpu", "gpuval", "eu-gpu", "empty"} {
			have := nodes[name]
			sat := LabelsSatisfy(c.req, have)
			if sat {
				got = append(got, name)
			}
			// The parsed form agrees with the fast path.
			parsed := true
			for _, r := range c.req {
				lr, err := ParseLabelRequirement(r)
				if err != nil {
					t.Fatalf("ParseLabelRequirement(%q): %v", r, err)
				}
				parsed = parsed && lr.Matches(have)
			}
			if parsed != sat {
				t.Errorf("%v on %v: Matches %v, LabelsSatisfy %v", c.req, have, parsed, sat)
			}
			if unmet := UnmetLabels(c.req, have); (len(unmet) == 0) != sat {
				t.Errorf("%v on %v: UnmetLabels %v, LabelsSatisfy %v", c.req, have, unmet, sat)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("LabelsSatisfy(%q): satisfied by %v; want %v", c.req, got, c.want)
		}
	}
	if LabelsSatisfy([]string{"region in (eu"}, []string{"region=eu"}) || LabelsSatisfy([]string{"region in (eu)x"}, []string{"region=eu"}) {
		t.Error("a malformed requirement is satisfied; want it to hold for no node")
	}
}

func TestNormLabels(t *testing.T) {
	t.Parallel()
	got := NormLabels([]string{"region in (us,eu)", "gpu", "region=eu|us", "!ssd", "gpu"})
	want := []string{"!ssd", "gpu", "region=eu|us"}
	if !slices.Equal(got, want) {
		t.Errorf("NormLabels = %q; want %q", got, want)
	}
	if NormLabels(nil) != nil || NormLabels([]string{}) != nil {
		t.Error("NormLabels of none is not nil")
	}
}

func TestClaimableLabels(t *testing.T) {
	t.Parallel()
	p := &ClaimParams{}
	if p.Claimable("k", []string{"gpu"}) {
		t.Error("a claimer with no labels may take a lane requiring gpu")
	}
	if !p.Claimable("k", []string{"!gpu"}) || !p.Claimable("k", nil) {
		t.Error("a claimer with no labels may not take a lane requiring !gpu, or none")
	}
	p = &ClaimParams{Kinds: []string{"a"}, Labels: []string{"region=eu"}}
	if !p.Claimable("a", []string{"region=eu|us"}) || p.Claimable("b", nil) || p.Claimable("a", []string{"region!=eu"}) {
		t.Error("Claimable disagrees with kinds and LabelsSatisfy")
	}
}

// FuzzParseLabelRequirement checks that whatever parses has a compact form
// that parses back to itself and is valid, and that the compact form and
// the parsed form agree on every node of a few.
func FuzzParseLabelRequirement(f *testing.F) {
	for _, s := range []string{"region=eu", "gpu", "!gpu", "region!=eu|us", "region in (eu,us)", "r notin (a)", "a=", "(", "k in (a,,b)"} {
		f.Add(s)
	}
	nodes := [][]string{nil, {"region=eu"}, {"gpu"}, {"gpu=x", "region=us"}, {"a="}, {"k=a", "k=b"}}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseLabelRequirement(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseLabelRequirement(%q) = %v; want ErrInvalid", s, err)
			}
			return
		}
		c := r.String()
		again, err := ParseLabelRequirement(c)
		if err != nil || again.String() != c {
			t.Fatalf("compact form %q of %q: %v, %v", c, s, again, err)
		}
		if n := NormLabels([]string{s}); len(n) != 1 || n[0] != c {
			t.Fatalf("NormLabels(%q) = %q; want [%q]", s, n, c)
		}
		for _, have := range nodes {
			if r.Matches(have) != LabelRequirementHolds(c, have) || r.Matches(have) != LabelRequirementHolds(s, have) {
				t.Fatalf("%q on %v: Matches %v, Holds(compact) %v, Holds(input) %v", s, have, r.Matches(have), LabelRequirementHolds(c, have), LabelRequirementHolds(s, have))
			}
		}
	})
}

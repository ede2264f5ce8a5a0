package job

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

// htmlish has a MarshalJSON of its own that returns unescaped HTML
// characters and spaces, which json.Marshal compacts and escapes.
type htmlish struct{}

func (htmlish) MarshalJSON() ([]byte, error) { return []byte(`{ "a" : "<b>&" }`), nil }

// level is a named integer: its values are checked by decoding, as any
// type that is not a predeclared one.
type level int

func (l *level) UnmarshalJSON(b []byte) error {
	if string(b) == "7" {
		return errors.New("level 7 is refused")
	}
	return json.Unmarshal(b, (*int)(l))
}

// TestEncodeArgsAsBefore checks that the arguments encoded for storage
// are byte for byte what json.Marshal gives for each argument's JSON as
// one []json.RawMessage (the encoding stored before issue 19's shortcut),
// for executors with and without parameters of their own.
func TestEncodeArgsAsBefore(t *testing.T) {
	cases := [][]any{
		{},
		{"user@example.com", 42},
		{"<script>&\u2028", -1},
		{"", 0},
		{"tab\there \"quoted\"", math.MaxInt64},
	}
	e, err := newExecutor(func(s string, n int) {})
	if err != nil {
		t.Fatal(err)
	}
	any3, err := newExecutor(func(a, b any, c []int) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range cases {
		want := oldEncoding(t, args)
		if len(args) == 2 {
			got, err := e.encodeArgs(args)
			if err != nil {
				t.Fatalf("encodeArgs(%q): %v", args, err)
			}
			if string(got) != string(want) {
				t.Errorf("encodeArgs(%q) = %s, want %s", args, got, want)
			}
		}
		got, err := encodeJSONArgs(args)
		if err != nil {
			t.Fatalf("encodeJSONArgs(%q): %v", args, err)
		}
		if string(got) != string(want) {
			t.Errorf("encodeJSONArgs(%q) = %s, want %s", args, got, want)
		}
	}
	args := []any{htmlish{}, map[string]any{"z": 1.5, "a": []string{"<", ">"}}, []int{1, 2}}
	got, err := any3.encodeArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	if want := oldEncoding(t, args); string(got) != string(want) {
		t.Errorf("encodeArgs(%v) = %s, want %s", args, got, want)
	}
}

func oldEncoding(t *testing.T, args []any) []byte {
	t.Helper()
	raw := make([]json.RawMessage, len(args))
	for i, a := range args {
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		raw[i] = b
	}
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEncodeArgsStillChecks: arguments not of exactly their parameter's
// predeclared type are still decoded into it before anything is stored.
func TestEncodeArgsStillChecks(t *testing.T) {
	for _, c := range []struct {
		fn   any
		args []any
	}{
		{func(n int8) {}, []any{300}},                // an int that int8 cannot hold
		{func(n uint) {}, []any{-1}},                 // a negative int for a uint
		{func(n int) {}, []any{"42"}},                // a string for an int
		{func(s string) {}, []any{42}},               // an int for a string
		{func(f float32) {}, []any{math.MaxFloat64}}, // too large for a float32
		{func(l level) {}, []any{level(7)}},          // a named type's own check
		{func(l level) {}, []any{7}},                 // an int for a named type
	} {
		e, err := newExecutor(c.fn)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := e.encodeArgs(c.args); !errors.Is(err, ErrInvalidArguments) {
			t.Errorf("%T with %v: encodeArgs = %s, %v; want ErrInvalidArguments", c.fn, c.args, b, err)
		}
	}
	e, err := newExecutor(func(l level, n int8, f float32) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.encodeArgs([]any{level(3), int8(-128), float32(1.5)}); err != nil {
		t.Errorf("encodeArgs of fitting arguments: %v", err)
	}
}

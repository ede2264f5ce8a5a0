package job

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

type pt struct {
	X int    `json:"x"`
	S string `json:"s"`
}

// TestExecutorSignatures binds many signatures, encodes arguments the way
// ScheduleJob does, decodes them the way a worker does and calls the
// executor.
func TestExecutorSignatures(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	n := 7
	cases := []struct {
		name string
		fn   any
		args []any
		want string // JSON of the results
		err  string // substring of the returned error
	}{
		{"no params no results", func() {}, nil, "", ""},
		{"ints", func(a, b int) int { return a + b }, []any{2, 3}, "[5]", ""},
		{"int from int64", func(a int64) int64 { return a }, []any{int64(1) << 60}, "[1152921504606846976]", ""},
		{"string error", func(s string) (string, error) { return s + "!", nil }, []any{"hi"}, `["hi!"]`, ""},
		{"returns error", func() error { return errors.New("nope") }, nil, "", "nope"},
		{"float bool", func(f float64, b bool) (float64, bool) { return f / 2, !b }, []any{3.0, false}, "[1.5,true]", ""},
		{"struct", func(p pt) string { return p.S }, []any{pt{1, "s"}}, `["s"]`, ""},
		{"pointer", func(p *pt) int { return p.X }, []any{&pt{X: 4}}, "[4]", ""},
		{"nil pointer", func(p *pt) bool { return p == nil }, []any{(*pt)(nil)}, "[true]", ""},
		{"slice map", func(xs []string, m map[string]int) int { return len(xs) + m["k"] }, []any{[]string{"a", "b"}, map[string]int{"k": 10}}, "[12]", ""},
		{"time", func(t time.Time) string { return t.Format(time.RFC3339) }, []any{at}, `["2026-11-22T10:00:00Z"]`, ""},
		{"int pointer", func(p *int) int { return *p }, []any{&n}, "[7]", ""},
		{"ctx", func(ctx context.Context, a int) int { return a }, []any{1}, "[1]", ""},
		{"instance", func(ji Instance) string { return ji.Info().Kind }, nil, `["k"]`, ""},
		{"ctx instance", func(ctx context.Context, ji Instance, a int) int { return a }, []any{9}, "[9]", ""},
		{"instance ctx", func(ji Instance, ctx context.Context) bool { return ctx != nil && ji != nil }, nil, "[true]", ""},
		{"variadic", func(p string, xs ...int) int { return len(xs) }, []any{"x", 1, 2}, "[2]", ""},
		{"any", func(v any) any { return v }, []any{map[string]any{"a": 1}}, `[{"a":1}]`, ""},
		{"panic", func() { panic("boom") }, nil, "", "panicked: boom"},
		{"many results", func() (int, string, []int, error) { return 1, "a", []int{2}, nil }, nil, `[1,"a",[2]]`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := newExecutor(c.fn)
			if err != nil {
				t.Fatalf("newExecutor: %v", err)
			}
			data, err := e.encodeArgs(c.args)
			if err != nil {
				t.Fatalf("encodeArgs: %v", err)
			}
			vals, err := e.decodeArgs(data)
			if err != nil {
				t.Fatalf("decodeArgs(%s): %v", data, err)
			}
			res, err := e.call(context.Background(), newInstance(&store.Instance{Kind: "k"}, nil), vals)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("call error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if got := string(encodeResults(res)); got != c.want {
				t.Errorf("results %s, want %s", got, c.want)
			}
		})
	}
}

func TestExecutorRejects(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		fn   any
	}{
		{"nil", nil},
		{"not a func", 42},
		{"nil func", (func())(nil)},
		{"ctx not leading", func(a int, ctx context.Context) {}},
		{"chan param", func(c chan int) {}},
		{"func param", func(f func()) {}},
	} {
		if _, err := newExecutor(c.fn); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s: %v, want ErrInvalidJob", c.name, err)
		}
	}
}

func TestArgumentMismatch(t *testing.T) {
	t.Parallel()
	e, err := newExecutor(func(ctx context.Context, a int, p pt, xs []int) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []any
	}{
		{"too few", []any{1, pt{}}},
		{"too many", []any{1, pt{}, []int{}, 4}},
		{"string for int", []any{"1", pt{}, []int{}}},
		{"float for int", []any{1.5, pt{}, []int{}}},
		{"int for struct", []any{1, 2, []int{}}},
		{"map for slice", []any{1, pt{}, map[string]int{}}},
		{"unencodable", []any{1, pt{}, []int{}, func() {}}},
	} {
		if _, err := e.encodeArgs(c.args); !errors.Is(err, ErrInvalidArguments) {
			t.Errorf("%s: %v, want ErrInvalidArguments", c.name, err)
		}
	}
	for _, stored := range []string{`{`, `{"a":1}`, `[1]`, `["x",{},[]]`} {
		if _, err := e.decodeArgs([]byte(stored)); !errors.Is(err, ErrInvalidArguments) {
			t.Errorf("decode %s: %v, want ErrInvalidArguments", stored, err)
		}
	}
	v, err := newExecutor(func(s string, xs ...int) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.encodeArgs(nil); !errors.Is(err, ErrInvalidArguments) {
		t.Errorf("variadic without its fixed argument: %v", err)
	}
	if _, err := v.encodeArgs([]any{"s", 1, "two"}); !errors.Is(err, ErrInvalidArguments) {
		t.Errorf("variadic with a wrong element: %v", err)
	}
}

func TestUnencodableResultKept(t *testing.T) {
	t.Parallel()
	got := string(encodeResults([]any{1, func() {}}))
	if !strings.HasPrefix(got, `[1,"0x`) {
		t.Errorf("results %s: want the func kept as text", got)
	}
}

func TestJobSignature(t *testing.T) {
	j, err := NewJob(WithKind("sig"), WithExecutor(func(ctx context.Context, a, b int) (int, error) { return a + b, nil }))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := j.Signature(), "func(context.Context, int, int) (int, error)"; got != want {
		t.Fatalf("Signature() = %q, want %q", got, want)
	}
}

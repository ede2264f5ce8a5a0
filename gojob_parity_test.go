package job_test

// go-job parity: the behaviours go-job documents (its README, doc/ and
// Examples), each written here as a test against jobkit, from the
// documentation only. Behaviours that touch the store run on every store
// as jobtest scenarios named "GoJob…" (jobtest/gojob.go, run by each store
// plugin's tests and through jobd); the ones here are decided before the
// store is reached, or need only one.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
)

// concatString is go-job's struct argument and result of its overview.
type concatString struct {
	A, B, S string
}

// runOne schedules kind with args on a fresh started manager with j
// registered and returns the instance once it has ended.
func runOne(t *testing.T, j *job.Job, args ...any) *job.InstanceInfo {
	t.Helper()
	m := newManager(t, job.WithStore(memStore(t)))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(context.Background(), j.Kind(), job.WithArguments(args...))
	if err != nil {
		t.Fatalf("ScheduleJob(%s, %q): %v", j.Kind(), args, err)
	}
	return waitInstance(t, m, ji.ID, job.Completed, job.Terminated, job.TimedOut, job.Canceled)
}

// "go-job will automatically convert the provided arguments to match the
// types expected by the job function": WithArguments("42", "58") for
// func(x, y int). Opt-in in jobkit.
func TestGoJobStringsForIntParameters(t *testing.T) {
	t.Parallel()
	sum := mustJob(t, job.WithKind("sum"), job.WithArgumentConversion(),
		job.WithExecutor(func(x, y int) int { return x + y }))
	ji := runOne(t, sum, "42", "58")
	var got int
	if err := ji.ResultsInto(&got); err != nil || ji.State != job.Completed || got != 100 {
		t.Fatalf("sum(\"42\", \"58\"): state %v, result %d (%v), error %q; want completed, 100", ji.State, got, err, ji.Err())
	}
	// Converted when scheduled: the store holds numbers.
	var a, b any
	if err := ji.ArgumentsInto(&a, &b); err != nil {
		t.Fatal(err)
	}
	if a != float64(42) || b != float64(58) {
		t.Errorf("stored arguments %#v, %#v; want the numbers 42, 58", a, b)
	}
}

// The default stays strict: a string for an int is refused before
// anything is stored, and the error names the option that converts it.
func TestGoJobConversionIsOptIn(t *testing.T) {
	t.Parallel()
	m := newManager(t, job.WithStore(memStore(t)))
	if err := m.RegisterJob(mustJob(t, job.WithKind("sum"), job.WithExecutor(func(x, y int) int { return x + y }))); err != nil {
		t.Fatal(err)
	}
	_, err := m.ScheduleJob(context.Background(), "sum", job.WithArguments("42", "58"))
	if !errors.Is(err, job.ErrInvalidArguments) || !strings.Contains(err.Error(), "argument 1") ||
		!strings.Contains(err.Error(), "job.WithArgumentConversion()") {
		t.Fatalf("strict ScheduleJob(\"42\", \"58\"): %v; want ErrInvalidArguments naming argument 1 and WithArgumentConversion", err)
	}
	// A mismatch conversion cannot fix does not suggest it.
	_, err = m.ScheduleJob(context.Background(), "sum", job.WithArguments([]int{1}, 2))
	if !errors.Is(err, job.ErrInvalidArguments) || strings.Contains(err.Error(), "WithArgumentConversion") {
		t.Fatalf("ScheduleJob([1], 2): %v; want ErrInvalidArguments without a conversion hint", err)
	}
	if n := countInstances(t, m); n != 0 {
		t.Errorf("%d instances stored after refused schedules; want 0", n)
	}
}

func countInstances(t *testing.T, m *job.Manager) int {
	t.Helper()
	insts, err := m.LookupInstances(context.Background(), job.NewQuery())
	if err != nil {
		t.Fatal(err)
	}
	return len(insts)
}

// Numbers and bools for string parameters, and strings for bools,
// floats and durations.
func TestGoJobNumbersForStringParameters(t *testing.T) {
	t.Parallel()
	j := mustJob(t, job.WithKind("join"), job.WithArgumentConversion(),
		job.WithExecutor(func(a, b, c string, ok bool, f float64, d time.Duration) (string, bool, float64, time.Duration) {
			return a + "," + b + "," + c, ok, f, d
		}))
	ji := runOne(t, j, 1, 2.5, true, "true", "1.5", "90s")
	var (
		s  string
		ok bool
		f  float64
		d  time.Duration
	)
	if err := ji.ResultsInto(&s, &ok, &f, &d); err != nil || s != "1,2.5,true" || !ok || f != 1.5 || d != 90*time.Second {
		t.Fatalf("join: state %v, results %q %v %v %v (%v), error %q; want \"1,2.5,true\" true 1.5 1m30s", ji.State, s, ok, f, d, err, ji.Err())
	}
}

// "Alternatively, you can pass arguments as a JSON string" for a struct
// parameter; also slices and maps.
func TestGoJobJSONStringForStructParameter(t *testing.T) {
	t.Parallel()
	j := mustJob(t, job.WithKind("concat"), job.WithArgumentConversion(),
		job.WithExecutor(func(p *concatString, xs []int, m map[string]int) *concatString {
			p.S = p.A + ", " + p.B
			for _, x := range xs {
				p.S += " " + strings.Repeat("+", x+m["extra"])
			}
			return p
		}))
	ji := runOne(t, j, `{"A": "Hello", "B": "world!"}`, "[1, 2]", `{"extra": 1}`)
	var got concatString
	if err := ji.ResultsInto(&got); err != nil || got.S != "Hello, world! ++ +++" {
		t.Fatalf("concat: state %v, result %+v (%v), error %q; want S \"Hello, world! ++ +++\"", ji.State, got, err, ji.Err())
	}
	// A struct given as a struct still works, unconverted.
	ji = runOne(t, j, &concatString{A: "a", B: "b"}, []int{}, map[string]int{})
	if err := ji.ResultsInto(&got); err != nil || got.S != "a, b" {
		t.Fatalf("concat of a struct: %+v (%v), error %q", got, err, ji.Err())
	}
}

// A conversion that fails is refused when scheduled, before anything is
// stored, naming the argument and the type it must have.
func TestGoJobBadConversionRefusedBeforeStoring(t *testing.T) {
	t.Parallel()
	m := newManager(t, job.WithStore(memStore(t)))
	for _, j := range []*job.Job{
		mustJob(t, job.WithKind("ints"), job.WithArgumentConversion(), job.WithExecutor(func(a int, b int8) {})),
		mustJob(t, job.WithKind("struct"), job.WithArgumentConversion(), job.WithExecutor(func(p concatString) {})),
	} {
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		kind string
		args []any
		want []string
	}{
		{"ints", []any{"abc", 1}, []string{"argument 1", "int", `"abc"`}},
		{"ints", []any{1, "300"}, []string{"argument 2", "int8", "out of range"}},
		{"ints", []any{[]string{"1"}, 1}, []string{"argument 1", "only strings, numbers, bools"}},
		{"struct", []any{`{"A": `}, []string{"argument 1", "job_test.concatString", "not JSON text"}},
		{"struct", []any{`["A"]`}, []string{"argument 1", "job_test.concatString"}},
	} {
		_, err := m.ScheduleJob(context.Background(), c.kind, job.WithArguments(c.args...))
		if !errors.Is(err, job.ErrInvalidArguments) {
			t.Errorf("%s%q: %v; want ErrInvalidArguments", c.kind, c.args, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s%q: %v; want it to say %q", c.kind, c.args, err, w)
			}
		}
	}
	if n := countInstances(t, m); n != 0 {
		t.Errorf("%d instances stored after refused schedules; want 0", n)
	}
}

// A definition carries the option: a job built from it converts, and
// Job.Definition publishes it.
func TestGoJobConversionInDefinitions(t *testing.T) {
	t.Parallel()
	j := mustJob(t, job.WithDefinition(job.Definition{Kind: "sum", ConvertArguments: true}),
		job.WithExecutor(func(x, y int) int { return x + y }))
	if !j.ConvertsArguments() || !j.Definition().ConvertArguments {
		t.Fatalf("job from a converting definition: ConvertsArguments %v, Definition().ConvertArguments %v; want both true",
			j.ConvertsArguments(), j.Definition().ConvertArguments)
	}
	if ji := runOne(t, j, "1", "2"); ji.State != job.Completed {
		t.Fatalf("sum(\"1\", \"2\") from a definition: %v %q", ji.State, ji.Err())
	}
	if mustJob(t, job.WithKind("strict"), job.WithExecutor(func() {})).Definition().ConvertArguments {
		t.Error("a job without the option publishes ConvertArguments")
	}
}

// A terminate verdict that panics is recovered and counted, and the
// attempt's own error stands.
func TestGoJobVerdictPanicKeepsTheFailure(t *testing.T) {
	t.Parallel()
	m := newManager(t, job.WithStore(memStore(t)))
	j := mustJob(t, job.WithKind("boom"), job.WithMaxRetries(0),
		job.WithExecutor(func() error { return errors.New("boom") }),
		job.WithTerminateVerdict(func(job.Instance, error) error { panic("verdict bug") }))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(context.Background(), "boom")
	if err != nil {
		t.Fatal(err)
	}
	got := waitInstance(t, m, ji.ID, job.Completed, job.Terminated)
	if got.State != job.Terminated || got.Err() == nil || got.Err().Error() != "boom" {
		t.Errorf("state %v error %v; want terminated with \"boom\"", got.State, got.Err())
	}
	if st := m.HandlerStats(); st.Panics != 1 {
		t.Errorf("HandlerStats %+v; want 1 panic", st)
	}
}

// go-job's ResizeWorkers refuses 0; jobkit's SetWorkers(0) is the
// documented pause: nothing new is claimed, the running attempt finishes,
// and SetWorkers(n) resumes.
func TestGoJobSetWorkersZeroPauses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t, job.WithStore(memStore(t)), job.WithWorkers(2), job.WithPollInterval(10*time.Millisecond))
	release := make(chan struct{})
	started := make(chan string, 4)
	if err := m.RegisterJob(mustJob(t, job.WithKind("work"), job.WithExecutor(func(ji job.Instance) {
		started <- ji.Info().ID
		<-release
	}))); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	running, err := m.ScheduleJob(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != running.ID {
		t.Fatalf("started %s, want %s", id, running.ID)
	}
	if err := m.SetWorkers(0); err != nil {
		t.Fatalf("SetWorkers(0): %v", err)
	}
	if err := m.SetWorkers(-1); !errors.Is(err, job.ErrInvalidOption) {
		t.Fatalf("SetWorkers(-1): %v, want ErrInvalidOption", err)
	}
	paused, err := m.ScheduleJob(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	// The schedule wakes the claim loop, and it polls every 10 ms: twenty
	// polls later the instance is still waiting.
	until := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(until) {
		if ji, err := m.GetInstance(ctx, paused.ID); err != nil || ji.State != job.Scheduled {
			t.Fatalf("instance scheduled while paused: %v, %v; want it to stay scheduled", ji.State, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release) // the attempt that ran before the pause finishes
	waitInstance(t, m, running.ID, job.Completed)
	waitFor(t, "the paused manager's last slot to free", func() bool {
		size, busy := m.Workers()
		return size == 0 && busy == 0
	})
	if err := m.SetWorkers(1); err != nil {
		t.Fatal(err)
	}
	waitInstance(t, m, paused.ID, job.Completed)
}

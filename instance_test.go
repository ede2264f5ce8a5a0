package job_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

type order struct {
	ID    string
	Items []string
}

type receipt struct {
	OrderID string
	Count   int
	At      time.Time
}

// TestResultsAndArgumentsInto reads stored arguments and results back into
// typed values, and names what does not fit.
func TestResultsAndArgumentsInto(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	var inside error
	m := newManager(t)
	err := m.RegisterJob(mustJob(t, job.WithKind("pack"),
		job.WithExecutor(func(ji job.Instance, o order, n int64) (receipt, int64, error) {
			var got order
			inside = ji.Info().ArgumentsInto(&got, nil)
			return receipt{OrderID: o.ID, Count: len(o.Items), At: at}, n * 2, nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const big = int64(1) << 60 // survives JSON only as an integer, not a float64
	ji, err := m.ScheduleJob(ctx, "pack", job.WithArguments(order{ID: "A-1", Items: []string{"book", "pen"}}, big/2))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := m.GetInstance(ctx, ji.ID) // before Start: not yet run
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if inside != nil {
		t.Errorf("ArgumentsInto inside the executor: %v", inside)
	}
	done, err := m.GetInstance(ctx, ji.ID)
	if err != nil || done.State != job.Completed {
		t.Fatalf("lookup: %v, state %v", err, done.State)
	}

	var o order
	var n int64
	if err := done.ArgumentsInto(&o, &n); err != nil {
		t.Fatalf("ArgumentsInto: %v", err)
	}
	if o.ID != "A-1" || len(o.Items) != 2 || n != big/2 {
		t.Errorf("arguments %+v, %d", o, n)
	}
	var r receipt
	var twice int64
	if err := done.ResultsInto(&r, &twice); err != nil {
		t.Fatalf("ResultsInto: %v", err)
	}
	if r.OrderID != "A-1" || r.Count != 2 || !r.At.Equal(at) || twice != big {
		t.Errorf("results %+v, %d; want A-1, 2, %v, %d", r, twice, at, big)
	}
	if err := done.ResultsInto(nil, &twice); err != nil || twice != big {
		t.Errorf("ResultsInto skipping the first: %v, %d", err, twice)
	}

	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"too few", done.ResultsInto(&r), "2 results, 1 pointers given"},
		{"too many", done.ResultsInto(&r, &twice, &n), "2 results, 3 pointers given"},
		{"wrong type", done.ResultsInto(&r, new(string)), "result 2"},
		{"not a pointer", done.ResultsInto(r, nil), "want a non-nil pointer"},
		{"nil pointer", done.ResultsInto((*receipt)(nil), nil), "want a non-nil pointer"},
		{"not completed", pending.ResultsInto(&r), "0 results"},
	} {
		if !errors.Is(c.err, job.ErrInvalidResults) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("ResultsInto, %s: %v; want ErrInvalidResults saying %q", c.name, c.err, c.want)
		}
	}
	if err := done.ArgumentsInto(new(int), &n); !errors.Is(err, job.ErrInvalidArguments) || !strings.Contains(err.Error(), "argument 1") {
		t.Errorf("ArgumentsInto, wrong type: %v; want ErrInvalidArguments naming argument 1", err)
	}
}

// TestInstanceInfoCarriesEveryStoredField checks that the data a lookup
// returns has a field for every field of the stored record, that what
// ScheduleJob returns carries the stored values (the ones the Instance
// interface once left out: sequence number, unique key's expiry, the
// arguments as stored JSON), and that Clone copies deeply.
func TestInstanceInfoCarriesEveryStoredField(t *testing.T) {
	ctx := context.Background()
	info := reflect.TypeFor[job.InstanceInfo]()
	rec := reflect.TypeFor[store.Instance]()
	for f := range rec.Fields() {
		if _, ok := info.FieldByName(f.Name); !ok {
			t.Errorf("store.Instance.%s has no field in job.InstanceInfo", f.Name)
		}
	}
	m := newManager(t)
	if err := m.RegisterJob(mustJob(t, job.WithKind("rec"), job.WithExecutor(func(n int) {}))); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(ctx, "rec", job.WithArguments(7), job.WithUniqueKey("k", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if string(ji.Args) != "[7]" || ji.Seq == 0 || ji.UniqueUntil.IsZero() || ji.UniqueKey != "k" {
		t.Fatalf("scheduled instance %+v", ji)
	}
	got, err := m.GetInstance(ctx, ji.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != ji.ID || string(got.Args) != "[7]" || got.Seq != ji.Seq || !got.UniqueUntil.Equal(ji.UniqueUntil) {
		t.Fatalf("lookup %+v does not match scheduled %+v", got, ji)
	}
	c := ji.Clone()
	c.Args[1] = '8'
	if string(ji.Args) != "[7]" {
		t.Fatalf("Clone shares the arguments: args now %s", ji.Args)
	}
	typed, err := job.Register(m, "rec-typed", func(context.Context, int) (int, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	ti, err := typed.Schedule(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if string(ti.Args) != "[3]" || ti.Seq == 0 {
		t.Fatalf("TypedInstance's data: %+v", ti.InstanceInfo)
	}
	if (*job.InstanceInfo)(nil).Clone() != nil {
		t.Fatal("Clone of nil: not nil")
	}
}

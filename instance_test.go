package job_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
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
			inside = ji.ArgumentsInto(&got, nil)
			return receipt{OrderID: o.ID, Count: len(o.Items), At: at}, n * 2, nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const big = int64(1) << 60 // survives JSON only as an integer, not a float64
	ji, err := m.ScheduleJob(ctx, "pack", job.WithArguments(order{ID: "A-1", Items: []string{"book", "pen"}}, big/2))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := m.LookupInstance(ctx, ji.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if inside != nil {
		t.Errorf("ArgumentsInto inside the executor: %v", inside)
	}
	done, err := m.LookupInstance(ctx, ji.ID())
	if err != nil || done.State() != job.Completed {
		t.Fatalf("lookup: %v, state %v", err, done.State())
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

func TestInstanceRecordCopiesEveryStoredField(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	if err := m.RegisterJob(mustJob(t, job.WithKind("rec"), job.WithExecutor(func(n int) {}))); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(ctx, "rec", job.WithArguments(7), job.WithUniqueKey("k", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := job.InstanceRecord(ji)
	if !ok {
		t.Fatal("InstanceRecord of a scheduled instance: ok false")
	}
	if rec.ID != ji.ID() || string(rec.Args) != "[7]" || rec.Seq == 0 || rec.UniqueUntil.IsZero() {
		t.Fatalf("record %+v does not match instance %v", rec, ji)
	}
	rec.Args[1] = '8'
	again, _ := job.InstanceRecord(ji)
	if string(again.Args) != "[7]" {
		t.Fatalf("InstanceRecord hands out the instance's own record: args now %s", again.Args)
	}
	typed, err := job.Register(m, "rec-typed", func(context.Context, int) (int, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	ti, err := typed.Schedule(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if rec, ok := job.InstanceRecord(ti); !ok || rec.ID != ti.ID() {
		t.Fatalf("InstanceRecord of a TypedInstance: %v, %v", rec, ok)
	}
	if _, ok := job.InstanceRecord(nil); ok {
		t.Fatal("InstanceRecord(nil): ok true")
	}
}

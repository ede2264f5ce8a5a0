package job_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jobkit/job"
)

// searchFixture runs 400 instances on memdb: "echo" instances whose
// arguments, results or (for "fail") errors carry "NeEdLe" in a few
// known ones, and returns the IDs that hold it, newest first.
func searchFixture(t *testing.T) (*job.Manager, []string) {
	t.Helper()
	ctx := context.Background()
	m := newManager(t, job.WithStore(memStore(t)), job.WithWorkers(4))
	reg := func(j *job.Job) {
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	reg(mustJob(t, job.WithKind("echo"), job.WithExecutor(func(s string) string {
		if s == "say it" {
			return "the needle said"
		}
		return "out " + s
	})))
	reg(mustJob(t, job.WithKind("fail"), job.WithMaxRetries(0), job.WithExecutor(func(s string) error {
		return errors.New("failed on " + s)
	})))
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 400 {
		kind, arg := "echo", fmt.Sprintf("hay %d", i)
		switch {
		case i%97 == 5:
			arg = fmt.Sprintf("a NeEdLe in args %d", i) // in the arguments
		case i%89 == 7:
			arg = "say it" // in the result
		case i%83 == 9:
			kind, arg = "fail", fmt.Sprintf("nEEDLE %d", i) // in the error (and the arguments)
		case i%7 == 0:
			kind = "fail" // an error without it
		}
		ji, err := m.ScheduleJob(ctx, kind, job.WithArguments(arg))
		if err != nil {
			t.Fatal(err)
		}
		if arg != fmt.Sprintf("hay %d", i) {
			want = append(want, ji.ID)
		}
	}
	waitFor(t, "every instance finished", func() bool {
		rows, err := m.Admin().CountInstances(ctx, "", "")
		if err != nil {
			t.Fatal(err)
		}
		var done int64
		for _, r := range rows {
			done += r.States[job.Completed] + r.States[job.Terminated]
		}
		return done == 400
	})
	slices.Reverse(want) // newest first
	return m, want
}

// TestSearchInstancesFindsTextInArgumentsResultsAndErrors: a search finds
// the text in arguments, results and errors, ignoring case, newest first;
// paging by Next returns every match once; a small scan limit stops each
// call early with a cursor that continues where it stopped.
func TestSearchInstancesFindsTextInArgumentsResultsAndErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, want := searchFixture(t)
	if len(want) < 10 {
		t.Fatalf("fixture has %d needles", len(want))
	}
	ids := func(in []*job.InstanceInfo) []string {
		var out []string
		for _, ji := range in {
			out = append(out, ji.ID)
		}
		return out
	}

	got, err := m.SearchInstances(ctx, job.NewQuery(), job.SearchParams{Text: "needle"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(got.Items), want) {
		t.Fatalf("search found %v, want %v", ids(got.Items), want)
	}
	if got.Next != "" || got.Scanned != 400 {
		t.Fatalf("one call over 400 instances: Next %q, Scanned %d; want \"\" and 400", got.Next, got.Scanned)
	}

	// Narrowed by the store's own filters: failed ones only.
	failed, err := m.SearchInstances(ctx, job.NewQuery(job.WithQueryState(job.Terminated)), job.SearchParams{Text: "NEEDLE"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ji := range failed.Items {
		if ji.Kind != "fail" || ji.Error == "" {
			t.Fatalf("a terminated search returned %s %s (%v)", ji.Kind, ji.State, ji.Error)
		}
	}
	if len(failed.Items) == 0 || failed.Scanned >= 400 {
		t.Fatalf("terminated search: %d found, %d scanned", len(failed.Items), failed.Scanned)
	}

	// Pages of 3 matches, then a scan limit of 50: every match once, in
	// order, and no call reads more than it may.
	for _, c := range []struct {
		name  string
		limit int
		scan  int
	}{{"pages of 3", 3, 0}, {"scan limit 50", 0, 50}, {"both", 2, 30}} {
		var all []string
		cursor, calls := "", 0
		for {
			opts := []job.QueryOption{job.WithQueryCursor(cursor)}
			if c.limit > 0 {
				opts = append(opts, job.WithQueryLimit(c.limit))
			}
			pg, err := m.SearchInstances(ctx, job.NewQuery(opts...), job.SearchParams{Text: "needle", ScanLimit: c.scan})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			calls++
			if c.limit > 0 && len(pg.Items) > c.limit {
				t.Fatalf("%s: a page of %d matches", c.name, len(pg.Items))
			}
			if c.scan > 0 && pg.Scanned > c.scan {
				t.Fatalf("%s: a call scanned %d", c.name, pg.Scanned)
			}
			all = append(all, ids(pg.Items)...)
			if cursor = pg.Next; cursor == "" {
				break
			}
		}
		if !slices.Equal(all, want) {
			t.Fatalf("%s: paging found %v, want %v", c.name, all, want)
		}
		if c.scan == 50 && calls < 400/50 {
			t.Fatalf("%s: %d calls, want at least 8", c.name, calls)
		}
	}

	// Match narrows further; an empty text matches every instance.
	onlyFail, err := m.SearchInstances(ctx, job.NewQuery(job.WithQueryLimit(1000)), job.SearchParams{Match: func(ji *job.InstanceInfo) bool { return ji.Kind == "fail" }})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(onlyFail.Items); n < 50 || n > 70 {
		t.Fatalf("Match kind fail found %d", n)
	}

	for _, bad := range []job.SearchParams{{Text: "x", ScanLimit: -1}, {Text: "x", ScanLimit: job.MaxSearchScan + 1}} {
		if _, err := m.SearchInstances(ctx, job.NewQuery(), bad); !errors.Is(err, job.ErrInvalidOption) {
			t.Errorf("scan limit %d: %v, want ErrInvalidOption", bad.ScanLimit, err)
		}
	}
	if _, err := m.SearchInstances(ctx, job.NewQuery(job.WithQueryLimit(1001)), job.SearchParams{Text: "x"}); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("page size 1001: %v, want ErrInvalidOption", err)
	}
	if _, err := m.SearchInstances(ctx, job.NewQuery(job.WithQueryCursor("garbage")), job.SearchParams{Text: "x"}); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("a garbage cursor: %v, want ErrInvalidOption", err)
	}
}

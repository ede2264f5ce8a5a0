package jobtest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job"
)

func init() { register("Inspect", testInspect) }

// testInspect checks the manager's counts, lag, lists and pages against
// what it ran.
func testInspect(t *testing.T, e *env) {
	ok := mustJob(t, job.WithKind("ins-ok"), job.WithExecutor(func(ji job.Instance) { ji.Infof("ran") }))
	bad := mustJob(t, job.WithKind("ins-bad"), job.WithMaxRetries(0),
		job.WithExecutor(func() error { return errors.New("boom") }))
	m := e.manager(t, []*job.Job{ok, bad})
	ctx := context.Background()
	for range 3 {
		schedule(t, m, "ins-ok")
	}
	for range 2 {
		schedule(t, m, "ins-bad")
	}
	queue := schedule(t, m, "ins-ok").Queue

	count := func(kind string, st job.State) int64 {
		t.Helper()
		rows, err := m.Admin().CountInstances(ctx, "", kind)
		if err != nil {
			t.Fatalf("Counts(kind %s): %v", kind, err)
		}
		if len(rows) != 1 || rows[0].Queue != queue || rows[0].Kind != kind {
			t.Fatalf("Counts(kind %s) = %+v, want one row for queue %s", kind, rows, queue)
		}
		return rows[0].States[st]
	}
	if n := count("ins-ok", job.Scheduled); n != 4 {
		t.Fatalf("before start: %d ins-ok scheduled, want 4", n)
	}
	lag, err := m.Admin().GetLag(ctx, queue, "")
	if err != nil {
		t.Fatalf("Lag: %v", err)
	}
	if len(lag.Queues) != 1 || lag.Queues[0].OldestReady.IsZero() || lag.Queues[0].Age < 0 {
		t.Fatalf("Lag before start: %+v, want queue %s with a ready instance", lag.Queues, queue)
	}

	start(t, m)
	waitIdle(t, m, deadline)
	later := schedule(t, m, "ins-ok", job.WithScheduleAfter(time.Hour))
	for _, c := range []struct {
		kind string
		st   job.State
		want int64
	}{{"ins-ok", job.Completed, 4}, {"ins-ok", job.Scheduled, 1}, {"ins-bad", job.Terminated, 2}, {"ins-bad", job.Processing, 0}} {
		if n := count(c.kind, c.st); n != c.want {
			t.Errorf("after running: %d %s %v, want %d", n, c.kind, c.st, c.want)
		}
	}
	if kinds, err := m.Admin().ListKinds(ctx); err != nil || !slices.Equal(kinds, []string{"ins-bad", "ins-ok"}) {
		t.Errorf("Kinds() = %v, %v; want [ins-bad ins-ok]", kinds, err)
	}
	if qs, err := m.Admin().ListQueues(ctx); err != nil || len(qs) != 1 || qs[0].Name != queue {
		t.Errorf("ListQueues() = %v, %v; want [%s]", qs, err, queue)
	}

	// Pages of two through all six instances: each once, newest first.
	var ids []string
	cursor := ""
	for range 10 {
		p, err := m.ListInstances(ctx, job.NewQuery(job.WithQueryLimit(2), job.WithQueryCursor(cursor)))
		if err != nil {
			t.Fatalf("ListInstances: %v", err)
		}
		for _, in := range p.Items {
			ids = append(ids, in.ID)
		}
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	all, err := m.LookupInstances(ctx, job.NewQuery())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, in := range all {
		want = append(want, in.ID)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("paged instances %v, want %v", ids, want)
	}
	_, err = m.ListInstances(ctx, job.NewQuery(job.WithQueryKind("ins-ok"), job.WithQueryLimit(2), job.WithQueryCursor("bm90IGEgY3Vyc29y")))
	if !errors.Is(err, job.ErrInvalidOption) {
		t.Fatalf("ListInstances with a forged cursor: %v, want ErrInvalidOption", err)
	}
	if _, err := m.ListInstances(ctx, job.NewQuery(job.WithQueryLimit(job.MaxPageSize+1))); !errors.Is(err, job.ErrInvalidOption) {
		t.Fatalf("ListInstances above MaxPageSize: %v, want ErrInvalidOption", err)
	}
	hp, err := m.ListHistory(ctx, job.NewQuery(job.WithQueryInstance(later)))
	if err != nil || len(hp.Items) != 2 || hp.Next != "" {
		t.Fatalf("PageHistory(later) = %+v, %v; want its created and scheduled records in one page", hp, err)
	}
	lp, err := m.ListLogs(ctx, job.NewQuery(job.WithQueryKind("ins-ok"), job.WithQueryLimit(2)))
	if err != nil || len(lp.Items) != 2 || lp.Next == "" {
		t.Fatalf("PageLogs(ins-ok, limit 2) = %+v, %v; want two of the four logs and a next cursor", lp, err)
	}
}

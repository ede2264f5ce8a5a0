package pgstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestFinalRecordsOnRow: a finish that ends an instance writes no history
// row (migration 0013): the outcome and the attempt's Processing record
// stay on the instance row, and every reader returns them where history
// rows had them; a retry's outcome is still a history row. Admin.Retry
// of a finished instance writes the row's records into a history row at
// their places before the row changes: its history, and the feed read
// from before, are the same afterwards, with the Retry's record after.
func TestFinalRecordsOnRow(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "final")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema), WithNamespace("fin"), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cur, err := s.EventCursor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	t1, t2, t3 := t0.Add(time.Second), t0.Add(2*time.Second), t0.Add(3*time.Second)
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Now: t0, Node: "n0", Instances: []*store.Instance{
		{ID: "a", Kind: "k", Queue: "q", RunAt: t0, CreatedAt: t0, MaxRetries: 1},
		{ID: "b", Kind: "k", Queue: "q", RunAt: t0, CreatedAt: t0, MaxRetries: 1}}}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w1", Limit: 2, Now: t1, LeaseUntil: t1.Add(time.Hour)}); err != nil || len(res.Instances) != 2 {
		t.Fatalf("claim: %+v, %v; want a and b", res, err)
	}
	r, err := s.Finish(ctx, &store.FinishParams{Owner: "w1", Now: t2, Outcomes: []store.Outcome{
		{ID: "a", Attempt: 1, State: store.Completed, Result: []byte(`[7]`)},
		{ID: "b", Attempt: 1, State: store.Scheduled, RunAt: t2, Error: "again"}}})
	if err != nil || r[0].Err != nil || r[1].Err != nil {
		t.Fatalf("finish: %+v, %v", r, err)
	}
	rows := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+s.t("history")+" WHERE ns = 'fin'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rows(); n != 1 {
		t.Fatalf("%d history rows after a completed attempt and a retry; want 1 (the retry's)", n)
	}
	wantA := []string{"a:created", "a:scheduled", "a:processing", "a:completed"}
	histA := func(what string, want []string) []*store.HistoryRecord {
		t.Helper()
		h, err := s.LookupHistory(ctx, &store.Query{InstanceID: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if got := stateNames(h); !slices.Equal(got, want) {
			t.Fatalf("history of a %s: %v; want %v", what, records(h), want)
		}
		return h
	}
	h := histA("after its finish", wantA)
	if h[2].Node != "w1" || !h[2].Time.Equal(t1) || h[3].Node != "w1" || !h[3].Time.Equal(t2) || string(h[3].Result) != `[7]` || h[3].Attempt != 1 {
		t.Fatalf("a's Processing and Completed records: %+v, %+v; want by w1 at %v and %v, result [7], attempt 1", *h[2], *h[3], t1, t2)
	}
	byState, err := s.LookupHistory(ctx, &store.Query{States: []store.State{store.Completed, store.Processing}, Since: t1, Until: t3})
	if err != nil || !slices.Equal(stateNames(byState), []string{"a:processing", "b:processing", "a:completed"}) {
		t.Fatalf("Processing and Completed records from %v: %v, %v", t1, records(byState), err)
	}

	follow := func(from string, n int) []store.Event {
		t.Helper()
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, err := s.Follow(fctx, &store.FollowParams{Cursor: from})
		if err != nil {
			t.Fatal(err)
		}
		var evs []store.Event
		for range n {
			evs = append(evs, nextEvent(t, ch))
		}
		return evs
	}
	names := func(evs []store.Event) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.InstanceID+":"+e.State.String())
		}
		return out
	}
	want := []string{"a:created", "a:scheduled", "b:created", "b:scheduled", "a:processing", "b:processing", "a:completed", "b:scheduled"}
	before := follow(cur, len(want))
	if !slices.Equal(names(before), want) {
		t.Fatalf("events: %v; want %v", names(before), want)
	}
	if e := before[4]; e.Node != "w1" || !e.ReadyAt.Equal(t0) || e.Attempt != 1 {
		t.Fatalf("a's Processing event: %+v; want by w1, attempt 1, ready at %v", e, t0)
	}

	// Admin.Retry of a: its records move to a history row, at their places.
	if res, err := s.Retry(ctx, &store.RetryParams{IDs: []string{"a"}, Now: t3, Node: "admin"}); err != nil || res[0].Err != nil {
		t.Fatalf("retry of a: %+v, %v", res, err)
	}
	histA("after Admin.Retry", append(wantA, "a:scheduled"))
	after := follow(cur, len(want)+1)
	for i := range before {
		if after[i].Cursor != before[i].Cursor || after[i].State != before[i].State || after[i].InstanceID != before[i].InstanceID {
			t.Fatalf("event %d after Admin.Retry: %s %v %s; want %s %v %s as before", i,
				after[i].InstanceID, after[i].State, after[i].Cursor, before[i].InstanceID, before[i].State, before[i].Cursor)
		}
	}
	if e := after[len(want)]; e.InstanceID != "a" || e.State != store.Scheduled || e.Node != "admin" {
		t.Fatalf("the event after: %+v; want a Scheduled by admin", e)
	}
}

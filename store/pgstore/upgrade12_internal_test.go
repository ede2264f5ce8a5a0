package pgstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestUpgradeFromVersion11: a store that version 11 left with a pending,
// a running and a finished instance (each enqueue a history row of its
// own, each attempt's end another) keeps running them after migrations
// 0012, which writes an enqueue's records as one row of enqueued per
// statement, and 0013, which leaves the records of an instance's last
// attempt on its row: the pending one
// is claimed and finished beside an instance enqueued after the upgrade,
// the running one finished by its owner; every history reads as before,
// the event feed from a cursor of before delivers the old records then
// the new ones in order (and from each event's cursor, the rest), the
// counters stay exact, and retention removes every record of both
// layouts, counting them, and then the instances.
func TestUpgradeFromVersion11(t *testing.T) {
	ctx := t.Context()
	old := newOldSchema(t, "up11", 11)
	now := time.Now().UTC().Truncate(time.Millisecond)
	j := old.writeJobs(now, true)
	// Version 11 counts the running instance with the Scheduled ones.
	old.exec(`INSERT INTO ` + old.q + `.counts VALUES ('up', 'q', 'k', 2, 2), ('up', 'q', 'k', 4, 1)`)
	old.exec(`INSERT INTO ` + old.q + `.queues (ns, name, prios) VALUES ('up', 'q', '{0}')`)

	if err := Migrate(ctx, old.pool, WithSchema(old.name)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, old.pool, WithSchema(old.name), WithNamespace("up"), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	history := func(what string, want map[string][]string) {
		t.Helper()
		for id, w := range want {
			hist, err := s.LookupHistory(ctx, &store.Query{InstanceID: id})
			if err != nil {
				t.Fatal(err)
			}
			if got := stateNames(hist); !slices.Equal(got, w) {
				t.Fatalf("history of %s %s: %v; want %v", id, what, records(hist), w)
			}
		}
	}
	history("after the upgrade", map[string][]string{
		"pend": {"pend:created", "pend:scheduled"},
		"run":  {"run:created", "run:scheduled", "run:processing"},
		"done": {"done:created", "done:scheduled", "done:processing", "done:completed"},
	})

	// A follower from before any record (a cursor version 11 could have
	// given out: place (0, 1), the floor of a namespace never pruned).
	cursor0 := "pg3-" + s.cursorTag() + "-0-1"
	live, err := s.Follow(ctx, &store.FollowParams{Cursor: cursor0})
	if err != nil {
		t.Fatalf("Follow from %s: %v", cursor0, err)
	}

	// Run them on: "new" is enqueued beside them, pend and new are
	// claimed by w2, run is finished by w1, then pend and new by w2.
	later := now.Add(time.Second)
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Now: later, Node: "n1", Instances: []*store.Instance{
		{ID: "new", Kind: "k", Queue: "q", RunAt: now, CreatedAt: later}}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w2", Limit: 5, Now: later, LeaseUntil: later.Add(time.Hour)})
	if err != nil || len(res.Instances) != 2 || res.Instances[0].ID != "pend" || res.Instances[1].ID != "new" {
		t.Fatalf("claim after the upgrade: %+v, %v; want pend and new", res, err)
	}
	for _, f := range []struct{ owner, id string }{{"w1", "run"}, {"w2", "pend"}, {"w2", "new"}} {
		r, err := s.Finish(ctx, &store.FinishParams{Owner: f.owner, Now: later.Add(time.Second), Outcomes: []store.Outcome{{ID: f.id, Attempt: 1, State: store.Completed}}})
		if err != nil || r[0].Err != nil || r[0].State != store.Completed {
			t.Fatalf("finish of %s by %s after the upgrade: %+v, %v", f.id, f.owner, r, err)
		}
	}
	all := map[string][]string{
		"pend": {"pend:created", "pend:scheduled", "pend:processing", "pend:completed"},
		"run":  {"run:created", "run:scheduled", "run:processing", "run:completed"},
		"done": {"done:created", "done:scheduled", "done:processing", "done:completed"},
		"new":  {"new:created", "new:scheduled", "new:processing", "new:completed"},
	}
	history("after they ran", all)
	var rows int
	if err := old.pool.QueryRow(ctx, "SELECT count(*) FROM "+old.q+".history").Scan(&rows); err != nil || rows != 4 {
		t.Fatalf("%d history rows after they ran (%v); want the 4 of version 11 only", rows, err)
	}
	hist, err := s.LookupHistory(ctx, &store.Query{InstanceID: "new"})
	if err != nil {
		t.Fatal(err)
	}
	if hist[0].Node != "n1" || !hist[0].Time.Equal(later) || hist[1].Node != "n1" || hist[0].Seq >= hist[1].Seq || hist[1].Seq >= hist[2].Seq {
		t.Fatalf("new's records: %+v; want Created and Scheduled by n1 at %v, Seqs increasing", hist, later)
	}

	// The feed: the records of version 11 in their order, then the new
	// ones in the order they were written.
	want := []string{
		"pend:created", "pend:scheduled", "run:created", "run:scheduled", "done:created", "done:scheduled",
		"run:processing", "done:processing", "done:completed",
		"new:created", "new:scheduled", "pend:processing", "new:processing",
		"run:completed", "pend:completed", "new:completed",
	}
	var got []store.Event
	var names []string
	for range want {
		e := nextEvent(t, live)
		got = append(got, e)
		names = append(names, e.InstanceID+":"+e.State.String())
	}
	if !slices.Equal(names, want) {
		t.Fatalf("events from %s: %v; want %v", cursor0, names, want)
	}
	if got[6].Seq != uint64(recNum(j.procRun, false)) || got[8].Seq != uint64(recNum(j.outDone, false)) {
		t.Fatalf("the Processing record of run and done's outcome: Seqs %d, %d; want %d, %d (as version 11 numbered them)",
			got[6].Seq, got[8].Seq, recNum(j.procRun, false), recNum(j.outDone, false))
	}
	for i := range got[:len(got)-1] {
		from, err := s.Follow(ctx, &store.FollowParams{Cursor: got[i].Cursor})
		if err != nil {
			t.Fatalf("Follow from the cursor of event %d: %v", i, err)
		}
		if e := nextEvent(t, from); e.Cursor != got[i+1].Cursor {
			t.Fatalf("from the cursor of event %d (%s): %s %v %s; want %s", i, names[i], e.InstanceID, e.State, e.Cursor, got[i+1].Cursor)
		}
	}

	// The counters: four Completed, before and after the changes are folded.
	for _, fold := range []bool{false, true} {
		if fold {
			if err := s.compact(ctx); err != nil {
				t.Fatal(err)
			}
		}
		gs, err := s.Counts(ctx, &store.CountsParams{})
		if err != nil || len(gs) != 1 || gs[0].States[store.Completed] != 4 || gs[0].Total() != 4 {
			t.Fatalf("Counts after the upgrade (folded %v): %+v, %v; want q/k with 4 Completed", fold, gs, err)
		}
	}

	// Retention, three records at a time, oldest first, across both
	// layouts: every record goes and is counted once; then the instances.
	removed := 0
	for range 20 {
		r, err := s.Prune(ctx, &store.PruneParams{Now: later, HistoryBefore: later.Add(time.Hour), Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if r.History > 3 {
			t.Fatalf("Prune with Limit 3 removed %d records", r.History)
		}
		if r.History == 0 {
			break
		}
		removed += r.History
	}
	left, err := s.LookupHistory(ctx, &store.Query{})
	if err != nil || len(left) != 0 || removed != 16 {
		t.Fatalf("after pruning all history: removed %d, left %v, %v; want 16 removed, none left", removed, records(left), err)
	}
	if err := old.pool.QueryRow(ctx, fmt.Sprintf("SELECT (SELECT count(*) FROM %[1]s.history) + (SELECT count(*) FROM %[1]s.enqueued)", old.q)).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d history and enqueued rows left (%v); want none", rows, err)
	}
	r, err := s.Prune(ctx, &store.PruneParams{Now: later, FinishedBefore: later.Add(time.Hour)})
	if err != nil || r.Instances != 4 || r.History != 0 {
		t.Fatalf("Prune FinishedBefore: %+v, %v; want 4 instances and no history (pruned before)", r, err)
	}
}

package pgstore

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestUpgradeFromVersion9: a store that version 9 left with a pending, a
// running and a finished instance (its records numbered under the
// namespace's lock, its counters in counts) keeps running them after
// migration 0010: the pending one is claimed and finished, the running
// one finished by the node that claimed it; their history reads as
// before, the counters stay exact, and an event cursor given out by
// version 9 ("pg2-") follows on: the records of before first, in their
// order, then the new ones, the same whether the running attempt's
// Processing record is read from its instance row or from its outcome's
// history row.
func TestUpgradeFromVersion9(t *testing.T) {
	ctx := t.Context()
	old9 := newOldSchema(t, "up9", 9)
	pool, schema, q := old9.pool, old9.name, old9.q
	now := time.Now().UTC().Truncate(time.Millisecond)
	exec := old9.exec
	// What version 9 wrote: the enqueue of three instances (one history
	// row each), the claims of "run" and "done" (their Processing records
	// on the instance rows), the finish of "done" (its outcome row holding
	// the Processing record), the counters and the queue.
	j := old9.writeJobs(now, false)
	pos, procRun, procDone, outDone := j.pos, j.procRun, j.procDone, j.outDone
	exec(`INSERT INTO ` + q + `.counts VALUES ('up', 'q', 'k', 2, 1), ('up', 'q', 'k', 3, 1), ('up', 'q', 'k', 4, 1)`)
	exec(`INSERT INTO ` + q + `.queues (ns, name, prios) VALUES ('up', 'q', '{0}')`)

	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema), WithNamespace("up"), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// A version 9 cursor, just after pend's Created record.
	old := "pg2-" + s.cursorTag() + "-" + strconv.FormatInt(recNum(pos[0], true), 10)
	live, err := s.Follow(ctx, &store.FollowParams{Cursor: old})
	if err != nil {
		t.Fatalf("Follow from the version 9 cursor %s: %v", old, err)
	}
	type rec struct {
		id    string
		state store.State
		seq   int64
	}
	before := []rec{
		{"pend", store.Scheduled, recNum(pos[0], false)},
		{"run", store.Created, recNum(pos[1], true)}, {"run", store.Scheduled, recNum(pos[1], false)},
		{"done", store.Created, recNum(pos[2], true)}, {"done", store.Scheduled, recNum(pos[2], false)},
		{"run", store.Processing, recNum(procRun, false)}, {"done", store.Processing, recNum(procDone, false)},
		{"done", store.Completed, recNum(outDone, false)},
	}
	var got []store.Event
	check := func(what string, evs []store.Event, want []rec) {
		t.Helper()
		for i, w := range want {
			e := evs[i]
			if e.InstanceID != w.id || e.State != w.state || w.seq != 0 && e.Seq != uint64(w.seq) {
				t.Fatalf("%s: event %d is %s %v Seq %d; want %s %v Seq %d", what, i, e.InstanceID, e.State, e.Seq, w.id, w.state, w.seq)
			}
		}
	}
	for range before {
		got = append(got, nextEvent(t, live))
	}
	check("the records of version 9 from its cursor", got, before)

	// Run them on: pend is claimed and finished, run finished by w1.
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w2", Limit: 5, Now: now, LeaseUntil: now.Add(time.Hour)})
	if err != nil || len(res.Instances) != 1 || res.Instances[0].ID != "pend" {
		t.Fatalf("claim after the upgrade: %+v, %v; want pend", res, err)
	}
	for _, f := range []struct{ owner, id string }{{"w1", "run"}, {"w2", "pend"}} {
		r, err := s.Finish(ctx, &store.FinishParams{Owner: f.owner, Now: now.Add(time.Second), Outcomes: []store.Outcome{{ID: f.id, Attempt: 1, State: store.Completed}}})
		if err != nil || r[0].Err != nil || r[0].State != store.Completed {
			t.Fatalf("finish of %s by %s after the upgrade: %+v, %v", f.id, f.owner, r, err)
		}
	}
	after := []rec{{"pend", store.Processing, 0}, {"run", store.Completed, 0}, {"pend", store.Completed, 0}}
	for range after {
		got = append(got, nextEvent(t, live))
	}
	check("the records written after the upgrade", got[len(before):], after)

	// The same story from the same cursor, read once everything ended
	// (run's Processing record now in its outcome's row): the same
	// events, the same cursors; and from each event's cursor, the rest.
	again, err := s.Follow(ctx, &store.FollowParams{Cursor: old})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range got {
		if e := nextEvent(t, again); e.InstanceID != w.InstanceID || e.State != w.State || e.Cursor != w.Cursor {
			t.Fatalf("event %d read again: %s %v %s; want %s %v %s", i, e.InstanceID, e.State, e.Cursor, w.InstanceID, w.State, w.Cursor)
		}
	}
	for i := range got[:len(got)-1] {
		from, err := s.Follow(ctx, &store.FollowParams{Cursor: got[i].Cursor})
		if err != nil {
			t.Fatalf("Follow from the cursor of event %d: %v", i, err)
		}
		if e := nextEvent(t, from); e.Cursor != got[i+1].Cursor {
			t.Fatalf("from the cursor of event %d (%s): %s %v %s; want %s", i, got[i].Cursor, e.InstanceID, e.State, e.Cursor, got[i+1].Cursor)
		}
	}

	// History, as before.
	for id, want := range map[string][]string{
		"pend": {"pend:created", "pend:scheduled", "pend:processing", "pend:completed"},
		"run":  {"run:created", "run:scheduled", "run:processing", "run:completed"},
		"done": {"done:created", "done:scheduled", "done:processing", "done:completed"},
	} {
		hist, err := s.LookupHistory(ctx, &store.Query{InstanceID: id})
		if err != nil {
			t.Fatal(err)
		}
		if got := stateNames(hist); !slices.Equal(got, want) {
			t.Fatalf("history of %s after the upgrade: %v; want %v", id, records(hist), want)
		}
		if id == "run" && (hist[2].Seq != uint64(recNum(procRun, false)) || hist[2].Node != "w1") {
			t.Fatalf("run's Processing record: %v; want Seq %d by w1", records(hist), recNum(procRun, false))
		}
	}
	// The counters: three Completed, nothing else, before and after the
	// changes are folded.
	for _, fold := range []bool{false, true} {
		if fold {
			if err := s.compact(ctx); err != nil {
				t.Fatal(err)
			}
		}
		gs, err := s.Counts(ctx, &store.CountsParams{})
		if err != nil || len(gs) != 1 || gs[0].States[store.Completed] != 3 || gs[0].Total() != 3 {
			t.Fatalf("Counts after the upgrade (folded %v): %+v, %v; want q/k with 3 Completed", fold, gs, err)
		}
	}
	var deltas int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+q+".count_deltas").Scan(&deltas); err != nil || deltas != 0 {
		t.Fatalf("%d counter changes left after the compaction (%v); want none", deltas, err)
	}
}

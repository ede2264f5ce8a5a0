package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// TestAttemptOneHistoryRow: a job enqueued, claimed and finished writes no
// history row (migration 0008: the claim keeps its Processing record on
// the instance row; 0012: the enqueue's records are in its statement's
// enqueued row; 0013: the finish that ends the instance leaves its outcome
// and the Processing record on the row; one history row each until 0011),
// and every reader returns the four records the contract asks for, in
// order: LookupHistory (by instance, by state, by time, with a limit), the
// event feed (the Processing record delivered at the claim, while the
// attempt runs, never again after the finish; a follower that starts
// behind gets it in order from the finished row), EventCursor, and Prune.
func TestAttemptOneHistoryRow(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "att")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema), WithNamespace("att"), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start, err := s.EventCursor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	live, err := s.Follow(fctx, &store.FollowParams{Cursor: start})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	tClaim, tFin := t0.Add(time.Minute), t0.Add(2*time.Minute)
	const n = 2*feedBatch + 100 // the catch-up reads each place in more than one batch
	var ins []*store.Instance
	for i := range n {
		ins = append(ins, &store.Instance{ID: fmt.Sprintf("j-%04d", i), Kind: "k", Queue: "q", RunAt: t0, CreatedAt: t0})
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: t0, Node: "n0"}); err != nil {
		t.Fatal(err)
	}
	for range 2 * n {
		nextEvent(t, live)
	}
	cl, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w1", Limit: n, Now: tClaim, LeaseUntil: tClaim.Add(time.Hour)})
	if err != nil || len(cl.Instances) != n {
		t.Fatalf("claim: %d instances, %v; want %d", len(cl.Instances), err, n)
	}
	// The Processing records, while the attempts run: in claim order.
	var proc []store.Event
	for i := range n {
		e := nextEvent(t, live)
		if e.State != store.Processing || e.InstanceID != ins[i].ID || e.Attempt != 1 || e.Node != "w1" || !e.Time.Equal(tClaim) || !e.ReadyAt.Equal(t0) {
			t.Fatalf("event %d after the claim: %+v; want %s Processing attempt 1 by w1 at %v, ready at %v", i, e, ins[i].ID, tClaim, t0)
		}
		proc = append(proc, e)
	}
	running, err := s.LookupHistory(ctx, &store.Query{InstanceID: "j-0003"})
	if err != nil {
		t.Fatal(err)
	}
	if got := records(running); len(got) != 3 || running[2].State != store.Processing || running[2].Seq != proc[3].Seq || running[2].Node != "w1" {
		t.Fatalf("history of j-0003 while it runs: %v; want Created, Scheduled, Processing@%d by w1", got, proc[3].Seq)
	}
	mid, err := s.EventCursor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fromMid, err := s.Follow(ctx, &store.FollowParams{Cursor: mid})
	if err != nil {
		t.Fatal(err)
	}

	var outs []store.Outcome
	for i := range n {
		st := store.Completed
		if i%4 == 1 {
			st = store.Terminated
		}
		outs = append(outs, store.Outcome{ID: ins[i].ID, Attempt: 1, State: st, Error: map[bool]string{true: "boom"}[st == store.Terminated]})
	}
	if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w1", Now: tFin, Outcomes: outs}); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+s.t("history")+" WHERE ns = 'att'").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d history rows after %d jobs were enqueued (in one enqueued row), claimed and finished; want none (their records on their rows)", rows, n)
	}
	// The live follower: the outcomes only, the Processing records not again.
	for i := range n {
		if e := nextEvent(t, live); e.State != outs[i].State || e.InstanceID != ins[i].ID || e.Seq <= proc[n-1].Seq {
			t.Fatalf("event %d after the finish: %s %v Seq %d; want %s %v after Seq %d", i, e.InstanceID, e.State, e.Seq, ins[i].ID, outs[i].State, proc[n-1].Seq)
		}
	}
	cancel()
	// From EventCursor taken while the attempts ran: the outcomes, the
	// Processing records before it not again.
	if e := nextEvent(t, fromMid); e.State != outs[0].State || e.InstanceID != ins[0].ID {
		t.Fatalf("first event after EventCursor taken while the attempts ran: %s %v; want %s %v", e.InstanceID, e.State, ins[0].ID, outs[0].State)
	}

	want := func(id string, st store.State) []string {
		return []string{id + ":created", id + ":scheduled", id + ":processing", id + ":" + st.String()}
	}
	hist, err := s.LookupHistory(ctx, &store.Query{InstanceID: "j-0005"})
	if err != nil {
		t.Fatal(err)
	}
	if got := stateNames(hist); !slices.Equal(got, want("j-0005", store.Terminated)) || hist[2].Seq != proc[5].Seq ||
		hist[2].Node != "w1" || hist[2].Attempt != 1 || !hist[2].Time.Equal(tClaim) || hist[3].Error != "boom" || !hist[3].Time.Equal(tFin) {
		t.Fatalf("history of j-0005: %+v; want %v, the Processing record Seq %d by w1 at %v", records(hist), want("j-0005", store.Terminated), proc[5].Seq, tClaim)
	}
	all, err := s.LookupHistory(ctx, &store.Query{})
	if err != nil || len(all) != 4*n {
		t.Fatalf("all history: %d records, %v; want %d", len(all), err, 4*n)
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if b.Time.Before(a.Time) || b.Time.Equal(a.Time) && b.Seq <= a.Seq {
			t.Fatalf("history out of (time, seq) order at %d: %v then %v", i, records(all[i-1:i]), records(all[i:i+1]))
		}
	}
	procs, err := s.LookupHistory(ctx, &store.Query{States: []store.State{store.Processing}, Since: tClaim, Until: tClaim.Add(time.Second), Limit: 7})
	if err != nil || len(procs) != 7 || slices.ContainsFunc(procs, func(h *store.HistoryRecord) bool { return h.State != store.Processing }) || procs[0].InstanceID != "j-0000" {
		t.Fatalf("Processing records in [claim, claim+1s), limit 7: %v, %v; want 7, the first j-0000's", records(procs), err)
	}
	if late, err := s.LookupHistory(ctx, &store.Query{Since: tClaim.Add(time.Second)}); err != nil || len(late) != n || slices.ContainsFunc(late, func(h *store.HistoryRecord) bool { return h.State == store.Processing }) {
		t.Fatalf("records since the claim + 1s: %d, %v; want the %d outcomes", len(late), err, n)
	}

	// A follower that starts behind the claim reads the finished rows:
	// every record once, in Seq order, Processing between Scheduled and
	// the outcome of each job.
	ch, err := s.Follow(ctx, &store.FollowParams{Cursor: start})
	if err != nil {
		t.Fatal(err)
	}
	var evs []store.Event
	for range 4 * n {
		evs = append(evs, nextEvent(t, ch))
	}
	last := map[string]store.State{}
	for i, e := range evs {
		if i > 0 && e.Seq <= evs[i-1].Seq {
			t.Fatalf("catch-up event %d Seq %d after Seq %d", i, e.Seq, evs[i-1].Seq)
		}
		prev := last[e.InstanceID]
		if ok := prev == 0 && e.State == store.Created || prev == store.Created && e.State == store.Scheduled ||
			prev == store.Scheduled && e.State == store.Processing || prev == store.Processing && e.State.Final(); !ok {
			t.Fatalf("catch-up event %d: %s %v after %v", i, e.InstanceID, e.State, prev)
		}
		if e.State == store.Processing && (e.Node != "w1" || !e.Time.Equal(tClaim) || !e.ReadyAt.Equal(t0)) {
			t.Fatalf("catch-up Processing event %+v; want by w1 at %v, ready at %v", e, tClaim, t0)
		}
		last[e.InstanceID] = e.State
	}
	// From the cursor of a Processing record: the next record after it.
	ch2, err := s.Follow(ctx, &store.FollowParams{Cursor: proc[7].Cursor})
	if err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, ch2); e.InstanceID != "j-0008" || e.State != store.Processing {
		t.Fatalf("after the cursor of j-0007 Processing: %s %v; want j-0008 Processing", e.InstanceID, e.State)
	}

	// Prune counts the Processing records; a Processing record goes with
	// its attempt's outcome (rows go by the outcome's time), and a limit
	// that ends inside such a row removes the Processing record alone.
	res, err := s.Prune(ctx, &store.PruneParams{Now: tFin, HistoryBefore: tClaim.Add(time.Second), Limit: 4 * n})
	if err != nil || res.History != 2*n {
		t.Fatalf("prune of the records before the claim + 1s: %+v, %v; want the %d enqueue records", res, err, 2*n)
	}
	res, err = s.Prune(ctx, &store.PruneParams{Now: tFin, HistoryBefore: tFin.Add(time.Second), Limit: 1})
	if err != nil || res.History != 1 {
		t.Fatalf("prune of one record: %+v, %v", res, err)
	}
	left, err := s.LookupHistory(ctx, &store.Query{})
	if err != nil || len(left) != 2*n-1 || left[0].State != store.Processing || left[0].InstanceID != "j-0001" {
		t.Fatalf("after the prune: %v, %v; want j-0001 Processing first, %d records", records(left), err, 2*n-1)
	}
	res, err = s.Prune(ctx, &store.PruneParams{Now: tFin, HistoryBefore: tFin.Add(time.Second), Limit: 3})
	if err != nil || res.History != 3 {
		t.Fatalf("prune of three records: %+v, %v", res, err)
	}
	left, err = s.LookupHistory(ctx, &store.Query{})
	if err != nil || len(left) != 2*n-4 || left[0].State != store.Processing || left[0].InstanceID != "j-0002" {
		t.Fatalf("after the prune of three: %v, %v; want j-0002 Processing first, %d records", records(left), err, 2*n-4)
	}
	res, err = s.Prune(ctx, &store.PruneParams{Now: tFin, HistoryBefore: tFin.Add(time.Second), Limit: 4 * n})
	if err != nil || res.History != 2*n-4 {
		t.Fatalf("prune of the rest: %+v, %v; want %d records", res, err, 2*n-4)
	}
}

func stateNames(hs []*store.HistoryRecord) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.InstanceID+":"+h.State.String())
	}
	return out
}

// TestUpgradeFromVersion7: an attempt claimed under version 7 (its
// Processing record a history row of its own) and finished after
// migration 0008 reads back with one Processing record, and a new claim
// keeps its record on the instance row.
func TestUpgradeFromVersion7(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "up7")
	q := pgx.Identifier{schema}.Sanitize()
	migrateToVersion(t, pool, schema, 7)
	// What version 7 wrote for an enqueue and a claim of "old": the
	// Created+Scheduled row, the Processing row, the instance Processing.
	now := time.Now().UTC().Truncate(time.Millisecond)
	ns := nanos(now)
	if _, err := pool.Exec(ctx, `INSERT INTO `+q+`.instances (ns, id, kind, queue, run_at, state, attempt, lease_owner, lease_until, created_at, updated_at)
		VALUES ('up', 'old', 'k', 'q', $1, 3, 1, 'w1', $2, $1, $1)`, ns, nanos(now.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	var procPos int64
	if err := pool.QueryRow(ctx, `WITH a AS (INSERT INTO `+q+`.history (ns, instance_id, kind, queue, state, attempt, t, node, created)
			VALUES ('up', 'old', 'k', 'q', 2, 0, $1, 'n0', true) RETURNING 1)
		INSERT INTO `+q+`.history (ns, instance_id, kind, queue, state, attempt, t, node)
			SELECT 'up', 'old', 'k', 'q', 3, 1, $1, 'w1' FROM (SELECT count(*) FROM a) AS z RETURNING pos`, ns).Scan(&procPos); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+q+".counts VALUES ('up', 'q', 'k', 3, 1)"); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema), WithNamespace("up"), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w1", Now: now, Outcomes: []store.Outcome{{ID: "old", Attempt: 1, State: store.Scheduled, RunAt: now}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w2", Limit: 1, Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w2", Now: now, Outcomes: []store.Outcome{{ID: "old", Attempt: 2, State: store.Completed}}}); err != nil {
		t.Fatal(err)
	}
	hist, err := s.LookupHistory(ctx, &store.Query{InstanceID: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if got := stateNames(hist); !slices.Equal(got, []string{"old:created", "old:scheduled", "old:processing", "old:scheduled", "old:processing", "old:completed"}) ||
		hist[2].Seq != uint64(2*procPos+1) || hist[4].Node != "w2" || hist[4].Attempt != 2 {
		t.Fatalf("history of an attempt claimed before the migration: %v; want one Processing record per attempt, the first Seq %s", records(hist), strconv.FormatInt(2*procPos+1, 10))
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+q+".history WHERE ns = 'up'").Scan(&rows); err != nil || rows != 3 {
		t.Fatalf("%d history rows (%v); want 3: enqueue, the claim of version 7, its outcome (the second attempt's records on the row, migration 0013)", rows, err)
	}
}

// TestRescueWritesTheClaimRecord: an attempt whose lease expired is taken
// back by another node; the one history row of that attempt holds the
// Processing record by the claimer and the outcome by the rescuer.
func TestRescueWritesTheClaimRecord(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "resc")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema), WithNamespace("resc"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	in := &store.Instance{ID: "r-1", Kind: "k", Queue: "q", RunAt: now, CreatedAt: now, MaxRetries: 1}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w1", Limit: 1, Now: now, LeaseUntil: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Minute)
	got, err := s.Rescue(ctx, &store.RescueParams{Now: later, Limit: 10, Node: "rescuer"})
	if err != nil || len(got) != 1 {
		t.Fatalf("rescue: %d, %v; want 1", len(got), err)
	}
	hist, err := s.LookupHistory(ctx, &store.Query{InstanceID: "r-1"})
	if err != nil {
		t.Fatal(err)
	}
	if names := stateNames(hist); !slices.Equal(names, []string{"r-1:created", "r-1:scheduled", "r-1:processing", "r-1:scheduled"}) ||
		hist[2].Node != "w1" || !hist[2].Time.Equal(now) || hist[3].Node != "rescuer" || !hist[3].Time.Equal(later) {
		t.Fatalf("history after the rescue: %+v", hist)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+s.t("history")+" WHERE ns = 'resc'").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d history rows (%v); want 1 (the attempt's; the enqueue's records are in an enqueued row)", rows, err)
	}
}

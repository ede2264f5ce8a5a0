package pgstore

import (
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestUpgradeFromVersion10: a store that version 10 left with a pending,
// a running and a finished instance (the running one counted as
// Processing, partly in counts and partly in changes not yet folded, its
// owner's claim record in claims) keeps running them after migration
// 0011, which counts Processing instances with the Scheduled ones: the
// counts read the same before anything runs, the pending one is claimed
// (with a ClaimSeq, through the claim record of before) and finished, the
// running one finished by its owner, their history reads as before, and
// the counters stay exact before and after the changes are folded.
func TestUpgradeFromVersion10(t *testing.T) {
	ctx := t.Context()
	old10 := newOldSchema(t, "up10", 10)
	pool, schema, q := old10.pool, old10.name, old10.q
	now := time.Now().UTC().Truncate(time.Millisecond)
	exec := old10.exec
	// What version 10 wrote: three enqueues (one history row each), the
	// claims of "run" and "done" (Processing records on the rows), the
	// finish of "done" (its outcome row holding the Processing record),
	// w1's claim record, the counters (folded, and changes not yet
	// folded: run's claim) and the queue.
	old10.writeJobs(now, true)
	exec(`INSERT INTO `+q+`.claims VALUES ('up', 'w1', 7, $1, '{run}', '{1}')`, nanos(now.Add(time.Hour)))
	exec(`INSERT INTO ` + q + `.counts VALUES ('up', 'q', 'k', 2, 2), ('up', 'q', 'k', 4, 1)`)
	exec(`INSERT INTO ` + q + `.count_deltas VALUES ('up', 'q', 'k', 2, -1), ('up', 'q', 'k', 3, 1)`)
	exec(`INSERT INTO ` + q + `.queues (ns, name, prios) VALUES ('up', 'q', '{0}')`)

	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema), WithNamespace("up"), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	counts := func(what string, want map[store.State]int64) {
		t.Helper()
		for _, fold := range []bool{false, true} {
			if fold {
				if err := s.compact(ctx); err != nil {
					t.Fatal(err)
				}
			}
			gs, err := s.Counts(ctx, &store.CountsParams{})
			if err != nil || len(gs) != 1 {
				t.Fatalf("Counts %s (folded %v): %+v, %v; want one group", what, fold, gs, err)
			}
			for st := store.State(1); int(st) < len(gs[0].States); st++ {
				if gs[0].States[st] != want[st] {
					t.Fatalf("Counts %s (folded %v): %v %d; want %d (all: %v)", what, fold, st, gs[0].States[st], want[st], gs[0].States)
				}
			}
		}
	}
	counts("after the upgrade", map[store.State]int64{store.Scheduled: 1, store.Processing: 1, store.Completed: 1})

	// w1's claim record of before answers a late call, and takes a new one.
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w1", Limit: 5, Now: now, LeaseUntil: now.Add(time.Hour), ClaimSeq: 6})
	if err != nil || len(res.Instances) != 0 {
		t.Fatalf("a late claim of w1 after the upgrade: %+v, %v; want nothing", res, err)
	}
	res, err = s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w1", Limit: 5, Now: now, LeaseUntil: now.Add(time.Hour), ClaimSeq: 8})
	if err != nil || len(res.Instances) != 1 || res.Instances[0].ID != "pend" {
		t.Fatalf("claim after the upgrade: %+v, %v; want pend", res, err)
	}
	counts("after the claim", map[store.State]int64{store.Processing: 2, store.Completed: 1})
	r, err := s.Finish(ctx, &store.FinishParams{Owner: "w1", Now: now.Add(time.Second), Outcomes: []store.Outcome{
		{ID: "run", Attempt: 1, State: store.Completed}, {ID: "pend", Attempt: 1, State: store.Terminated, Error: "boom"}}})
	if err != nil || r[0].Err != nil || r[0].State != store.Completed || r[1].Err != nil || r[1].State != store.Terminated {
		t.Fatalf("finish after the upgrade: %+v, %v", r, err)
	}
	counts("after the finish", map[store.State]int64{store.Completed: 2, store.Terminated: 1})

	for id, want := range map[string][]string{
		"pend": {"pend:created", "pend:scheduled", "pend:processing", "pend:terminated"},
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
	}
}

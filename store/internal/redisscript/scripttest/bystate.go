package scripttest

// Tests of lookups by state: they read the states' own structures (ready
// lists, scheduled sets, the run set, the done lists, the late set), not
// every stored instance, and the structures those reads rely on stay
// exact through claims, finishes, rescues, cancels and retention.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// testLookupByStateReadsOnlyItsState: a namespace with 300 completed
// instances whose records are then damaged, and a few instances in every
// other state. A lookup by any other state (and a history lookup by final
// states) returns exactly its instances with no error: had it read a
// completed instance, it would have reported that record as corrupt.
func testLookupByStateReadsOnlyItsState(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	mk := func(id, kind, queue string, runAt time.Duration, maxRetries int) *store.Instance {
		in := inst(id, queue)
		in.Kind, in.RunAt, in.MaxRetries = kind, at(runAt), maxRetries
		return in
	}
	// 300 completed.
	var bulk []*store.Instance
	for i := range 300 {
		bulk = append(bulk, mk(fmt.Sprintf("c-%03d", i), "bulk", "q", 0, 0))
	}
	e.enqueue(base, bulk...)
	var outs []store.Outcome
	for _, in := range e.claim("q", "w", 1000, at(time.Second), at(time.Hour)).Instances {
		outs = append(outs, store.Outcome{ID: in.ID, Attempt: 1, State: store.Completed})
	}
	if len(outs) != 300 {
		t.Fatalf("claimed %d of the 300", len(outs))
	}
	e.finish("w", at(2*time.Second), outs...)

	// Every other state, in two queues and two kinds.
	now := at(time.Minute)
	e.enqueue(now,
		mk("run-1", "bulk", "q", time.Minute, 0), mk("run-2", "other", "q2", time.Minute, 0),
		mk("term-1", "other", "q", time.Minute, 0), mk("term-2", "bulk", "q2", time.Minute, 0),
		mk("late-1", "other", "q", time.Minute, 0), mk("tout-1", "bulk", "q", time.Minute, 0),
		mk("canc-1", "bulk", "q", time.Minute, 0), mk("resc-1", "bulk", "q2", time.Minute, 3),
	)
	claimAll := func(queue string, want ...string) {
		t.Helper()
		got := ids(e.claim(queue, "w", 100, now, now.Add(time.Minute)).Instances)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("claim %s: %v, want %v", queue, got, want)
		}
	}
	claimAll("q", "canc-1", "late-1", "run-1", "term-1", "tout-1")
	claimAll("q2", "resc-1", "run-2", "term-2")
	e.finish("w", now.Add(time.Second),
		store.Outcome{ID: "term-1", Attempt: 1, State: store.Terminated, Error: "boom"},
		store.Outcome{ID: "term-2", Attempt: 1, State: store.Terminated, Error: "boom"},
		store.Outcome{ID: "tout-1", Attempt: 1, State: store.TimedOut, Error: "slow"},
		store.Outcome{ID: "canc-1", Attempt: 1, State: store.Canceled})
	// A clock behind the Terminated list's tail: the late set.
	e.finish("w", now.Add(-time.Second), store.Outcome{ID: "late-1", Attempt: 1, State: store.Terminated, Error: "late"})
	// The running ones renew their leases; resc-1's ends unrenewed, and it
	// is rescued back to its queue, at the front.
	if _, err := e.s.Renew(ctx, &store.RenewParams{Owner: "w", Leases: []store.LeaseRef{{ID: "run-1", Attempt: 1}, {ID: "run-2", Attempt: 1}},
		Until: now.Add(time.Hour), Now: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := ids(e.rescue(now.Add(2*time.Minute), 10)); !slices.Equal(got, []string{"resc-1"}) {
		t.Fatalf("rescue: %v, want resc-1", got)
	}
	e.enqueue(now,
		mk("wait-1", "bulk", "q", time.Minute, 0),   // ready
		mk("wait-2", "other", "q2", time.Minute, 0), // ready
		mk("fut-1", "bulk", "q", 24*time.Hour, 0),   // scheduled for later
		mk("fut-2", "other", "q2", 24*time.Hour, 0)) // scheduled for later
	if got := e.instances(&store.Query{States: []store.State{store.Processing}}); len(got) != 2 {
		t.Fatalf("before damage: Processing %v, want run-1 and run-2", got)
	}

	// Damage every completed instance's records.
	pipe := e.rc.Pipeline()
	for _, in := range bulk {
		pipe.HSet(ctx, e.keys.Inst(), redisscript.EncodeID(in.ID), "damaged")
		pipe.HSet(ctx, e.keys.State(), redisscript.EncodeID(in.ID), "damaged")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		q    store.Query
		want []string
	}{
		{"processing", store.Query{States: []store.State{store.Processing}}, []string{"run-1", "run-2"}},
		{"processing of a queue", store.Query{Queue: "q2", States: []store.State{store.Processing}}, []string{"run-2"}},
		{"scheduled", store.Query{States: []store.State{store.Scheduled}}, []string{"fut-1", "fut-2", "resc-1", "wait-1", "wait-2"}},
		{"scheduled of a queue", store.Query{Queue: "q2", States: []store.State{store.Scheduled}}, []string{"fut-2", "resc-1", "wait-2"}},
		{"scheduled of a kind", store.Query{Kind: "other", States: []store.State{store.Scheduled}}, []string{"fut-2", "wait-2"}},
		{"terminated, the late one too", store.Query{States: []store.State{store.Terminated}}, []string{"late-1", "term-1", "term-2"}},
		{"timed out", store.Query{States: []store.State{store.TimedOut}}, []string{"tout-1"}},
		{"canceled or terminated of a kind", store.Query{Kind: "bulk", States: []store.State{store.Canceled, store.Terminated}}, []string{"canc-1", "term-2"}},
		{"running or failed", store.Query{States: []store.State{store.Processing, store.Terminated, store.TimedOut}}, []string{"late-1", "run-1", "run-2", "term-1", "term-2", "tout-1"}},
	}
	for _, c := range cases {
		got, err := e.s.LookupInstances(ctx, &c.q)
		if err != nil {
			t.Fatalf("LookupInstances %s: %v (it read what it did not ask for)", c.name, err)
		}
		gotIDs := ids(got)
		slices.Sort(gotIDs)
		if !slices.Equal(gotIDs, c.want) {
			t.Fatalf("LookupInstances %s: %v, want %v", c.name, gotIDs, c.want)
		}
		for _, in := range got {
			if !slices.Contains(c.q.States, in.State) {
				t.Fatalf("LookupInstances %s: %s is %v", c.name, in.ID, in.State)
			}
		}
	}
	// With a limit: newest CreatedAt first, then the higher Seq.
	got, err := e.s.LookupInstances(ctx, &store.Query{States: []store.State{store.Scheduled}, Limit: 2})
	if err != nil || !slices.Equal(ids(got), []string{"fut-2", "fut-1"}) {
		t.Fatalf("LookupInstances scheduled, limit 2: %v, %v; want fut-2, fut-1", ids(got), err)
	}

	hs, err := e.s.LookupHistory(ctx, &store.Query{States: []store.State{store.Terminated, store.TimedOut}})
	if err != nil {
		t.Fatalf("LookupHistory of final states: %v (it read what it did not ask for)", err)
	}
	want := []string{"late-1 terminated", "term-1 terminated", "term-2 terminated", "tout-1 timedout"}
	if got := histKeys(hs); !slices.Equal(sorted(got), want) {
		t.Fatalf("LookupHistory of final states: %v, want %v", got, want)
	}
	hs, err = e.s.LookupHistory(ctx, &store.Query{Kind: "other", States: []store.State{store.Terminated}})
	if err != nil || !slices.Equal(sorted(histKeys(hs)), []string{"late-1 terminated", "term-1 terminated"}) {
		t.Fatalf("LookupHistory of a kind's terminated: %v, %v", histKeys(hs), err)
	}

	// The completed ones are damaged, so a lookup that must read them
	// reports them: the check above could fail.
	if _, err := e.s.LookupInstances(ctx, &store.Query{States: []store.State{store.Completed}}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("LookupInstances of the damaged completed ones: %v, want ErrCorrupt", err)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// testRunSet: the run set holds exactly the Processing instances through
// claims, renewals, finishes (retries and hand-backs included), cancels
// of running instances and rescues.
func testRunSet(t *testing.T, h Harness) {
	e := layout(t, h)
	check := func(when string, want ...string) {
		t.Helper()
		ms, err := e.rc.SMembers(t.Context(), e.keys.Run()).Result()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range ms {
			id, err := redisscript.DecodeID(m)
			if err != nil {
				t.Fatalf("%s: run set member: %v", when, err)
			}
			got = append(got, id)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: run set %v, want %v", when, got, want)
		}
	}
	var ins []*store.Instance
	for i := 1; i <= 6; i++ {
		ins = append(ins, inst("r-"+strconv.Itoa(i), "q"))
	}
	e.enqueue(base, ins...)
	check("after enqueue")
	e.claim("q", "w", 6, at(time.Second), at(time.Minute))
	check("after claim", "r-1", "r-2", "r-3", "r-4", "r-5", "r-6")
	if _, err := e.s.Renew(t.Context(), &store.RenewParams{Owner: "w", Leases: []store.LeaseRef{{ID: "r-1", Attempt: 1}}, Until: at(time.Hour), Now: at(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	check("after renew", "r-1", "r-2", "r-3", "r-4", "r-5", "r-6")
	e.finish("w", at(3*time.Second),
		store.Outcome{ID: "r-2", Attempt: 1, State: store.Completed},
		store.Outcome{ID: "r-3", Attempt: 1, State: store.Scheduled, RunAt: at(time.Hour), Error: "retry"},
		store.Outcome{ID: "r-4", Attempt: 1, State: store.Scheduled, RunAt: at(0), Release: true})
	check("after finish", "r-1", "r-5", "r-6")
	if _, err := e.s.Cancel(t.Context(), &store.CancelParams{ID: "r-5", Now: at(4 * time.Second), Node: "n"}); err != nil {
		t.Fatal(err)
	}
	check("after a cancel request (still running until its owner finishes it)", "r-1", "r-5", "r-6")
	e.finish("w", at(5*time.Second), store.Outcome{ID: "r-5", Attempt: 1, State: store.Canceled})
	check("after the canceled attempt finished", "r-1", "r-6")
	e.claim("q", "w2", 1, at(6*time.Second), at(time.Minute)) // r-4, handed back
	check("after claiming the handed-back one", "r-1", "r-4", "r-6")
	// r-6 and r-4 end at 1 minute and are rescued; r-1 was renewed.
	if got := sorted(ids(e.rescue(at(2*time.Minute), 10))); !slices.Equal(got, []string{"r-4", "r-6"}) {
		t.Fatalf("rescue: %v, want r-4 and r-6", got)
	}
	check("after rescue", "r-1")
}

package storetest

// Ambiguous calls: a caller whose call timed out or lost its connection
// does not know whether the store applied it, and repeats it. These tests
// pin down that a repeat is safe.

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

func (e *env) claimSeq(s store.Store, queue, owner string, limit int, now time.Time, seq uint64) *store.ClaimResult {
	e.t.Helper()
	res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: queue, Owner: owner, Limit: limit, Now: now, LeaseUntil: now.Add(lease), ClaimSeq: seq})
	if err != nil {
		e.t.Fatalf("Claim(queue %s, limit %d, seq %d): %v", queue, limit, seq, err)
	}
	return res
}

// A claim repeated with its ClaimSeq returns what the first call took and
// claims nothing new; a call with an older ClaimSeq (one that reached the
// store after a newer claim) claims nothing at all.
func testClaimRepeat(t *testing.T, h Harness) {
	e := setup(t, h)
	var ins []*store.Instance
	for _, id := range []string{"cr-1", "cr-2", "cr-3", "cr-4"} {
		ins = append(ins, inst(id, "q-cr"))
	}
	e.enqueue(e.s, base, ins...)
	first := e.claimSeq(e.s, "q-cr", "w1", 2, at(time.Second), 7)
	checkIDs(t, "first claim with seq 7", first.Instances, "cr-1", "cr-2")

	// The repeat (through another handle, a little later) returns the same
	// attempts, with the lease the first call gave them.
	again := e.claimSeq(e.open(), "q-cr", "w1", 2, at(2*time.Second), 7)
	checkIDs(t, "repeated claim with seq 7", again.Instances, "cr-1", "cr-2")
	for _, in := range again.Instances {
		checkLease(t, in, "w1", 1, at(time.Second).Add(lease))
	}
	for _, id := range []string{"cr-3", "cr-4"} {
		if got := e.get(e.s, id); got.State != store.Scheduled || got.Attempt != 0 {
			t.Fatalf("%s after a repeated claim: %v attempt %d; want it still scheduled, never claimed", id, got.State, got.Attempt)
		}
	}
	// A finished attempt is no longer returned by a repeat.
	e.finishOK(e.s, "w1", at(3*time.Second), store.Outcome{ID: "cr-1", Attempt: 1, State: store.Completed})
	checkIDs(t, "claim with seq 7 after cr-1 finished", e.claimSeq(e.s, "q-cr", "w1", 2, at(3*time.Second), 7).Instances, "cr-2")

	// A newer claim takes new work; the old number is then stale.
	checkIDs(t, "claim with seq 8", e.claimSeq(e.s, "q-cr", "w1", 1, at(4*time.Second), 8).Instances, "cr-3")
	if got := e.claimSeq(e.s, "q-cr", "w1", 2, at(5*time.Second), 7); len(got.Instances) != 0 {
		t.Fatalf("a late claim with seq 7 after seq 8 returned %v, want nothing", ids(got.Instances))
	}
	if got := e.get(e.s, "cr-4"); got.State != store.Scheduled {
		t.Fatalf("cr-4 after a late claim: %v, want scheduled (a stale call claims nothing)", got.State)
	}
	// Numbers are per owner: another owner's claim is not a repeat.
	checkIDs(t, "claim of w2 with seq 8", e.claimSeq(e.s, "q-cr", "w2", 1, at(6*time.Second), 8).Instances, "cr-4")

	// A repeat whose first call found nothing ready finds nothing either,
	// even when work became ready since.
	cr5 := inst("cr-5", "q-cr")
	cr5.RunAt = at(7 * time.Second)
	e.enqueue(e.s, at(6*time.Second), cr5)
	if got := e.claimSeq(e.s, "q-cr", "w2", 1, at(6*time.Second), 9); len(got.Instances) != 0 {
		t.Fatalf("claim of w2 with seq 9 before cr-5 was due returned %v", ids(got.Instances))
	}
	if got := e.claimSeq(e.s, "q-cr", "w2", 1, at(8*time.Second), 9); len(got.Instances) != 0 {
		t.Fatalf("repeat of an empty claim returned %v, want nothing (the first call claimed nothing)", ids(got.Instances))
	}
	checkIDs(t, "claim of w2 with seq 10", e.claimSeq(e.s, "q-cr", "w2", 1, at(8*time.Second), 10).Instances, "cr-5")

	// Numbers are compared exactly, however large (a Lua number or a
	// float64 holds integers exactly only to 2^53).
	big := uint64(1)<<62 + 1
	for i, id := range []string{"cr-big-1", "cr-big-2"} {
		e.enqueue(e.s, at(9*time.Second), inst(id, "q-cr"))
		checkIDs(t, fmt.Sprintf("claim with seq 2^62+%d", 1+i), e.claimSeq(e.s, "q-cr", "w3", 1, at(9*time.Second), big+uint64(i)).Instances, id)
	}

	// Without a ClaimSeq, claims are never repeats.
	e.enqueue(e.s, at(9*time.Second), inst("cr-6", "q-cr"))
	checkIDs(t, "claim without a seq", e.claim(e.s, "q-cr", "w2", 1, at(9*time.Second)).Instances, "cr-6")
}

// Finish repeated with the same outcome succeeds and records nothing
// twice; another outcome for the same attempt is still refused.
func testFinishRepeated(t *testing.T, h Harness) {
	e := setup(t, h)
	for _, c := range outcomeCases() {
		id := "rep-" + c.name
		q := "q-rep-" + c.name
		e.enqueue(e.s, base, inst(id, q))
		e.claimOne(e.s, q, "w1", base, id)
		o := c.out
		o.ID, o.Attempt = id, 1
		e.finishOK(e.s, "w1", at(time.Second), o)
		after := e.get(e.s, id)
		hist := e.history(e.s, &store.Query{InstanceID: id})
		errs := e.finish(e.open(), "w1", at(2*time.Second), o)
		if errs[0].Err != nil {
			t.Fatalf("Finish repeated with the same outcome (%s): %v, want it reported as applied", c.name, errs[0].Err)
		}
		checkRecord(t, "instance after a repeated "+c.name, after, e.get(e.s, id))
		if h2 := e.history(e.s, &store.Query{InstanceID: id}); len(h2) != len(hist) {
			t.Fatalf("repeated Finish (%s) added history: %d records, had %d", c.name, len(h2), len(hist))
		}
		// Another owner repeating it is not the owner that applied it.
		errs = e.finish(e.s, "w2", at(2*time.Second), o)
		wantErr(t, "the same outcome ("+c.name+") from another owner", errs[0].Err, store.ErrLeaseLost)
	}
	// A rescued attempt that ended Terminated is not the owner's outcome,
	// even when the owner reports the same state.
	one := inst("rep-rescued", "q-rep-rescued")
	one.MaxRetries = 0
	e.enqueue(e.s, base, one)
	e.claimOne(e.s, "q-rep-rescued", "w1", base, "rep-rescued")
	e.rescue(e.s, at(time.Hour), 10)
	rescued := e.get(e.s, "rep-rescued")
	errs := e.finish(e.s, "w1", at(time.Hour+time.Second), store.Outcome{ID: "rep-rescued", Attempt: 1, State: store.Terminated, Error: rescued.Error + "!"})
	wantErr(t, "Finish of a rescued attempt", errs[0].Err, store.ErrLeaseLost)
}

// Enqueue repeated with the same instance ID changes nothing and says so.
func testEnqueueRepeated(t *testing.T, h Harness) {
	e := setup(t, h)
	in := inst("er-1", "q-er")
	first := e.enqueue(e.s, base, in)
	if first[0].Existed {
		t.Fatal("first Enqueue reported Existed")
	}
	stored := e.get(e.s, "er-1")
	changed := in.Clone()
	changed.Args = []byte(`["other"]`)
	again := e.enqueue(e.open(), at(time.Second), changed, inst("er-2", "q-er"))
	if !again[0].Existed || again[0].Seq != first[0].Seq || again[0].Err != nil {
		t.Fatalf("repeated Enqueue of er-1: %+v; want Existed, Seq %d, no error", again[0], first[0].Seq)
	}
	if again[1].Existed {
		t.Fatal("a new instance next to a repeated one reported Existed")
	}
	checkRecord(t, "er-1 after a repeated Enqueue", stored, e.get(e.s, "er-1"))
	if hist := e.history(e.s, &store.Query{InstanceID: "er-1"}); len(hist) != 2 {
		t.Fatalf("er-1 has %d history records after a repeated Enqueue, want 2", len(hist))
	}
	checkIDs(t, "claim after a repeated Enqueue", e.claim(e.s, "q-er", "w1", 10, at(2*time.Second)).Instances, "er-1", "er-2")
}

package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// limitTests pin ClaimParams.Limits (issue 36 item 1). A store whose
// Harness says Limits: false must not claim to enforce them (the engine
// then refuses to set one); the checks run on the others.
var limitTests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"LimitsKind", testLimitsKind},
	{"LimitsReleased", testLimitsReleased},
	{"LimitsScopes", testLimitsScopes},
	{"LimitsClaimRepeat", testLimitsClaimRepeat},
	{"LimitsConcurrent", testLimitsConcurrent},
	{"LimitsInvalid", testLimitsInvalid},
}

// limitsSetup is setup for a limits check: it fails when the store's
// capability disagrees with the harness, and says whether to go on.
func limitsSetup(t *testing.T, h Harness) (*env, bool) {
	t.Helper()
	e := setup(t, h)
	if got := store.EnforcesLimits(e.s); got != h.Limits {
		t.Fatalf("store.EnforcesLimits = %v, Harness.Limits = %v; a store that enforces ClaimParams.Limits implements store.LimitEnforcer and its harness sets Limits", got, h.Limits)
	}
	return e, h.Limits
}

func (e *env) claimLimited(s store.Store, queue, owner string, limit int, now time.Time, seq uint64, ls ...store.ConcurrencyLimit) *store.ClaimResult {
	e.t.Helper()
	res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: queue, Owner: owner, Limit: limit, Now: now, LeaseUntil: now.Add(lease), ClaimSeq: seq, Limits: ls})
	if err != nil {
		e.t.Fatalf("Claim(queue %s, limits %v): %v", queue, ls, err)
	}
	if len(res.Instances) > limit {
		e.t.Fatalf("Claim(queue %s, limit %d) returned %d instances", queue, limit, len(res.Instances))
	}
	return res
}

func kindInst(id, queue, kind string, d time.Duration) *store.Instance {
	in := inst(id, queue)
	in.Kind = kind
	in.RunAt = at(d)
	return in
}

func idsOf(ins []*store.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.ID
	}
	return out
}

// testLimitsKind: a kind at its limit is skipped and the claim goes on
// with what follows it in claim order.
func testLimitsKind(t *testing.T, h Harness) {
	e, ok := limitsSetup(t, h)
	if !ok {
		return
	}
	const q = "q-lim"
	var ins []*store.Instance
	for i := range 5 { // kind-a first in claim order
		ins = append(ins, kindInst(fmt.Sprintf("a%d", i), q, "kind-a", time.Duration(i)*time.Millisecond))
	}
	for i := range 3 {
		ins = append(ins, kindInst(fmt.Sprintf("b%d", i), q, "kind-b", time.Duration(10+i)*time.Millisecond))
	}
	e.enqueue(e.s, base, ins...)
	lim := store.ConcurrencyLimit{Kind: "kind-a", Max: 2}
	now := at(time.Second)
	res := e.claimLimited(e.s, q, "w1", 10, now, 0, lim)
	if got, want := fmt.Sprint(idsOf(res.Instances)), "[a0 a1 b0 b1 b2]"; got != want {
		t.Fatalf("claim with kind-a limited to 2 took %s, want %s", got, want)
	}
	if !res.Limited {
		t.Errorf("claim that left a0's followers for the limit: Limited false, want true")
	}
	// Another handle, another owner: the limit is the cluster's.
	res = e.claimLimited(e.open(), q, "w2", 10, now, 0, lim)
	if len(res.Instances) != 0 || !res.Limited {
		t.Fatalf("claim at the limit took %v (Limited %v), want nothing and Limited", idsOf(res.Instances), res.Limited)
	}
	if !res.NextRunAt.IsZero() {
		t.Errorf("claim at the limit: NextRunAt %v, want zero (the waiting ones are ready, held by the limit)", res.NextRunAt)
	}
	// A claim without the limit is not held by it.
	res = e.claim(e.s, q, "w3", 1, now)
	if got := idsOf(res.Instances); len(got) != 1 || got[0] != "a2" {
		t.Fatalf("claim without limits took %v, want [a2]", got)
	}
	// Now 3 run: the limit lets none start until two end.
	e.finishOK(e.s, "w1", now, store.Outcome{ID: "a0", Attempt: 1, State: store.Completed})
	if res = e.claimLimited(e.s, q, "w1", 10, now, 0, lim); len(res.Instances) != 0 {
		t.Fatalf("claim with 2 of kind-a running and a limit of 2 took %v", idsOf(res.Instances))
	}
	e.finishOK(e.s, "w1", now, store.Outcome{ID: "a1", Attempt: 1, State: store.Completed})
	res = e.claimLimited(e.s, q, "w1", 10, now, 0, lim)
	if got := fmt.Sprint(idsOf(res.Instances)); got != "[a3]" {
		t.Fatalf("claim after two ended took %s, want [a3]", got)
	}
}

// testLimitsReleased: every way out of Processing gives the slot back.
func testLimitsReleased(t *testing.T, h Harness) {
	e, ok := limitsSetup(t, h)
	if !ok {
		return
	}
	const q = "q-rel"
	var ins []*store.Instance
	for i := range 9 {
		ins = append(ins, kindInst(fmt.Sprintf("r%d", i), q, "kind-a", time.Duration(i)*time.Millisecond))
	}
	e.enqueue(e.s, base, ins...)
	lim := store.ConcurrencyLimit{Kind: "kind-a", Max: 1}
	now := at(time.Second)
	// one claims the single slot, checks that nothing more is claimed
	// with it taken, and returns what it claimed.
	var seq uint64
	one := func(step string, now time.Time) *store.Instance {
		t.Helper()
		seq++
		res := e.claimLimited(e.s, q, "w", 5, now, seq, lim)
		if len(res.Instances) != 1 {
			t.Fatalf("%s: claim with a limit of 1 took %v, want one", step, idsOf(res.Instances))
		}
		seq++
		if again := e.claimLimited(e.open(), q, "w", 5, now, seq, lim); len(again.Instances) != 0 {
			t.Fatalf("%s: claim with the slot taken took %v", step, idsOf(again.Instances))
		}
		return res.Instances[0]
	}
	in := one("first", now)
	e.finishOK(e.s, "w", now, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Terminated, Error: "x"})
	in = one("after a Terminated outcome", now)
	e.finishOK(e.s, "w", now, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: at(time.Hour), Error: "retry"})
	in = one("after a retry", now)
	e.finishOK(e.s, "w", now, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: at(time.Hour), Release: true, Error: "handed back"})
	in = one("after a hand-back", now)
	// The lease lapses: Rescue takes it back (to Scheduled, keeping its
	// place, so it is what the next claim takes).
	later := now.Add(2 * lease)
	if got := e.rescue(e.s, later, 10); len(got) != 1 || got[0].ID != in.ID {
		t.Fatalf("Rescue after the lease lapsed moved %v, want [%s]", got, in.ID)
	}
	in = one("after a rescue", later)
	// Cancel a running one: the slot is held until its attempt ends.
	if _, err := e.s.Cancel(e.ctx, &store.CancelParams{ID: in.ID, Now: later, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	seq++
	if res := e.claimLimited(e.s, q, "w", 5, later, seq, lim); len(res.Instances) != 0 {
		t.Fatalf("claim while a canceled attempt still runs took %v", idsOf(res.Instances))
	}
	e.finishOK(e.s, "w", later, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Canceled, Error: "canceled"})
	in = one("after a cancel", later)
	e.del(e.s, in.ID)
	in = one("after a delete", later)
	e.finishOK(e.s, "w", later, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed})
	// A dead node's attempt: RescueNodes gives its slot back.
	e.heartbeat(e.s, "dead", at(0), false, 0)
	seq++
	res := e.claimLimited(e.s, q, "dead", 5, later, seq, lim)
	if len(res.Instances) != 1 {
		t.Fatalf("claim by node dead took %v, want one", idsOf(res.Instances))
	}
	waitUntil(t, "node dead's attempt rescued", func() bool {
		e.heartbeat(e.s, "live", later, false, 0)
		return len(e.rescueNodes(e.s, "rescuer", later.Add(time.Second), 10).Rescued) > 0
	})
	one("after the dead node's rescue", later.Add(time.Second))
	// The running counts agree: one kind-a attempt runs.
	e.wantCounts("after the releases", map[string]int64{
		"q-rel/kind-a/processing": 1, "q-rel/kind-a/scheduled": 4, "q-rel/kind-a/completed": 1,
		"q-rel/kind-a/terminated": 1, "q-rel/kind-a/canceled": 1,
	})
}

// testLimitsScopes: a kind's limit spans queues; a queue's limit spans
// kinds; a limit of both bounds that pair; Max 0 lets none start; a
// limit of another queue or kind does not hold this one.
func testLimitsScopes(t *testing.T, h Harness) {
	e, ok := limitsSetup(t, h)
	if !ok {
		return
	}
	now := at(time.Second)
	e.enqueue(e.s, base,
		kindInst("x1", "q-x", "kind-a", 0), kindInst("x2", "q-x", "kind-a", 1*time.Millisecond),
		kindInst("y1", "q-y", "kind-a", 0), kindInst("y2", "q-y", "kind-b", 1*time.Millisecond),
		kindInst("y3", "q-y", "kind-b", 2*time.Millisecond), kindInst("y4", "q-y", "kind-c", 3*time.Millisecond),
	)
	kindA := store.ConcurrencyLimit{Kind: "kind-a", Max: 1}
	if got := idsOf(e.claimLimited(e.s, "q-x", "w", 5, now, 0, kindA).Instances); fmt.Sprint(got) != "[x1]" {
		t.Fatalf("claim of q-x with kind-a limited to 1 took %v, want [x1]", got)
	}
	// kind-a's slot is taken in q-x: q-y's kind-a waits; queue q-y
	// limited to 2 lets two of the rest start; kind-c at 0 lets none.
	res := e.claimLimited(e.s, "q-y", "w", 5, now, 0, kindA,
		store.ConcurrencyLimit{Queue: "q-y", Max: 2},
		store.ConcurrencyLimit{Kind: "kind-c", Max: 0},
		store.ConcurrencyLimit{Kind: "kind-b", Queue: "q-x", Max: 0}, // another queue's: not this one's
	)
	if got := fmt.Sprint(idsOf(res.Instances)); got != "[y2 y3]" {
		t.Fatalf("claim of q-y took %s, want [y2 y3]", got)
	}
	res = e.claimLimited(e.s, "q-y", "w", 5, now, 0, store.ConcurrencyLimit{Kind: "kind-c", Max: 0})
	if got := fmt.Sprint(idsOf(res.Instances)); got != "[y1]" {
		t.Fatalf("claim of q-y with only kind-c stopped took %s, want [y1]", got)
	}
	// A limit over everything counts all 4 running.
	if res = e.claimLimited(e.s, "q-y", "w", 5, now, 0, store.ConcurrencyLimit{Max: 4}); len(res.Instances) != 0 || !res.Limited {
		t.Fatalf("claim with 4 running and a global limit of 4 took %v (Limited %v)", idsOf(res.Instances), res.Limited)
	}
	if res = e.claimLimited(e.s, "q-y", "w", 5, now, 0, store.ConcurrencyLimit{Max: 5}); fmt.Sprint(idsOf(res.Instances)) != "[y4]" {
		t.Fatalf("claim with 4 running and a global limit of 5 took %v, want [y4]", idsOf(res.Instances))
	}
}

// testLimitsClaimRepeat: the repeat of a claim whose reply was lost
// returns what it took and takes no second slot.
func testLimitsClaimRepeat(t *testing.T, h Harness) {
	e, ok := limitsSetup(t, h)
	if !ok {
		return
	}
	const q = "q-rep"
	var ins []*store.Instance
	for i := range 6 {
		ins = append(ins, kindInst(fmt.Sprintf("p%d", i), q, "kind-a", time.Duration(i)*time.Millisecond))
	}
	e.enqueue(e.s, base, ins...)
	lim := store.ConcurrencyLimit{Kind: "kind-a", Max: 3}
	now := at(time.Second)
	first := e.claimLimited(e.s, q, "w", 2, now, 7, lim)
	again := e.claimLimited(e.open(), q, "w", 2, now, 7, lim)
	if a, b := fmt.Sprint(idsOf(first.Instances)), fmt.Sprint(idsOf(again.Instances)); a != "[p0 p1]" || b != a {
		t.Fatalf("claim took %s and its repeat returned %s, want [p0 p1] twice", a, b)
	}
	if got := idsOf(e.claimLimited(e.s, q, "w", 5, now, 8, lim).Instances); fmt.Sprint(got) != "[p2]" {
		t.Fatalf("next claim with 2 of 3 slots taken took %v, want [p2]", got)
	}
}

// testLimitsConcurrent: several handles claim and finish at once; the
// running count a limit bounds never exceeds it, and an unlimited kind
// is never held behind the limited one.
func testLimitsConcurrent(t *testing.T, h Harness) {
	e, ok := limitsSetup(t, h)
	if !ok {
		return
	}
	const (
		q       = "q-lconc"
		max     = 5
		nA, nB  = 400, 100
		workers = 12
	)
	ss := []store.Store{e.s, e.open(), e.open(), e.open()}
	var batch []*store.Instance
	for i := range nA {
		batch = append(batch, kindInst(fmt.Sprintf("ca%04d", i), q, "kind-a", time.Duration(i)*time.Millisecond))
	}
	for i := range nB { // behind every kind-a in claim order
		batch = append(batch, kindInst(fmt.Sprintf("cb%04d", i), q, "kind-b", time.Duration(nA+i)*time.Millisecond))
	}
	for i := 0; i < len(batch); i += 100 {
		e.enqueue(e.s, base, batch[i:min(i+100, len(batch))]...)
	}
	lim := store.ConcurrencyLimit{Kind: "kind-a", Max: max}
	now := at(time.Hour)
	var (
		running, peak atomic.Int64 // kind-a attempts from Claim's return to Finish's call
		doneA, doneB  atomic.Int64
		firstB        atomic.Int64 // kind-a done when the first kind-b was claimed
		mu            sync.Mutex
		errs          []error
		wg            sync.WaitGroup
	)
	firstB.Store(-1)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	deadline := time.Now().Add(2 * time.Minute)
	for w := range workers {
		wg.Go(func() {
			s, owner := ss[w%len(ss)], fmt.Sprintf("lw%02d", w)
			for doneA.Load()+doneB.Load() < nA+nB {
				if time.Now().After(deadline) {
					fail(fmt.Errorf("%s gave up: %d kind-a and %d kind-b done", owner, doneA.Load(), doneB.Load()))
					return
				}
				res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: q, Owner: owner, Limit: 1 + w%3, Now: now, LeaseUntil: now.Add(lease), Limits: []store.ConcurrencyLimit{lim}})
				if err != nil {
					fail(fmt.Errorf("%s: Claim: %w", owner, err))
					return
				}
				if len(res.Instances) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				var outs []store.Outcome
				for _, in := range res.Instances {
					if in.Kind == "kind-a" {
						r := running.Add(1)
						for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
						}
						if r > max {
							c, _ := s.Counts(e.ctx, &store.CountsParams{Kind: "kind-a"})
							fail(fmt.Errorf("%d kind-a running after a claim by %s of %v, limit %d (store counts %+v)", r, owner, idsOf(res.Instances), max, c))
						}
					} else {
						firstB.CompareAndSwap(-1, doneA.Load())
					}
					outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed})
				}
				// Uncounted before the store releases the slots, so running
				// never counts more than the store does.
				for _, in := range res.Instances {
					if in.Kind == "kind-a" {
						running.Add(-1)
					}
				}
				fr, err := s.Finish(e.ctx, &store.FinishParams{Owner: owner, Now: now, Outcomes: outs})
				if err != nil {
					fail(fmt.Errorf("%s: Finish: %w", owner, err))
					return
				}
				for i, in := range res.Instances {
					if fr[i].Err != nil {
						fail(fmt.Errorf("%s: Finish %s: %w", owner, in.ID, fr[i].Err))
					}
					if in.Kind == "kind-a" {
						doneA.Add(1)
					} else {
						doneB.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// running counts an attempt from after the store counted it to before
	// the store released it, so it never exceeds what the store counted.
	t.Logf("peak kind-a running seen: %d (limit %d)", peak.Load(), max)
	if fb := firstB.Load(); fb < 0 || fb >= nA {
		t.Errorf("first kind-b claimed after %d of %d kind-a were done; an unlimited kind must not wait behind a limited one", fb, nA)
	}
}

// testLimitsInvalid: unusable limits are refused before anything is
// claimed (Validate), on every store.
func testLimitsInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	e.enqueue(e.s, base, inst("i1", "q-inv"))
	now := at(time.Second)
	for _, ls := range [][]store.ConcurrencyLimit{
		{{Kind: "kind-a", Max: -1}},
		{{Kind: "kind-a", Max: 1}, {Kind: "kind-a", Max: 2}},
	} {
		_, err := e.s.Claim(e.ctx, &store.ClaimParams{Queue: "q-inv", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(lease), Limits: ls})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Claim with limits %v: %v, want ErrInvalid", ls, err)
		}
	}
	if got := e.get(e.s, "i1"); got.State != store.Scheduled {
		t.Errorf("after refused claims i1 is %v, want scheduled", got.State)
	}
}

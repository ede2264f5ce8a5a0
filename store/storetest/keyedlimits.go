package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// keyedLimitTests pin per-key concurrency limits (ConcurrencyLimit.PerKey
// and Instance.LimitKey; issue 36 items 1 and 4). A store whose Harness
// says KeyedLimits: false must not claim to enforce them.
var keyedLimitTests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"LimitsKeyed", testLimitsKeyed},
	{"LimitsKeyedReleased", testLimitsKeyedReleased},
	{"LimitsKeyedConcurrent", testLimitsKeyedConcurrent},
	{"LimitsKeyedInvalid", testLimitsKeyedInvalid},
}

// keyedSetup is setup for a keyed limits check: it fails when the
// store's capability disagrees with the harness, and says whether to go
// on.
func keyedSetup(t *testing.T, h Harness) (*env, bool) {
	t.Helper()
	e := setup(t, h)
	if got := store.EnforcesKeyedLimits(e.s); got != h.KeyedLimits {
		t.Fatalf("store.EnforcesKeyedLimits = %v, Harness.KeyedLimits = %v; a store that enforces per-key limits implements store.KeyedLimitEnforcer (and store.LimitEnforcer) and its harness sets KeyedLimits", got, h.KeyedLimits)
	}
	return e, h.KeyedLimits
}

func keyInst(id, queue, kind, key string, d time.Duration) *store.Instance {
	in := kindInst(id, queue, kind, d)
	in.LimitKey = key
	return in
}

// testLimitsKeyed: a key at its limit holds back only its own instances;
// the others (other keys, the empty key, other kinds) go on in claim
// order; the next of a key is the one enqueued first; a limit of the
// whole kind still bounds the sum.
func testLimitsKeyed(t *testing.T, h Harness) {
	e, ok := keyedSetup(t, h)
	if !ok {
		return
	}
	const q = "q-key"
	e.enqueue(e.s, base,
		keyInst("a0", q, "kind-a", "cust-1", 0),
		keyInst("a1", q, "kind-a", "cust-1", 1*time.Millisecond),
		keyInst("b0", q, "kind-a", "cust-2", 2*time.Millisecond),
		keyInst("a2", q, "kind-a", "cust-1", 3*time.Millisecond),
		keyInst("b1", q, "kind-a", "cust-2", 4*time.Millisecond),
		keyInst("n0", q, "kind-a", "", 5*time.Millisecond),
		keyInst("n1", q, "kind-a", "", 6*time.Millisecond),
		keyInst("o0", q, "kind-b", "cust-1", 7*time.Millisecond), // another kind: not bounded
		keyInst("c0", q, "kind-a", "cust-3", 8*time.Millisecond),
	)
	if got := e.get(e.s, "a0").LimitKey; got != "cust-1" {
		t.Fatalf("a0 read back with LimitKey %q, want cust-1", got)
	}
	perKey := store.ConcurrencyLimit{Kind: "kind-a", Max: 1, PerKey: true}
	now := at(time.Second)
	res := e.claimLimited(e.s, q, "w1", 10, now, 0, perKey)
	if got, want := fmt.Sprint(idsOf(res.Instances)), "[a0 b0 n0 o0 c0]"; got != want {
		t.Fatalf("claim with kind-a limited to 1 per key took %s, want %s", got, want)
	}
	if !res.Limited {
		t.Errorf("claim that left a1, a2, b1 and n1 for their keys' limit: Limited false, want true")
	}
	if got := res.Instances[0].LimitKey; got != "cust-1" {
		t.Errorf("claimed a0 has LimitKey %q, want cust-1", got)
	}
	// Another handle: every key is at its limit.
	res = e.claimLimited(e.open(), q, "w2", 10, now, 0, perKey)
	if len(res.Instances) != 0 || !res.Limited {
		t.Fatalf("claim with every key at its limit took %v (Limited %v), want nothing and Limited", idsOf(res.Instances), res.Limited)
	}
	// cust-1's next is a1, the first enqueued, not a2.
	e.finishOK(e.s, "w1", now, store.Outcome{ID: "a0", Attempt: 1, State: store.Completed})
	res = e.claimLimited(e.s, q, "w1", 10, now, 0, perKey)
	if got := fmt.Sprint(idsOf(res.Instances)); got != "[a1]" {
		t.Fatalf("claim after a0 ended took %s, want [a1]", got)
	}
	// Two per key, and at most 6 of the kind in all, 4 running: a2 and b1
	// start; n1 would pass its key's limit but not the kind's.
	two := store.ConcurrencyLimit{Kind: "kind-a", Max: 2, PerKey: true}
	all := store.ConcurrencyLimit{Kind: "kind-a", Max: 6}
	res = e.claimLimited(e.s, q, "w1", 10, now, 0, two, all)
	if got := fmt.Sprint(idsOf(res.Instances)); got != "[a2 b1]" {
		t.Fatalf("claim with 2 per key and 6 of the kind, 4 running, took %s, want [a2 b1]", got)
	}
	if res = e.claimLimited(e.s, q, "w1", 10, now, 0, two, all); len(res.Instances) != 0 || !res.Limited {
		t.Fatalf("claim with the kind at its limit of 6 took %v (Limited %v), want nothing", idsOf(res.Instances), res.Limited)
	}
	// A limit of 2 per key on a queue spans kinds: cust-1 runs a1, a2
	// and o0, so nothing more of cust-1 starts; n1 (the empty key) does.
	e.enqueue(e.s, base, keyInst("o1", q, "kind-b", "cust-1", 9*time.Millisecond))
	res = e.claimLimited(e.s, q, "w1", 10, now, 0, store.ConcurrencyLimit{Queue: q, Max: 2, PerKey: true})
	if got := fmt.Sprint(idsOf(res.Instances)); got != "[n1]" {
		t.Fatalf("claim with queue %s limited to 2 per key took %s, want [n1]", q, got)
	}
}

// testLimitsKeyedReleased: every way out of Processing gives the key's
// slot back, and only that key's.
func testLimitsKeyedReleased(t *testing.T, h Harness) {
	e, ok := keyedSetup(t, h)
	if !ok {
		return
	}
	const q = "q-krel"
	var ins []*store.Instance
	for i := range 9 {
		ins = append(ins, keyInst(fmt.Sprintf("r%d", i), q, "kind-a", "k", time.Duration(i)*time.Millisecond))
	}
	e.enqueue(e.s, base, ins...)
	lim := store.ConcurrencyLimit{Kind: "kind-a", Max: 1, PerKey: true}
	now := at(time.Second)
	var seq uint64
	// one claims key k's single slot, checks it took the next of k in
	// order and that nothing more of k is claimed with the slot taken.
	one := func(step string, now time.Time, owner string) *store.Instance {
		t.Helper()
		seq++
		res := e.claimLimited(e.s, q, owner, 5, now, seq, lim)
		if len(res.Instances) != 1 {
			t.Fatalf("%s: claim with a limit of 1 per key took %v, want one", step, idsOf(res.Instances))
		}
		seq++
		if again := e.claimLimited(e.open(), q, "w", 5, now, seq, lim); len(again.Instances) != 0 {
			t.Fatalf("%s: claim with key k's slot taken took %v", step, idsOf(again.Instances))
		}
		return res.Instances[0]
	}
	in := one("first", now, "w")
	e.finishOK(e.s, "w", now, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Terminated, Error: "x"})
	in = one("after a Terminated outcome", now, "w")
	e.finishOK(e.s, "w", now, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: at(time.Hour), Error: "retry"})
	in = one("after a retry", now, "w")
	e.finishOK(e.s, "w", now, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: now, Release: true, Error: "handed back"})
	in = one("after a hand-back", now, "w")
	later := now.Add(2 * lease)
	if got := e.rescue(e.s, later, 10); len(got) != 1 || got[0].ID != in.ID {
		t.Fatalf("Rescue after the lease lapsed moved %v, want [%s]", got, in.ID)
	}
	rescued := in.ID
	if in = one("after a rescue", later, "w"); in.ID != rescued {
		t.Fatalf("after the rescue of %s the claim took %s; the rescued one keeps its place in its key's order", rescued, in.ID)
	}
	if _, err := e.s.Cancel(e.ctx, &store.CancelParams{ID: in.ID, Now: later, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	seq++
	if res := e.claimLimited(e.s, q, "w", 5, later, seq, lim); len(res.Instances) != 0 {
		t.Fatalf("claim while a canceled attempt of key k still runs took %v", idsOf(res.Instances))
	}
	e.finishOK(e.s, "w", later, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Canceled, Error: "canceled"})
	in = one("after a cancel", later, "w")
	e.del(e.s, in.ID)
	in = one("after a delete", later, "w")
	e.finishOK(e.s, "w", later, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed})
	// A dead node holds key k's slot: RescueNodes gives it back.
	e.heartbeat(e.s, "dead", at(0), false, 0)
	dead := one("claim by the node that dies", later, "dead")
	waitUntil(t, "node dead's attempt rescued", func() bool {
		e.heartbeat(e.s, "live", later, false, 0)
		return len(e.rescueNodes(e.s, "rescuer", later.Add(time.Second), 10).Rescued) > 0
	})
	if got := one("after the dead node's rescue", later.Add(time.Second), "w"); got.ID != dead.ID {
		t.Fatalf("after the rescue of the dead node's %s the claim took %s, want %s again", dead.ID, got.ID, dead.ID)
	}
}

// testLimitsKeyedConcurrent: several handles claim and finish instances
// of many keys at once with a limit of one per key: no key ever runs two,
// each key's instances run in the order they were enqueued, and every
// instance runs.
func testLimitsKeyedConcurrent(t *testing.T, h Harness) {
	e, ok := keyedSetup(t, h)
	if !ok {
		return
	}
	const (
		q       = "q-kconc"
		keys    = 16
		perKey  = 20
		workers = 12
		total   = keys * perKey
	)
	ss := []store.Store{e.s, e.open(), e.open(), e.open()}
	var batch []*store.Instance
	for i := range total { // keys interleaved in claim order
		batch = append(batch, keyInst(fmt.Sprintf("k%02d-%03d", i%keys, i/keys), q, "kind-a", fmt.Sprintf("key-%02d", i%keys), time.Duration(i)*time.Millisecond))
	}
	for i := 0; i < len(batch); i += 100 {
		e.enqueue(e.s, base, batch[i:min(i+100, len(batch))]...)
	}
	lim := store.ConcurrencyLimit{Kind: "kind-a", Max: 1, PerKey: true}
	now := at(time.Hour)
	var (
		mu      sync.Mutex
		running = map[string]int{} // per key: from Claim's return to Finish's call
		last    = map[string]int{} // per key: the index of its last claimed instance
		errs    []error
		done    atomic.Int64
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	deadline := time.Now().Add(2 * time.Minute)
	for w := range workers {
		wg.Go(func() {
			s, owner := ss[w%len(ss)], fmt.Sprintf("kw%02d", w)
			for done.Load() < total {
				if time.Now().After(deadline) {
					fail(fmt.Errorf("%s gave up: %d of %d done", owner, done.Load(), total))
					return
				}
				res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: q, Owner: owner, Limit: 1 + w%4, Now: now, LeaseUntil: now.Add(lease), Limits: []store.ConcurrencyLimit{lim}})
				if err != nil {
					fail(fmt.Errorf("%s: Claim: %w", owner, err))
					return
				}
				if len(res.Instances) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				var outs []store.Outcome
				mu.Lock()
				for _, in := range res.Instances {
					k := in.LimitKey
					running[k]++
					if running[k] > 1 {
						errs = append(errs, fmt.Errorf("key %s runs %d after a claim by %s of %v, limit 1 per key", k, running[k], owner, idsOf(res.Instances)))
					}
					var idx int
					fmt.Sscanf(in.ID[strings.IndexByte(in.ID, '-')+1:], "%d", &idx)
					if prev, ok := last[k]; (ok && idx != prev+1) || (!ok && idx != 0) {
						errs = append(errs, fmt.Errorf("key %s: claimed %s after its instance %d; a key's instances run in the order enqueued", k, in.ID, prev))
					}
					last[k] = idx
					outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed})
				}
				// Uncounted before the store releases the slots.
				for _, in := range res.Instances {
					running[in.LimitKey]--
				}
				mu.Unlock()
				fr, err := s.Finish(e.ctx, &store.FinishParams{Owner: owner, Now: now, Outcomes: outs})
				if err != nil {
					fail(fmt.Errorf("%s: Finish: %w", owner, err))
					return
				}
				for i, in := range res.Instances {
					if fr[i].Err != nil {
						fail(fmt.Errorf("%s: Finish %s: %w", owner, in.ID, fr[i].Err))
					}
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if got := last[fmt.Sprintf("key-%02d", k)]; got != perKey-1 {
			t.Errorf("key-%02d: last claimed instance %d, want %d", k, got, perKey-1)
		}
	}
}

// testLimitsKeyedInvalid: an unusable limit key is refused at Enqueue; a
// limit of a kind and one per key of it may go together, two per key of
// the same kind may not.
func testLimitsKeyedInvalid(t *testing.T, h Harness) {
	e, ok := keyedSetup(t, h)
	if !ok {
		return
	}
	for _, key := range []string{strings.Repeat("k", store.MaxLimitKeyBytes+1), "\xff"} {
		_, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{keyInst("bad", "q-kinv", "kind-a", key, 0)}, Node: "n", Now: base})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Enqueue with limit key of %d bytes %q...: %v, want ErrInvalid", len(key), key[:1], err)
		}
	}
	now := at(time.Second)
	e.enqueue(e.s, base, keyInst("i1", "q-kinv", "kind-a", "k", 0))
	_, err := e.s.Claim(e.ctx, &store.ClaimParams{Queue: "q-kinv", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(lease), Limits: []store.ConcurrencyLimit{{Kind: "kind-a", Max: 1, PerKey: true}, {Kind: "kind-a", Max: 2, PerKey: true}}})
	if !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Claim with two per-key limits of kind-a: %v, want ErrInvalid", err)
	}
	res := e.claimLimited(e.s, "q-kinv", "w", 1, now, 0, store.ConcurrencyLimit{Kind: "kind-a", Max: 1, PerKey: true}, store.ConcurrencyLimit{Kind: "kind-a", Max: 1})
	if got := fmt.Sprint(idsOf(res.Instances)); got != "[i1]" {
		t.Errorf("claim with a limit of kind-a and one per key took %s, want [i1]", got)
	}
}

package scripttest

import (
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// testReadyListBeforeOrder: a store written before issue 38 kept each
// lane's ready list in the order its entries became ready, not sorted by
// RunAt (an instance enqueued with a RunAt already past went to the
// tail), and had no ready sets. After the upgrade such a list is read as
// it is: instances pending, running and finished before it keep running
// and their history reads, entries pushed after it go in their place
// (behind its tail, or in the lane's ready set when they sort before it),
// and every instance is claimed exactly once.
func testReadyListBeforeOrder(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	const q = "uq"
	until := at(time.Hour)
	// Running and finished before the upgrade.
	e.enqueue(base, inst("up-run", q), inst("up-fin", q))
	if got := ids(e.claim(q, "w0", 2, at(time.Second), until).Instances); !slices.Equal(got, []string{"up-run", "up-fin"}) {
		t.Fatalf("claim before the upgrade: %v", got)
	}
	e.done("w0", at(2*time.Second), "up-fin")
	// Pending: a, b, c due at enqueue, then late, enqueued last with a
	// RunAt before all of them; the list of before held them in that order.
	mk := func(id string, d time.Duration) *store.Instance {
		in := inst(id, q)
		in.RunAt, in.CreatedAt = at(d), at(d)
		return in
	}
	e.enqueue(at(3*time.Second), mk("up-a", 3*time.Second))
	e.enqueue(at(4*time.Second), mk("up-b", 4*time.Second))
	e.enqueue(at(5*time.Second), mk("up-c", 5*time.Second))
	late := mk("up-late", 6*time.Second)
	late.RunAt = at(time.Second)
	e.enqueue(at(6*time.Second), late)
	list, set := e.keys.LaneReady(q, 0, "k", nil), e.key("q:"+q+":r:0/x1:k")
	ls, err := e.rc.LRange(ctx, list, 0, -1).Result()
	if err != nil || len(ls) != 3 {
		t.Fatalf("lane list %q: %d entries, %v; want a, b, c", list, len(ls), err)
	}
	zs, err := e.rc.ZRange(ctx, set, 0, -1).Result()
	if err != nil || len(zs) != 1 {
		t.Fatalf("lane set %q: %d entries, %v; want late", set, len(zs), err)
	}
	// The layout of before: late at the list's tail, no set.
	e.rc.Del(ctx, set)
	e.rc.ZRem(ctx, e.keys.Levels(q), "0/x1:k")
	e.rc.HDel(ctx, e.key("q:"+q+":h"), "0/x1:k")
	e.rc.RPush(ctx, list, zs[0])
	// And the count of the kind's instances that ctr kept before issue 39
	// (see testKindCountsBefore): nothing reads it after the upgrade.
	e.rc.HSet(ctx, e.key("ctr"), "k:k", 6)

	// After the upgrade: d behind the tail, e ahead of it (to the set).
	e.enqueue(at(7*time.Second), mk("up-d", 7*time.Second))
	e.enqueue(at(8*time.Second), mk("up-e", 3500*time.Millisecond))
	if n := e.planKind("k"); n != 8 {
		t.Fatalf("the plan counts %d instances of kind k after the upgrade, want 8 (6 before, 2 after)", n)
	}
	var got []string
	for range 10 {
		res := e.claim(q, "w1", 1, at(9*time.Second), until)
		if len(res.Instances) == 0 {
			break
		}
		got = append(got, ids(res.Instances)...)
	}
	// The list is read as it is (late at its tail), merged with the set.
	if want := []string{"up-a", "up-e", "up-b", "up-c", "up-late", "up-d"}; !slices.Equal(got, want) {
		t.Fatalf("claims after the upgrade: %v, want %v (the list of before read in its order, up-e merged from the set by RunAt)", got, want)
	}
	e.done("w0", at(10*time.Second), "up-run")
	e.done("w1", at(10*time.Second), got...)
	for _, id := range append([]string{"up-run", "up-fin"}, got...) {
		if in := e.get(id); in.State != store.Completed {
			t.Fatalf("%s: state %v after the upgrade, want completed", id, in.State)
		}
		hs := e.history(&store.Query{InstanceID: id})
		var states []store.State
		for _, h := range hs {
			states = append(states, h.State)
		}
		if want := []store.State{store.Created, store.Scheduled, store.Processing, store.Completed}; !slices.Equal(states, want) {
			t.Fatalf("%s: history %v, want %v", id, states, want)
		}
	}
}

// testReadySetReads: an instance in a lane's ready set (enqueued with a
// RunAt before the list's tail) is seen by every reader of ready
// instances: lookups by state (with and without a kind, which asks the
// lookup planner) and Lag, whose oldest ready RunAt is the set's head.
func testReadySetReads(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	const q = "sq"
	x, y := inst("rs-x", q), inst("rs-y", q)
	x.RunAt, y.RunAt = at(5*time.Second), at(2*time.Second)
	e.enqueue(at(5*time.Second), x)
	e.enqueue(at(6*time.Second), y)
	if n, err := e.rc.ZCard(ctx, e.key("q:"+q+":r:0/x1:k")).Result(); err != nil || n != 1 {
		t.Fatalf("lane set holds %d (%v), want rs-y", n, err)
	}
	for _, qu := range []*store.Query{
		{Queue: q, States: []store.State{store.Scheduled}},
		{Queue: q, Kind: "k", States: []store.State{store.Scheduled}},
		{Kind: "k", States: []store.State{store.Scheduled}},
	} {
		got := e.instances(qu)
		slices.Sort(got)
		if !slices.Equal(got, []string{"rs-x", "rs-y"}) {
			t.Fatalf("LookupInstances(%+v): %v, want rs-x and rs-y", *qu, got)
		}
	}
	lag, err := e.s.(store.Inspector).Lag(ctx, &store.LagParams{Now: at(10 * time.Second), Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	if len(lag.Queues) != 1 || !lag.Queues[0].OldestReady.Equal(at(2*time.Second)) {
		t.Fatalf("Lag: %+v, want the queue's oldest ready at %v (rs-y, in the set)", lag.Queues, at(2*time.Second))
	}
	if got := ids(e.claim(q, "w", 10, at(10*time.Second), at(time.Hour)).Instances); !slices.Equal(got, []string{"rs-y", "rs-x"}) {
		t.Fatalf("claim: %v, want rs-y (the set) then rs-x (the list)", got)
	}
}

package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// testClaimOrderDueLate: an instance scheduled for later that fell due
// before other instances became ready is claimed ahead of them, even when
// no claim ran between its RunAt and their enqueue (the store learns that
// it is due only at the next claim). Both orders the contract allows agree
// here: by the time instances became ready, and by RunAt then Seq.
//
// Enqueued one call each, in this order (enqueue time, RunAt; the kind in
// the runs with two kinds):
//
//	r0 (0, 0)          due at enqueue        kind 0
//	a1 (0, +1s)        scheduled             kind 1
//	a2 (0, +2s)        scheduled             kind 0
//	e  (+1.2s, +1.2s)  due at enqueue, after a1 fell due   kind 0
//	b  (+1.5s, +1.5s)  due at enqueue        kind 1
//	c  (+2s, +2s)      due at enqueue, same RunAt as a2, higher Seq  kind 0
//	d  (+2.5s, +0.5s)  due at enqueue with a RunAt in the past  kind 1
//
// A claim at +3s takes r0, a1, e, b, a2, c in that order, with d anywhere
// after r0: d became ready last but has the second-earliest RunAt, and the
// contract allows either. Checked with claims of one and with one claim of
// all, on one kind and on two (two lanes, merged: a1 goes ahead of b in
// kind 1, e in kind 0 must not pass it).
func testClaimOrderDueLate(t *testing.T, h Harness) {
	e := setup(t, h)
	type spec struct {
		id       string
		enqueued time.Duration
		runAt    time.Duration
		kind     int
	}
	specs := []spec{
		{"r0", 0, 0, 0},
		{"a1", 0, time.Second, 1},
		{"a2", 0, 2 * time.Second, 0},
		{"e", 1200 * time.Millisecond, 1200 * time.Millisecond, 0},
		{"b", 1500 * time.Millisecond, 1500 * time.Millisecond, 1},
		{"c", 2 * time.Second, 2 * time.Second, 0},
		{"d", 2500 * time.Millisecond, 500 * time.Millisecond, 1},
	}
	order := []string{"r0", "a1", "e", "b", "a2", "c"}
	now := at(3 * time.Second)
	for _, tc := range []struct {
		queue    string
		oneByOne bool
		kinds    int
	}{{"q-due-late-one", true, 1}, {"q-due-late-all", false, 1}, {"q-due-late-lanes", true, 2}, {"q-due-late-lanes-all", false, 2}} {
		for _, s := range specs {
			in := inst(tc.queue+"/"+s.id, tc.queue)
			in.Kind = fmt.Sprintf("kind-%d", s.kind%tc.kinds)
			in.RunAt = at(s.runAt)
			e.enqueue(e.s, at(s.enqueued), in) // one call each so Seq follows specs order
		}
		var got []*store.Instance
		if tc.oneByOne {
			for range specs {
				got = append(got, e.claim(e.s, tc.queue, "w1", 1, now).Instances...)
			}
		} else {
			got = e.claim(e.s, tc.queue, "w1", 100, now).Instances
		}
		g := ids(got)
		if len(g) != len(specs) {
			t.Fatalf("%s: claimed %v, want all %d", tc.queue, g, len(specs))
		}
		di := slices.Index(g, tc.queue+"/d")
		if di < 1 {
			t.Fatalf("%s: claimed %v: d must come after r0 (both were due when enqueued, r0 first and with the earlier RunAt)", tc.queue, g)
		}
		rest := slices.Delete(slices.Clone(g), di, di+1)
		var want []string
		for _, id := range order {
			want = append(want, tc.queue+"/"+id)
		}
		if !slices.Equal(rest, want) {
			t.Fatalf("%s: claimed %v (d aside: %v), want %v: a1 fell due before e and b became ready, a2 before c, and a2 has c's RunAt and the lower Seq", tc.queue, g, rest, want)
		}
	}
}

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
// it is due only at the next claim): claims go by RunAt then Seq.
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
// A claim at +3s takes r0, d, a1, e, b, a2, c in that order. Checked with
// claims of one and with one claim of all, on one kind and on two (two
// lanes, merged: a1 goes ahead of b in kind 1, e in kind 0 must not pass
// it).
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
	order := []string{"r0", "d", "a1", "e", "b", "a2", "c"}
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
		var want []string
		for _, id := range order {
			want = append(want, tc.queue+"/"+id)
		}
		if !slices.Equal(g, want) {
			t.Fatalf("%s: claimed %v, want %v: by RunAt then Seq (a1 fell due before e and b became ready, a2 before c, a2 has c's RunAt and the lower Seq, and d's RunAt is before a1's)", tc.queue, g, want)
		}

	}
}

// testClaimOrderRunAt pins the claim order the contract states: highest
// Priority first, then the earliest RunAt (when the instance became due),
// then Seq (enqueue order), whatever order the instances were enqueued
// in. The instances below are enqueued one call each, most with a RunAt
// already past at their enqueue and in reverse due order (the go-job
// case: {priority 10, due 500 ms ago} is enqueued after {priority 10, due
// 10 ms ago} and must run first), several sharing a RunAt (those go by
// Seq), two scheduled for later that fall due before the claim, and two
// enqueued after those fell due: one due at its enqueue, one with a RunAt
// already past by then. Checked with claims of one and with one claim of
// all, on one kind and on two (two lanes, merged).
func testClaimOrderRunAt(t *testing.T, h Harness) {
	e := setup(t, h)
	type spec struct {
		id       string
		prio     int
		enqueued time.Duration // from t0
		runAt    time.Duration // from t0
	}
	const ms = time.Millisecond
	specs := []spec{
		{"p10-due10ms", 10, 0, -10 * ms},
		{"p0-due100ms", 0, 0, -100 * ms},
		{"p10-due500ms", 10, 0, -500 * ms},
		{"p0-due2s-1", 0, 0, -2 * time.Second},
		{"s-in2s", 0, 0, 2 * time.Second}, // scheduled for later
		{"m5-due1s", -5, 0, -time.Second},
		{"p0-due2s-2", 0, 0, -2 * time.Second},
		{"p10-due500ms-2", 10, 0, -500 * ms},
		{"s-in1s", 0, 0, time.Second}, // scheduled for later, due before s-in2s
		{"p0-due3s", 0, 0, -3 * time.Second},
		{"m5-due2s", -5, 0, -2 * time.Second},
		{"p0-due2s-3", 0, 0, -2 * time.Second},
		{"p0-late-due", 0, 2500 * ms, 2500 * ms},          // due at its enqueue, after both fell due
		{"p0-late-past", 0, 2500 * ms, 1500 * ms},         // past at its enqueue, between them
		{"p10-late-past", 10, 2600 * ms, -600 * ms},       // the earliest of priority 10, enqueued last
		{"m5-late-same", -5, 2600 * ms, -2 * time.Second}, // the RunAt of m5-due2s, enqueued after it
	}
	order := []string{
		"p10-late-past", "p10-due500ms", "p10-due500ms-2", "p10-due10ms",
		"p0-due3s", "p0-due2s-1", "p0-due2s-2", "p0-due2s-3", "p0-due100ms",
		"s-in1s", "p0-late-past", "s-in2s", "p0-late-due",
		"m5-due2s", "m5-late-same", "m5-due1s",
	}
	t0 := at(time.Minute)
	now := t0.Add(3 * time.Second)
	for _, tc := range []struct {
		queue    string
		oneByOne bool
		kinds    int
	}{{"q-runat-one", true, 1}, {"q-runat-all", false, 1}, {"q-runat-lanes", true, 2}, {"q-runat-lanes-all", false, 2}} {
		for i, s := range specs {
			in := inst(tc.queue+"/"+s.id, tc.queue)
			in.Kind = fmt.Sprintf("kind-%d", i%tc.kinds)
			in.Priority = s.prio
			in.RunAt = t0.Add(s.runAt)
			in.CreatedAt = t0.Add(s.enqueued)
			e.enqueue(e.s, t0.Add(s.enqueued), in) // one call each so Seq follows specs order
		}
		var got []*store.Instance
		if tc.oneByOne {
			for range specs {
				got = append(got, e.claim(e.s, tc.queue, "w1", 1, now).Instances...)
			}
		} else {
			got = e.claim(e.s, tc.queue, "w1", 100, now).Instances
		}
		var want []string
		for _, id := range order {
			want = append(want, tc.queue+"/"+id)
		}
		if g := ids(got); !slices.Equal(g, want) {
			t.Fatalf("%s: claimed %v, want %v: by priority, then RunAt (the time each became due), then enqueue order", tc.queue, g, want)
		}
	}
}

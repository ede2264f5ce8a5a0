package scripttest

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// planKind runs the lookup planner (lua/plan.lua) for kind ("" for every
// kind) and the Scheduled state, and returns its estimate of the kind's
// instances (by_kind: the kind's count, the whole of it without a time
// range).
func (e *layEnv) planKind(kind string) int64 {
	e.t.Helper()
	v, err := e.rc.Eval(e.t.Context(), redisscript.Plan.Source, e.keys.For(redisscript.Plan),
		e.keys.Prefix, kind, "", "0", "0", strconv.Itoa(int(store.Scheduled))).Slice()
	if err != nil || len(v) != 3 {
		e.t.Fatalf("plan of kind %q: %v, %v", kind, v, err)
	}
	return v[1].(int64)
}

// kindFields returns ctr's k:<kind> fields, the per-kind counts a
// namespace written before issue 39 holds.
func (e *layEnv) kindFields() []string {
	e.t.Helper()
	f, err := e.rc.HKeys(e.t.Context(), e.key("ctr")).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	f = slices.DeleteFunc(f, func(s string) bool { return !strings.HasPrefix(s, "k:") })
	slices.Sort(f)
	return f
}

// testKindCounts: the lookup planner weighs a kind by its instances, the
// sum of its cnt fields, through enqueues (lone and shared; duplicates
// and repeats not counted) and retention; no enqueue writes a count per
// kind (issue 39: one command less on every enqueue).
func testKindCounts(t *testing.T, h Harness) {
	e := layout(t, h)
	check := func(when string, want map[string]int64) {
		t.Helper()
		for kind, n := range want {
			if got := e.planKind(kind); got != n {
				t.Fatalf("%s: the plan counts %d instances of kind %q, want %d", when, got, kind, n)
			}
		}
		if f := e.kindFields(); len(f) != 0 {
			t.Fatalf("%s: ctr holds per-kind counts %v, want none", when, f)
		}
	}
	mk := func(id, kind string) *store.Instance {
		in := inst(id, "q")
		in.Kind = kind
		return in
	}
	e.enqueue(base, mk("a-1", "a"), mk("a-2", "a"), mk("b-1", "b"))
	e.enqueue(base, mk("c-1", "c")) // alone: the lean script
	// The same ID again stores nothing, alone or with others.
	e.enqueue(base, mk("a-1", "a"))
	e.enqueue(base, mk("c-1", "c"), mk("a-2", "a"))
	check("after enqueue", map[string]int64{"a": 2, "b": 1, "c": 1, "": 4})
	e.claim("q", "w", 4, at(time.Second), at(time.Minute))
	e.done("w", at(2*time.Second), "a-1", "b-1")
	check("after finishing a-1 and b-1", map[string]int64{"a": 2, "b": 1, "c": 1, "": 4})
	e.prune(&store.PruneParams{Now: at(time.Hour), FinishedBefore: at(time.Hour)})
	check("after pruning a-1 and b-1", map[string]int64{"a": 1, "b": 0, "c": 1, "": 2})
}

// testKindCountsBefore: a namespace written before issue 39 counted each
// kind's instances in ctr's k:<kind>. After the upgrade nothing reads or
// updates those counts: the planner weighs kinds by cnt, instances
// pending, running and finished before keep running and reading their
// history, and retention (or delete) drops a kind's old count the first
// time it removes one of its instances.
func testKindCountsBefore(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	mk := func(id, kind string) *store.Instance {
		in := inst(id, "kq")
		in.Kind = kind
		return in
	}
	// Before: a-1 finished, b-1 running, a-2 pending (a shared call and a
	// lone one), and the counts the code before kept beside them.
	e.enqueue(base, mk("kb-a1", "a"), mk("kb-b1", "b"))
	e.enqueue(at(time.Second), mk("kb-a2", "a"))
	if got := ids(e.claim("kq", "w0", 2, at(2*time.Second), at(time.Hour)).Instances); !slices.Equal(got, []string{"kb-a1", "kb-b1"}) {
		t.Fatalf("claim before the upgrade: %v", got)
	}
	e.done("w0", at(3*time.Second), "kb-a1")
	if f := e.kindFields(); len(f) != 0 {
		t.Fatalf("ctr holds per-kind counts %v after enqueues: want none", f)
	}
	if err := e.rc.HSet(ctx, e.key("ctr"), "k:a", 2, "k:b", 1).Err(); err != nil {
		t.Fatal(err)
	}

	// After the upgrade: one more of a; the old count stays 2, the plan
	// counts 3.
	e.enqueue(at(4*time.Second), mk("kb-a3", "a"))
	if n, err := e.rc.HGet(ctx, e.key("ctr"), "k:a").Int64(); err != nil || n != 2 {
		t.Fatalf("ctr k:a = %d (%v) after an enqueue: want the old count, 2, untouched", n, err)
	}
	for kind, want := range map[string]int64{"a": 3, "b": 1, "": 4} {
		if got := e.planKind(kind); got != want {
			t.Fatalf("the plan counts %d instances of kind %q, want %d (from cnt, not the old count)", got, kind, want)
		}
	}
	for _, tc := range []struct {
		q    store.Query
		want []string
	}{
		{store.Query{Kind: "a"}, []string{"kb-a1", "kb-a2", "kb-a3"}},
		{store.Query{Kind: "a", States: []store.State{store.Scheduled}}, []string{"kb-a2", "kb-a3"}},
		{store.Query{Kind: "b", States: []store.State{store.Processing}}, []string{"kb-b1"}},
		{store.Query{Kind: "a", States: []store.State{store.Completed}}, []string{"kb-a1"}},
	} {
		if got := sorted(e.instances(&tc.q)); !slices.Equal(got, tc.want) {
			t.Fatalf("LookupInstances(%+v): %v, want %v", tc.q, got, tc.want)
		}
	}
	got := ids(e.claim("kq", "w1", 10, at(5*time.Second), at(time.Hour)).Instances)
	if !slices.Equal(got, []string{"kb-a2", "kb-a3"}) {
		t.Fatalf("claim after the upgrade: %v, want kb-a2 and kb-a3", got)
	}
	e.done("w0", at(6*time.Second), "kb-b1")
	e.done("w1", at(6*time.Second), got...)
	for _, id := range []string{"kb-a1", "kb-b1", "kb-a2", "kb-a3"} {
		var states []store.State
		for _, h := range e.history(&store.Query{InstanceID: id}) {
			states = append(states, h.State)
		}
		if want := []store.State{store.Created, store.Scheduled, store.Processing, store.Completed}; !slices.Equal(states, want) {
			t.Fatalf("%s: history %v, want %v", id, states, want)
		}
	}
	// Retention removes them all, and the old counts with them.
	if res := e.prune(&store.PruneParams{Now: at(time.Hour), FinishedBefore: at(time.Hour)}); res.Instances != 4 {
		t.Fatalf("Prune removed %d instances, want 4", res.Instances)
	}
	if f := e.kindFields(); len(f) != 0 {
		t.Fatalf("ctr holds per-kind counts %v after retention removed every instance: want none", f)
	}
	rows, err := e.s.Counts(ctx, &store.CountsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Total() != 0 {
			t.Fatalf("Counts after retention removed every instance: %s/%s has %v", r.Queue, r.Kind, r.States)
		}
	}
}

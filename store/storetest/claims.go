package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// Claims that take only what the claimer can run (kinds and labels), and
// queue pause and resume (store.QueueAdmin).

// claimWith claims as owner with the given kinds and labels.
func (e *env) claimWith(s store.Store, queue, owner string, limit int, now time.Time, kinds, labels []string) *store.ClaimResult {
	e.t.Helper()
	res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: queue, Owner: owner, Limit: limit, Now: now, LeaseUntil: now.Add(lease), Kinds: kinds, Labels: labels})
	if err != nil {
		e.t.Fatalf("Claim(queue %s, kinds %q, labels %q): %v", queue, kinds, labels, err)
	}
	if len(res.Instances) > limit {
		e.t.Fatalf("Claim(queue %s, limit %d) returned %d instances", queue, limit, len(res.Instances))
	}
	return res
}

// testClaimKinds: a claim naming kinds takes only those kinds, in the
// contract's order among them (across kinds), and leaves the others for
// a claimer that runs them.
func testClaimKinds(t *testing.T, h Harness) {
	e := setup(t, h)
	type spec struct {
		id    string
		kind  string
		prio  int
		runAt time.Duration
	}
	// The claim order of testClaimOrder, spread over three kinds.
	specs := []spec{
		{"low-early", "a", -5, 0},
		{"mid-late", "b", 1, 3 * time.Second},
		{"high-late", "c", 10, 5 * time.Second},
		{"mid-fifo-1", "a", 1, time.Second},
		{"high-early", "b", 10, time.Second},
		{"mid-fifo-2", "c", 1, time.Second},
		{"zero", "b", 0, 0},
		{"mid-early", "c", 1, 0},
		{"mid-fifo-3", "b", 1, time.Second},
	}
	order := []string{"high-early", "high-late", "mid-early", "mid-fifo-1", "mid-fifo-2", "mid-fifo-3", "mid-late", "zero", "low-early"}
	kindOf := map[string]string{}
	const q = "q-kinds"
	for _, s := range specs {
		in := inst(s.id, q)
		in.Kind, in.Priority, in.RunAt = s.kind, s.prio, at(s.runAt)
		kindOf[s.id] = s.kind
		e.enqueue(e.s, base, in) // one call each so Seq follows specs order
	}
	want := func(kinds ...string) []string {
		var out []string
		for _, id := range order {
			if slices.Contains(kinds, kindOf[id]) {
				out = append(out, id)
			}
		}
		return out
	}
	now := at(time.Minute)
	other := e.open()
	// Another kind only: nothing, and nothing to wait for.
	res := e.claimWith(other, q, "w-x", 10, now, []string{"x"}, nil)
	checkIDs(t, "claim of kind x", res.Instances)
	if !res.NextRunAt.IsZero() {
		t.Fatalf("claim of kind x: NextRunAt %v, want zero (nothing of kind x waits)", res.NextRunAt)
	}
	// b and c, one at a time: the contract's order among them.
	var got []*store.Instance
	for range want("b", "c") {
		got = append(got, e.claimWith(other, q, "w-bc", 1, now, []string{"x", "c", "b"}, nil).Instances...)
	}
	checkIDs(t, "claims of kinds b and c one at a time", got, want("b", "c")...)
	for _, in := range got {
		if in.Kind != "b" && in.Kind != "c" {
			t.Fatalf("claim of kinds b and c returned %s of kind %s", in.ID, in.Kind)
		}
	}
	res = e.claimWith(other, q, "w-bc", 10, now, []string{"b", "c"}, nil)
	checkIDs(t, "claim of kinds b and c once drained", res.Instances)
	// No kinds named: any kind, so the rest (a).
	res = e.claim(e.s, q, "w-any", 10, now)
	checkIDs(t, "claim of any kind", res.Instances, want("a")...)
}

// testClaimLabels: an instance that requires labels is taken only by a
// claimer that has every one; one that requires none by any claimer; and
// an instance whose labels no claimer has waits, Scheduled, without
// making claimers spin (NextRunAt stays zero).
func testClaimLabels(t *testing.T, h Harness) {
	e := setup(t, h)
	const q = "q-labels"
	mk := func(id string, labels ...string) *store.Instance {
		in := inst(id, q)
		in.Labels = labels
		return in
	}
	e.enqueue(e.s, base,
		mk("plain"),
		mk("eu", "region=eu"),
		mk("eu-gpu", "region=eu", "gpu", "gpu"), // unsorted, duplicated: stored normalised
		mk("us", "region=us"),
		mk("tpu", "tpu"),
	)
	if got := e.get(e.s, "eu-gpu").Labels; !slices.Equal(got, []string{"gpu", "region=eu"}) {
		t.Fatalf("stored labels of eu-gpu: %q, want [gpu region=eu] (sorted, without duplicates)", got)
	}
	if got := e.get(e.open(), "plain").Labels; len(got) != 0 {
		t.Fatalf("stored labels of plain: %q, want none", got)
	}
	now := at(time.Second)
	res := e.claimWith(e.s, q, "w-eu", 10, now, nil, []string{"region=eu", "zone=a"})
	checkIDs(t, "claim with region=eu", res.Instances, "plain", "eu")
	if got := res.Instances[1].Labels; !slices.Equal(got, []string{"region=eu"}) {
		t.Fatalf("claimed instance eu has labels %q, want [region=eu]", got)
	}
	res = e.claimWith(e.open(), q, "w-eu-gpu", 10, now, []string{"kind-a"}, []string{"gpu", "region=eu"})
	checkIDs(t, "claim with gpu and region=eu", res.Instances, "eu-gpu")
	res = e.claimWith(e.s, q, "w-us", 10, now, nil, []string{"region=us"})
	checkIDs(t, "claim with region=us", res.Instances, "us")
	// Nobody has tpu: it waits, and no claimer is told to come back soon.
	for range 3 {
		res = e.claimWith(e.s, q, "w-none", 10, at(time.Minute), nil, []string{"gpu", "region=eu", "region=us"})
		checkIDs(t, "claim without tpu", res.Instances)
		if !res.NextRunAt.IsZero() {
			t.Fatalf("claim without tpu: NextRunAt %v, want zero (what waits is not this claimer's)", res.NextRunAt)
		}
	}
	if st := e.get(e.s, "tpu").State; st != store.Scheduled {
		t.Fatalf("instance requiring tpu is %v after claims without tpu, want scheduled (it waits, it is not failed)", st)
	}
	res = e.claimWith(e.open(), q, "w-tpu", 10, at(time.Minute), nil, []string{"tpu"})
	checkIDs(t, "claim with tpu", res.Instances, "tpu")
}

// testClaimLanesNextRunAt: NextRunAt speaks of what the claimer may take;
// a claim stops at its limit across kinds.
func testClaimLanesNextRunAt(t *testing.T, h Harness) {
	e := setup(t, h)
	const q = "q-lanes-next"
	var ins []*store.Instance
	for i := range 6 {
		in := inst(fmt.Sprintf("n-%d", i), q)
		in.Kind = []string{"a", "b", "c"}[i%3]
		in.RunAt = at(time.Duration(i) * time.Second)
		ins = append(ins, in)
	}
	e.enqueue(e.s, base, ins...)
	// At 2.5s: n-0 (a), n-1 (b), n-2 (c) are due.
	now := at(2500 * time.Millisecond)
	res := e.claimWith(e.s, q, "w", 1, now, []string{"a", "c"}, nil)
	checkIDs(t, "first claim of a and c", res.Instances, "n-0")
	res = e.claimWith(e.s, q, "w", 5, now, []string{"a", "c"}, nil)
	checkIDs(t, "second claim of a and c", res.Instances, "n-2")
	if want := at(3 * time.Second); !res.NextRunAt.Equal(want) && !res.NextRunAt.Equal(at(5*time.Second)) {
		t.Fatalf("NextRunAt for a and c: %v, want %v (n-3) or later, never zero", res.NextRunAt, want)
	}
	res = e.claimWith(e.s, q, "w", 5, at(time.Minute), []string{"b"}, nil)
	checkIDs(t, "claim of b", res.Instances, "n-1", "n-4")
}

// testQueuePause: a paused queue is not claimed through any handle, within
// one claim; scheduling into it works; resume wakes claimers and its work
// is claimed again; a queue never used is created paused.
func testQueuePause(t *testing.T, h Harness) {
	e := setup(t, h)
	admin, ok := e.s.(store.QueueAdmin)
	if !ok {
		t.Fatal("store does not implement store.QueueAdmin")
	}
	const q = "q-pause"
	e.enqueue(e.s, base, inst("p-1", q), inst("p-2", q))
	other := e.open()
	var sub <-chan struct{}
	if n, ok := other.(store.Notifier); ok {
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		ch, err := n.Subscribe(ctx, q)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		sub = ch
	}
	if err := admin.PauseQueue(e.ctx, &store.QueueParams{Queue: q, Now: base}); err != nil {
		t.Fatalf("PauseQueue: %v", err)
	}
	if err := admin.PauseQueue(e.ctx, &store.QueueParams{Queue: q, Now: base}); err != nil {
		t.Fatalf("PauseQueue of a paused queue: %v", err)
	}
	now := at(time.Second)
	res := e.claim(other, q, "w-other", 10, now)
	checkIDs(t, "claim from a paused queue through another handle", res.Instances)
	if !res.NextRunAt.IsZero() {
		t.Fatalf("claim from a paused queue: NextRunAt %v, want zero", res.NextRunAt)
	}
	e.enqueue(other, now, inst("p-3", q)) // scheduling still works
	if st := e.get(e.s, "p-3").State; st != store.Scheduled {
		t.Fatalf("instance enqueued into a paused queue is %v, want scheduled", st)
	}
	// Another queue is not affected.
	e.enqueue(e.s, now, inst("other-1", "q-not-paused"))
	checkIDs(t, "claim from another queue", e.claim(other, "q-not-paused", "w-other", 10, now).Instances, "other-1")

	qs := listQueues(t, e, other)
	if qs[q] != "paused" || qs["q-not-paused"] != "running" {
		t.Fatalf("ListQueues: %v, want %s paused and q-not-paused running", qs, q)
	}
	if sub != nil {
		drain(sub)
	}
	if err := admin.ResumeQueue(e.ctx, &store.QueueParams{Queue: q, Now: now}); err != nil {
		t.Fatalf("ResumeQueue: %v", err)
	}
	if sub != nil {
		waitSignal(t, sub, "resume")
	}
	res = e.claim(other, q, "w-other", 10, now)
	checkIDs(t, "claim after resume", res.Instances, "p-1", "p-2", "p-3")
	if qs := listQueues(t, e, e.s); qs[q] != "running" {
		t.Fatalf("ListQueues after resume: %v, want %s running", qs, q)
	}
	if err := admin.ResumeQueue(e.ctx, &store.QueueParams{Queue: "q-never-used", Now: now}); err != nil {
		t.Fatalf("ResumeQueue of a queue never used: %v", err)
	}

	// A queue never used is created paused.
	const fresh = "q-fresh"
	if err := admin.PauseQueue(e.ctx, &store.QueueParams{Queue: fresh, Now: now}); err != nil {
		t.Fatalf("PauseQueue of a queue never used: %v", err)
	}
	if qs := listQueues(t, e, other); qs[fresh] != "paused" {
		t.Fatalf("ListQueues after pausing a queue never used: %v, want %s paused", qs, fresh)
	}
	e.enqueue(other, now, inst("f-1", fresh))
	checkIDs(t, "claim from a queue created paused", e.claim(other, fresh, "w-other", 10, now).Instances)
	if err := admin.ResumeQueue(e.ctx, &store.QueueParams{Queue: fresh, Now: now}); err != nil {
		t.Fatalf("ResumeQueue: %v", err)
	}
	checkIDs(t, "claim after resuming a queue created paused", e.claim(other, fresh, "w-other", 10, now).Instances, "f-1")

	for _, p := range []*store.QueueParams{nil, {}} {
		if err := admin.PauseQueue(e.ctx, p); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("PauseQueue(%+v): %v, want ErrInvalid", p, err)
		}
		if err := admin.ResumeQueue(e.ctx, p); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("ResumeQueue(%+v): %v, want ErrInvalid", p, err)
		}
	}
}

// listQueues returns ListQueues as name -> "paused" or "running", and
// checks that no queue is listed twice.
func listQueues(t *testing.T, e *env, s store.Store) map[string]string {
	t.Helper()
	qs, err := s.(store.QueueAdmin).ListQueues(e.ctx)
	if err != nil {
		t.Fatalf("ListQueues: %v", err)
	}
	out := map[string]string{}
	for _, q := range qs {
		if _, dup := out[q.Name]; dup {
			t.Fatalf("ListQueues lists %s twice: %v", q.Name, qs)
		}
		out[q.Name] = map[bool]string{true: "paused", false: "running"}[q.Paused]
	}
	return out
}

// testClaimsInvalid: an empty kind in a claim, a bad label on a claim or
// an instance are refused with ErrInvalid.
func testClaimsInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	now := at(time.Second)
	for _, p := range []*store.ClaimParams{
		{Queue: "q", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(lease), Kinds: []string{"a", ""}},
		{Queue: "q", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(lease), Labels: []string{""}},
		{Queue: "q", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(lease), Labels: []string{"a\x00b"}},
	} {
		if _, err := e.s.Claim(e.ctx, p); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Claim(kinds %q, labels %q): %v, want ErrInvalid", p.Kinds, p.Labels, err)
		}
	}
	in := inst("bad-label", "q")
	in.Labels = []string{"gpu", "x\ny"}
	if _, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Enqueue of an instance with label %q: %v, want ErrInvalid", in.Labels[1], err)
	}
	if got := e.instances(e.s, &store.Query{InstanceID: "bad-label"}); len(got) != 0 {
		t.Fatalf("an instance refused for a bad label was stored: %v", ids(got))
	}
}

package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

func testEnqueueRoundTrip(t *testing.T, h Harness) {
	e := setup(t, h)
	full := &store.Instance{
		ID:          "rt-full",
		Kind:        "kind-rt",
		Queue:       "q-rt",
		Args:        []byte(`[{"a":1},"b",[3]]`),
		Priority:    -7,
		RunAt:       at(90 * time.Second),
		MaxRetries:  -1,
		Timeout:     1500 * time.Millisecond,
		UniqueKey:   "rt-key",
		UniqueUntil: at(time.Hour),
		CreatedAt:   at(time.Second),
	}
	bare := &store.Instance{ID: "rt-bare", Kind: "kind-rt", Queue: "q-rt", RunAt: at(time.Second), CreatedAt: at(time.Second)}
	now := at(2 * time.Second)
	wantFull, wantBare := full.Clone(), bare.Clone()
	res := e.enqueue(e.s, now, full, bare)
	if res[0].Seq == 0 || res[1].Seq <= res[0].Seq {
		t.Fatalf("Enqueue assigned Seq %d then %d; want non-zero and increasing in enqueue order", res[0].Seq, res[1].Seq)
	}
	for i, w := range []*store.Instance{wantFull, wantBare} {
		w.State = store.Scheduled
		w.Seq = res[i].Seq
		w.UpdatedAt = now
		checkRecord(t, "stored instance "+w.ID, w, e.get(e.s, w.ID))
		// Another handle sees the same record.
		checkRecord(t, "instance "+w.ID+" through a second handle", w, e.get(e.open(), w.ID))
	}
}

func testEnqueueBatch(t *testing.T, h Harness) {
	e := setup(t, h)
	const n = 100
	ins := make([]*store.Instance, n)
	for i := range ins {
		ins[i] = inst(fmt.Sprintf("batch-%03d", i), "q-batch")
		ins[i].Args = fmt.Appendf(nil, "[%d]", i)
		ins[i].CreatedAt = at(time.Duration(i) * time.Millisecond)
	}
	res := e.enqueue(e.s, at(time.Second), ins...)
	for i := 1; i < n; i++ {
		if res[i].Seq <= res[i-1].Seq {
			t.Fatalf("batch Seq not increasing in enqueue order: result %d has %d, result %d has %d", i-1, res[i-1].Seq, i, res[i].Seq)
		}
	}
	got := e.instances(e.s, &store.Query{Queue: "q-batch"})
	if len(got) != n {
		t.Fatalf("LookupInstances after a batch of %d returned %d", n, len(got))
	}
	for _, g := range got {
		var i int
		if _, err := fmt.Sscanf(g.ID, "batch-%03d", &i); err != nil {
			t.Fatalf("unexpected instance %q", g.ID)
		}
		if string(g.Args) != fmt.Sprintf("[%d]", i) || g.State != store.Scheduled || g.Seq != res[i].Seq {
			t.Fatalf("instance %s: args %s state %v seq %d; want [%d] scheduled seq %d", g.ID, g.Args, g.State, g.Seq, i, res[i].Seq)
		}
	}
	// Two history records (Created, Scheduled) for each.
	if hist := e.history(e.s, &store.Query{Kind: "kind-a"}); len(hist) != 2*n {
		t.Fatalf("history after a batch of %d has %d records, want %d", n, len(hist), 2*n)
	}
}

func testRecordsAreCopies(t *testing.T, h Harness) {
	e := setup(t, h)
	in := inst("copy-1", "q-copy")
	e.enqueue(e.s, base, in)
	in.Args[0] = 'X'
	in.Kind = "changed"
	got := e.get(e.s, "copy-1")
	if string(got.Args) != `[1,"two"]` || got.Kind != "kind-a" {
		t.Fatalf("changing the enqueued value changed the stored record: args %s kind %s", got.Args, got.Kind)
	}
	got.Args[0] = 'Y'
	got.State = store.Completed
	if again := e.get(e.s, "copy-1"); string(again.Args) != `[1,"two"]` || again.State != store.Scheduled {
		t.Fatalf("changing a looked-up record changed the stored record: args %s state %v", again.Args, again.State)
	}
	c := e.claimOne(e.s, "q-copy", "w1", base, "copy-1")
	c.Args[0] = 'Z'
	c.LeaseOwner = "thief"
	if again := e.get(e.s, "copy-1"); string(again.Args) != `[1,"two"]` || again.LeaseOwner != "w1" {
		t.Fatalf("changing a claimed record changed the stored record: args %s owner %s", again.Args, again.LeaseOwner)
	}
}

func testClaimOrder(t *testing.T, h Harness) {
	e := setup(t, h)
	// Enqueue in an order that differs from the claim order.
	type spec struct {
		id    string
		prio  int
		runAt time.Duration
	}
	specs := []spec{
		{"o-low-early", -5, 0},
		{"o-mid-late", 1, 3 * time.Second},
		{"o-high-late", 10, 5 * time.Second},
		{"o-mid-fifo-1", 1, time.Second},
		{"o-high-early", 10, time.Second},
		{"o-mid-fifo-2", 1, time.Second},
		{"o-zero", 0, 0},
		{"o-mid-early", 1, 0},
		{"o-mid-fifo-3", 1, time.Second},
	}
	order := []string{"o-high-early", "o-high-late", "o-mid-early", "o-mid-fifo-1", "o-mid-fifo-2", "o-mid-fifo-3", "o-mid-late", "o-zero", "o-low-early"}
	want := map[string][]string{}
	for _, q := range []string{"q-one-by-one", "q-all-at-once"} {
		for _, id := range order {
			want[q] = append(want[q], q+"/"+id)
		}
		for _, s := range specs {
			in := inst(q+"/"+s.id, q)
			in.Priority = s.prio
			in.RunAt = at(s.runAt)
			e.enqueue(e.s, base, in) // one call each so Seq follows specs order
		}
	}
	now := at(time.Minute)
	var got []*store.Instance
	for range order {
		res := e.claim(e.s, "q-one-by-one", "w1", 1, now)
		got = append(got, res.Instances...)
	}
	checkIDs(t, "claims one at a time", got, want["q-one-by-one"]...)
	res := e.claim(e.s, "q-all-at-once", "w1", 100, now)
	checkIDs(t, "one claim of all", res.Instances, want["q-all-at-once"]...)
	if !res.NextRunAt.IsZero() {
		t.Fatalf("NextRunAt after claiming everything: %v, want zero", res.NextRunAt)
	}
}

func testClaimFutureDoesNotBlock(t *testing.T, h Harness) {
	e := setup(t, h)
	now := at(time.Minute)
	mk := func(id string, prio int, runAt time.Time) *store.Instance {
		in := inst(id, "q-fut")
		in.Priority, in.RunAt = prio, runAt
		return in
	}
	e.enqueue(e.s, base,
		mk("f-high-future", 10, at(time.Hour)),
		mk("f-mid-future", 5, at(2*time.Hour)),
		mk("f-mid-ready", 5, at(time.Second)),
		mk("f-high-future-2", 10, at(30*time.Minute)),
		mk("f-low-ready", 1, base),
	)
	res := e.claim(e.s, "q-fut", "w1", 1, now)
	checkIDs(t, "first claim", res.Instances, "f-mid-ready")
	res = e.claim(e.s, "q-fut", "w1", 5, now)
	checkIDs(t, "second claim", res.Instances, "f-low-ready")
	if !res.NextRunAt.Equal(at(30 * time.Minute)) {
		t.Fatalf("NextRunAt %v, want the earliest waiting RunAt %v", res.NextRunAt, at(30*time.Minute))
	}
	res = e.claim(e.s, "q-fut", "w1", 5, at(time.Hour))
	checkIDs(t, "claim at +1h", res.Instances, "f-high-future-2", "f-high-future")
	if !res.NextRunAt.Equal(at(2 * time.Hour)) {
		t.Fatalf("NextRunAt %v, want %v", res.NextRunAt, at(2*time.Hour))
	}
}

func testClaimLimit(t *testing.T, h Harness) {
	e := setup(t, h)
	var ins []*store.Instance
	for i := range 10 {
		ins = append(ins, inst(fmt.Sprintf("lim-%02d", i), "q-lim"))
	}
	e.enqueue(e.s, base, ins...)
	for range 3 {
		if res := e.claim(e.s, "q-lim", "w1", 3, at(time.Second)); len(res.Instances) != 3 {
			t.Fatalf("claim with limit 3 of 10 returned %d, want 3", len(res.Instances))
		}
	}
	processing := e.instances(e.s, &store.Query{Queue: "q-lim", States: []store.State{store.Processing}})
	if len(processing) != 9 {
		t.Fatalf("after three claims of 3 from 10, %d are processing, want 9", len(processing))
	}
	// Exact counts: a fresh queue of 10 claimed with limit 4 yields 4, 4, 2, 0.
	ins = ins[:0]
	for i := range 10 {
		ins = append(ins, inst(fmt.Sprintf("lim2-%02d", i), "q-lim2"))
	}
	e.enqueue(e.s, base, ins...)
	for _, want := range []int{4, 4, 2, 0} {
		res := e.claim(e.s, "q-lim2", "w1", 4, at(time.Second))
		if len(res.Instances) != want {
			t.Fatalf("claim with limit 4 returned %d, want %d", len(res.Instances), want)
		}
	}
}

func testClaimNextRunAt(t *testing.T, h Harness) {
	e := setup(t, h)
	now := at(time.Minute)
	res := e.claim(e.s, "q-next", "w1", 10, now)
	if len(res.Instances) != 0 || !res.NextRunAt.IsZero() {
		t.Fatalf("claim on an empty queue: %d instances, NextRunAt %v; want none and zero", len(res.Instances), res.NextRunAt)
	}
	a, b, c := inst("n-a", "q-next"), inst("n-b", "q-next"), inst("n-c", "q-next")
	a.RunAt, a.Priority = at(time.Hour), 9
	b.RunAt, b.Priority = at(10*time.Minute), -1
	c.RunAt = at(30 * time.Second)
	e.enqueue(e.s, base, a, b, c)
	res = e.claim(e.s, "q-next", "w1", 10, now)
	checkIDs(t, "claim with one ready", res.Instances, "n-c")
	if !res.NextRunAt.Equal(at(10 * time.Minute)) {
		t.Fatalf("NextRunAt %v, want the earliest waiting RunAt %v (not the highest priority's)", res.NextRunAt, at(10*time.Minute))
	}
	res = e.claim(e.s, "q-next", "w1", 10, now)
	if len(res.Instances) != 0 || !res.NextRunAt.Equal(at(10*time.Minute)) {
		t.Fatalf("claim with nothing ready: %d instances, NextRunAt %v; want none and %v", len(res.Instances), res.NextRunAt, at(10*time.Minute))
	}
	// Processing and finished instances are not waiting.
	res = e.claim(e.s, "q-next", "w1", 10, at(2*time.Hour))
	checkIDs(t, "claim at +2h", res.Instances, "n-a", "n-b")
	if !res.NextRunAt.IsZero() {
		t.Fatalf("NextRunAt with only processing instances left: %v, want zero", res.NextRunAt)
	}
	// An instance in another queue does not count.
	other := inst("n-other", "q-next-other")
	other.RunAt = at(3 * time.Hour)
	e.enqueue(e.s, base, other)
	if res = e.claim(e.s, "q-next", "w1", 10, at(2*time.Hour)); !res.NextRunAt.IsZero() {
		t.Fatalf("NextRunAt %v counts another queue's instance, want zero", res.NextRunAt)
	}
}

func testClaimQueuesIsolated(t *testing.T, h Harness) {
	e := setup(t, h)
	a, b := inst("qi-a", "q-iso-a"), inst("qi-b", "q-iso-b")
	b.Priority = 100
	e.enqueue(e.s, base, a, b)
	res := e.claim(e.s, "q-iso-a", "w1", 10, at(time.Second))
	checkIDs(t, "claim of queue a", res.Instances, "qi-a")
	res = e.claim(e.s, "q-iso-c", "w1", 10, at(time.Second))
	checkIDs(t, "claim of an unused queue", res.Instances)
	res = e.claim(e.s, "q-iso-b", "w1", 10, at(time.Second))
	checkIDs(t, "claim of queue b", res.Instances, "qi-b")
}

func testClaimAttemptIncrements(t *testing.T, h Harness) {
	e := setup(t, h)
	in := inst("att-1", "q-att")
	e.enqueue(e.s, base, in)
	if got := e.get(e.s, "att-1"); got.Attempt != 0 {
		t.Fatalf("Attempt before the first claim: %d, want 0", got.Attempt)
	}
	now := at(time.Second)
	c := e.claimOne(e.s, "q-att", "w1", now, "att-1")
	checkLease(t, c, "w1", 1, now.Add(lease))
	if !c.UpdatedAt.Equal(now) {
		t.Fatalf("claimed UpdatedAt %v, want %v", c.UpdatedAt, now)
	}
	checkRecord(t, "stored instance after claim", c, e.get(e.s, "att-1"))
	e.finishOK(e.s, "w1", at(2*time.Second), store.Outcome{ID: "att-1", Attempt: 1, State: store.Scheduled, RunAt: at(10 * time.Second), Error: "boom"})
	if res := e.claim(e.s, "q-att", "w2", 1, at(9*time.Second)); len(res.Instances) != 0 || !res.NextRunAt.Equal(at(10*time.Second)) {
		t.Fatalf("claim before the retry's RunAt: %v, NextRunAt %v; want none, %v", ids(res.Instances), res.NextRunAt, at(10*time.Second))
	}
	c = e.claimOne(e.s, "q-att", "w2", at(10*time.Second), "att-1")
	checkLease(t, c, "w2", 2, at(10*time.Second).Add(lease))
	if c.Error != "boom" {
		t.Fatalf("claimed retry has Error %q, want the last attempt's %q", c.Error, "boom")
	}
	e.finishOK(e.s, "w2", at(11*time.Second), store.Outcome{ID: "att-1", Attempt: 2, State: store.Completed, Result: []byte(`[3]`)})
	got := e.get(e.s, "att-1")
	if got.State != store.Completed || got.Attempt != 2 || got.Error != "" || string(got.Result) != `[3]` {
		t.Fatalf("after completing attempt 2: state %v attempt %d error %q result %s; want completed, 2, no error, [3]", got.State, got.Attempt, got.Error, got.Result)
	}
}

func testRenew(t *testing.T, h Harness) {
	e := setup(t, h)
	var ins []*store.Instance
	for _, id := range []string{"r-a", "r-b", "r-c", "r-d"} {
		ins = append(ins, inst(id, "q-renew"))
	}
	e.enqueue(e.s, base, ins...)
	res := e.claim(e.s, "q-renew", "w1", 4, base) // leases until base+30s
	checkIDs(t, "claim", res.Instances, "r-a", "r-b", "r-c", "r-d")
	other := e.open()
	renew := func(s store.Store, owner string, now, until time.Time, refs ...store.LeaseRef) *store.RenewResult {
		t.Helper()
		r, err := s.Renew(e.ctx, &store.RenewParams{Owner: owner, Leases: refs, Until: until, Now: now})
		if err != nil {
			t.Fatalf("Renew(%s, %v): %v", owner, refs, err)
		}
		if r == nil {
			t.Fatalf("Renew returned a nil result")
		}
		return r
	}
	refs := func(rs []store.LeaseRef) []string {
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s#%d", r.ID, r.Attempt))
		}
		return out
	}

	// Renewing extends the lease, through any handle.
	r := renew(other, "w1", at(10*time.Second), at(2*time.Minute), store.LeaseRef{ID: "r-a", Attempt: 1}, store.LeaseRef{ID: "r-b", Attempt: 1})
	if len(r.Lost) != 0 || len(r.CancelRequested) != 0 {
		t.Fatalf("Renew of live leases: lost %v, cancel requested %v; want none", refs(r.Lost), refs(r.CancelRequested))
	}
	checkLease(t, e.get(e.s, "r-a"), "w1", 1, at(2*time.Minute))
	// Only r-c and r-d (not renewed) are rescued at +1m.
	rescued := e.rescue(e.s, at(time.Minute), 10)
	if got := ids(rescued); len(got) != 2 || !(got[0] == "r-c" && got[1] == "r-d" || got[0] == "r-d" && got[1] == "r-c") {
		t.Fatalf("Rescue at +1m returned %v, want r-c and r-d (r-a and r-b were renewed)", got)
	}

	// A rescued attempt, a foreign owner, a wrong attempt, an unknown ID: lost.
	r = renew(e.s, "w1", at(70*time.Second), at(3*time.Minute), store.LeaseRef{ID: "r-c", Attempt: 1})
	if got := refs(r.Lost); !slicesEqual(got, []string{"r-c#1"}) {
		t.Fatalf("Renew of a rescued attempt: lost %v, want [r-c#1]", got)
	}
	r = renew(e.s, "w2", at(70*time.Second), at(3*time.Minute), store.LeaseRef{ID: "r-a", Attempt: 1})
	if got := refs(r.Lost); !slicesEqual(got, []string{"r-a#1"}) {
		t.Fatalf("Renew by a foreign owner: lost %v, want [r-a#1]", got)
	}
	checkLease(t, e.get(e.s, "r-a"), "w1", 1, at(2*time.Minute)) // untouched
	r = renew(e.s, "w1", at(70*time.Second), at(3*time.Minute), store.LeaseRef{ID: "r-a", Attempt: 2}, store.LeaseRef{ID: "r-nope", Attempt: 1})
	if got := refs(r.Lost); !slicesEqual(got, []string{"r-a#2", "r-nope#1"}) {
		t.Fatalf("Renew of a wrong attempt and an unknown ID: lost %v, want [r-a#2 r-nope#1]", got)
	}
	// A rescued attempt that was claimed again is a new attempt; the old one stays lost.
	c := e.claimOne(other, "q-renew", "w2", at(80*time.Second), "r-c")
	checkLease(t, c, "w2", 2, at(80*time.Second).Add(lease))
	r = renew(e.s, "w1", at(81*time.Second), at(3*time.Minute), store.LeaseRef{ID: "r-c", Attempt: 1})
	if got := refs(r.Lost); !slicesEqual(got, []string{"r-c#1"}) {
		t.Fatalf("Renew of an attempt claimed again by another owner: lost %v, want [r-c#1]", got)
	}

	// A finished attempt is lost.
	e.finishOK(e.s, "w1", at(90*time.Second), store.Outcome{ID: "r-b", Attempt: 1, State: store.Completed})
	r = renew(e.s, "w1", at(91*time.Second), at(3*time.Minute), store.LeaseRef{ID: "r-b", Attempt: 1})
	if got := refs(r.Lost); !slicesEqual(got, []string{"r-b#1"}) {
		t.Fatalf("Renew of a finished attempt: lost %v, want [r-b#1]", got)
	}

	// A cancel request is reported to the owner, and the lease is renewed.
	if _, err := other.Cancel(e.ctx, &store.CancelParams{ID: "r-a", Now: at(100 * time.Second), Node: "n-cancel"}); err != nil {
		t.Fatalf("Cancel of a processing instance: %v", err)
	}
	r = renew(e.s, "w1", at(101*time.Second), at(4*time.Minute), store.LeaseRef{ID: "r-a", Attempt: 1})
	if len(r.Lost) != 0 || !slicesEqual(refs(r.CancelRequested), []string{"r-a#1"}) {
		t.Fatalf("Renew after Cancel: lost %v, cancel requested %v; want none and [r-a#1]", refs(r.Lost), refs(r.CancelRequested))
	}
	got := e.get(e.s, "r-a")
	checkLease(t, got, "w1", 1, at(4*time.Minute))
	if !got.CancelRequested {
		t.Fatalf("instance r-a lost its CancelRequested flag")
	}
}

// outcomeCases are the outcomes Finish applies, each checked on its own
// instance.
func outcomeCases() []struct {
	name string
	out  store.Outcome
} {
	return []struct {
		name string
		out  store.Outcome
	}{
		{"completed", store.Outcome{State: store.Completed, Result: []byte(`[42,"x"]`)}},
		{"terminated", store.Outcome{State: store.Terminated, Error: "fatal: no retries left"}},
		{"canceled", store.Outcome{State: store.Canceled, Error: "canceled by user"}},
		{"timedout", store.Outcome{State: store.TimedOut, Error: "attempt ran past 5s"}},
		{"retry", store.Outcome{State: store.Scheduled, RunAt: at(time.Hour), Error: "temporary failure"}},
		{"release", store.Outcome{State: store.Scheduled, RunAt: at(2 * time.Minute), Release: true, Error: "handed back (fence 1 in a row): lease lost"}},
	}
}

func testFinishOutcomes(t *testing.T, h Harness) {
	e := setup(t, h)
	cases := outcomeCases()
	var ins []*store.Instance
	for _, c := range cases {
		in := inst("fin-"+c.name, "q-fin")
		in.Kind = "kind-" + c.name
		ins = append(ins, in)
	}
	res := e.enqueue(e.s, base, ins...)
	claimed := e.claim(e.s, "q-fin", "w1", len(cases), at(time.Second))
	if len(claimed.Instances) != len(cases) {
		t.Fatalf("claimed %d, want %d", len(claimed.Instances), len(cases))
	}
	now := at(20 * time.Second)
	var outs []store.Outcome
	for _, c := range cases {
		o := c.out
		o.ID, o.Attempt = "fin-"+c.name, 1
		outs = append(outs, o)
	}
	applied := e.finishOK(e.open(), "w1", now, outs...)
	for i, c := range cases {
		o := outs[i]
		if applied[i].State != o.State {
			t.Fatalf("Finish of outcome %s reported state %v, want %v", c.name, applied[i].State, o.State)
		}
		want := ins[i].Clone()
		want.Seq = res[i].Seq
		want.State = o.State
		want.Attempt = 1
		want.UpdatedAt = now
		want.Error = o.Error
		want.Result = o.Result
		if o.State == store.Scheduled {
			want.RunAt = o.RunAt
		} else {
			want.FinishedAt = now
		}
		if o.Release {
			want.Attempt = 0
		}
		checkRecord(t, "instance after outcome "+c.name, want, e.get(e.s, o.ID))
		hist := e.history(e.s, &store.Query{InstanceID: o.ID})
		if len(hist) != 4 {
			t.Fatalf("outcome %s: %d history records, want 4 (created, scheduled, processing, %v)", c.name, len(hist), o.State)
		}
		wantH := &store.HistoryRecord{InstanceID: o.ID, Kind: want.Kind, State: o.State, Attempt: 1, Time: now, Node: "w1", Error: o.Error, Result: o.Result}
		ignore := []string{"Seq"}
		if o.Release {
			ignore = append(ignore, "Attempt") // either the handed-back attempt or the decremented count
		}
		checkRecord(t, "history record of outcome "+c.name, wantH, hist[3], ignore...)
	}
	// The retried and released instances run again, with the right attempt.
	c := e.claimOne(e.s, "q-fin", "w2", at(2*time.Minute), "fin-release")
	if c.Attempt != 1 {
		t.Fatalf("released instance claimed again with Attempt %d, want 1 (a release does not count)", c.Attempt)
	}
	// A claim returns the error the last outcome left: the engine reads
	// from a release's error how many in a row came before.
	errOf := func(name string) string {
		for i, oc := range cases {
			if oc.name == name {
				return outs[i].Error
			}
		}
		panic("no outcome case " + name)
	}
	if want := errOf("release"); c.Error != want {
		t.Fatalf("released instance claimed again with Error %q, want the release's %q", c.Error, want)
	}
	c = e.claimOne(e.s, "q-fin", "w2", at(time.Hour), "fin-retry")
	if c.Attempt != 2 {
		t.Fatalf("retried instance claimed again with Attempt %d, want 2", c.Attempt)
	}
	if want := errOf("retry"); c.Error != want {
		t.Fatalf("retried instance claimed again with Error %q, want the retry's %q", c.Error, want)
	}
}

func testFinishLateAfterRescue(t *testing.T, h Harness) {
	e := setup(t, h)
	for _, c := range outcomeCases() {
		id := "late-" + c.name
		e.enqueue(e.s, base, inst(id, "q-late-"+c.name))
		e.claimOne(e.s, "q-late-"+c.name, "w1", base, id)
	}
	if got := e.rescue(e.s, at(time.Minute), 100); len(got) != len(outcomeCases()) {
		t.Fatalf("Rescue returned %d, want %d", len(got), len(outcomeCases()))
	}
	for _, c := range outcomeCases() {
		id := "late-" + c.name
		before := e.get(e.s, id)
		hbefore := e.history(e.s, &store.Query{InstanceID: id})
		o := c.out
		o.ID, o.Attempt = id, 1
		errs := e.finish(e.s, "w1", at(2*time.Minute), o)
		wantErr(t, "late Finish ("+c.name+") after rescue", errs[0].Err, store.ErrLeaseLost)
		checkRecord(t, "instance after a late "+c.name, before, e.get(e.s, id))
		if hafter := e.history(e.s, &store.Query{InstanceID: id}); len(hafter) != len(hbefore) {
			t.Fatalf("late Finish (%s) added history: %d records, had %d", c.name, len(hafter), len(hbefore))
		}
		// Also after the rescued instance was claimed again by someone else.
		e.claimOne(e.s, "q-late-"+c.name, "w2", at(3*time.Minute), id)
		before = e.get(e.s, id)
		errs = e.finish(e.s, "w1", at(4*time.Minute), o)
		wantErr(t, "late Finish ("+c.name+") after the instance was claimed again", errs[0].Err, store.ErrLeaseLost)
		checkRecord(t, "instance after a late "+c.name, before, e.get(e.s, id))
	}
}

func testFinishTwice(t *testing.T, h Harness) {
	e := setup(t, h)
	for _, c := range outcomeCases() {
		id := "twice-" + c.name
		e.enqueue(e.s, base, inst(id, "q-twice-"+c.name))
		e.claimOne(e.s, "q-twice-"+c.name, "w1", base, id)
		o := c.out
		o.ID, o.Attempt = id, 1
		e.finishOK(e.s, "w1", at(time.Second), o)
		after := e.get(e.s, id)
		hist := e.history(e.s, &store.Query{InstanceID: id})
		o2 := o
		o2.Result, o2.Error = []byte(`["second"]`), "second finish"
		if o2.State != store.Completed {
			o2.Result = nil
		}
		errs := e.finish(e.open(), "w1", at(2*time.Second), o2)
		wantErr(t, "second Finish ("+c.name+")", errs[0].Err, store.ErrLeaseLost)
		checkRecord(t, "instance after a second "+c.name, after, e.get(e.s, id))
		if h2 := e.history(e.s, &store.Query{InstanceID: id}); len(h2) != len(hist) {
			t.Fatalf("second Finish (%s) added history: %d records, had %d", c.name, len(h2), len(hist))
		}
		// Both outcomes in one batch: the first applies, the second is lost.
		id = "twice-batch-" + c.name
		e.enqueue(e.s, base, inst(id, "q-twice-b-"+c.name))
		e.claimOne(e.s, "q-twice-b-"+c.name, "w1", base, id)
		o.ID, o2.ID = id, id
		errs = e.finish(e.s, "w1", at(time.Second), o, o2)
		if errs[0].Err != nil {
			t.Fatalf("first of two outcomes (%s) in one batch: %v", c.name, errs[0].Err)
		}
		wantErr(t, "second of two outcomes ("+c.name+") in one batch", errs[1].Err, store.ErrLeaseLost)
		if got := e.get(e.s, id); got.Error != o.Error {
			t.Fatalf("outcome %s applied twice in one batch: error %q, want %q", c.name, got.Error, o.Error)
		}
	}
}

func testFinishForeign(t *testing.T, h Harness) {
	e := setup(t, h)
	e.enqueue(e.s, base, inst("ff-1", "q-ff"), inst("ff-2", "q-ff"))
	e.claim(e.s, "q-ff", "w1", 2, base)
	errs := e.finish(e.s, "w2", at(time.Second),
		store.Outcome{ID: "ff-1", Attempt: 1, State: store.Completed},
		store.Outcome{ID: "ff-2", Attempt: 2, State: store.Completed},
	)
	wantErr(t, "Finish by a foreign owner", errs[0].Err, store.ErrLeaseLost)
	wantErr(t, "Finish by a foreign owner of a wrong attempt", errs[1].Err, store.ErrLeaseLost)
	errs = e.finish(e.s, "w1", at(time.Second),
		store.Outcome{ID: "ff-2", Attempt: 2, State: store.Completed},
		store.Outcome{ID: "ff-1", Attempt: 1, State: store.Completed},
	)
	wantErr(t, "Finish of a wrong attempt", errs[0].Err, store.ErrLeaseLost)
	if errs[1].Err != nil {
		t.Fatalf("Finish by the owner next to a lost outcome: %v", errs[1].Err)
	}
	checkLease(t, e.get(e.s, "ff-2"), "w1", 1, base.Add(lease))
	if got := e.get(e.s, "ff-1"); got.State != store.Completed {
		t.Fatalf("ff-1 state %v, want completed", got.State)
	}
}

func testRescue(t *testing.T, h Harness) {
	e := setup(t, h)
	retry, term, forever, live := inst("rs-retry", "q-rs"), inst("rs-term", "q-rs"), inst("rs-forever", "q-rs"), inst("rs-live", "q-rs-live")
	retry.MaxRetries, term.MaxRetries, forever.MaxRetries = 1, 0, -1
	res := e.enqueue(e.s, base, retry, term, forever, live)
	e.claim(e.s, "q-rs", "w1", 3, base) // leases until base+30s
	if _, err := e.s.Claim(e.ctx, &store.ClaimParams{Queue: "q-rs-live", Owner: "w1", Limit: 1, Now: base, LeaseUntil: at(100 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := e.rescue(e.s, at(29*time.Second), 10); len(got) != 0 {
		t.Fatalf("Rescue before any lease ended returned %v", ids(got))
	}
	now := at(time.Minute)
	got := e.rescue(e.open(), now, 10)
	byID := map[string]*store.Instance{}
	for _, in := range got {
		if byID[in.ID] != nil {
			t.Fatalf("Rescue returned %s twice", in.ID)
		}
		byID[in.ID] = in
	}
	if len(byID) != 3 || byID["rs-retry"] == nil || byID["rs-term"] == nil || byID["rs-forever"] == nil {
		t.Fatalf("Rescue returned %v, want rs-retry, rs-term, rs-forever (rs-live holds a live lease)", ids(got))
	}
	for i, in := range []*store.Instance{retry, term, forever} {
		want := in.Clone()
		want.Seq, want.Attempt, want.UpdatedAt = res[i].Seq, 1, now
		if in.ID == "rs-term" {
			want.State, want.FinishedAt = store.Terminated, now
		} else {
			want.State = store.Scheduled // RunAt kept: its place in the queue
		}
		stored := e.get(e.s, in.ID)
		checkRecord(t, "rescued "+in.ID, want, stored, "Error")
		checkRecord(t, "Rescue's returned "+in.ID, stored, byID[in.ID])
		hist := e.history(e.s, &store.Query{InstanceID: in.ID})
		if len(hist) != 4 {
			t.Fatalf("%s: %d history records after rescue, want 4", in.ID, len(hist))
		}
		last := hist[3]
		if last.State != want.State || last.Attempt != 1 || last.Node != "node-rescue" || last.Error == "" || !last.Time.Equal(now) {
			t.Fatalf("%s: rescue history record %+v; want state %v, attempt 1, node node-rescue, time %v and an error saying the lease expired", in.ID, *last, want.State, now)
		}
	}
	checkLease(t, e.get(e.s, "rs-live"), "w1", 1, at(100*time.Hour))

	// The retried ones run again with the attempt counted; rs-retry is then
	// out of retries and rs-forever never is.
	now = at(2 * time.Minute)
	c := e.claim(e.s, "q-rs", "w1", 10, now)
	checkIDs(t, "claim after rescue", c.Instances, "rs-retry", "rs-forever")
	for _, in := range c.Instances {
		if in.Attempt != 2 {
			t.Fatalf("%s claimed after rescue with Attempt %d, want 2", in.ID, in.Attempt)
		}
	}
	got = e.rescue(e.s, at(3*time.Minute), 10)
	for _, in := range got {
		switch {
		case in.ID == "rs-retry" && in.State != store.Terminated:
			t.Fatalf("rs-retry (MaxRetries 1) rescued after attempt 2 into %v, want terminated", in.State)
		case in.ID == "rs-forever" && in.State != store.Scheduled:
			t.Fatalf("rs-forever (MaxRetries -1) rescued into %v, want scheduled", in.State)
		}
	}
	if len(got) != 2 {
		t.Fatalf("second Rescue returned %v, want rs-retry and rs-forever", ids(got))
	}
	for i := 3; i <= 5; i++ {
		now := at(time.Duration(i) * time.Hour)
		e.claimOne(e.s, "q-rs", "w1", now, "rs-forever")
		got := e.rescue(e.s, now.Add(time.Hour/2), 10)
		if len(got) != 1 || got[0].State != store.Scheduled || got[0].Attempt != i {
			t.Fatalf("rescue of rs-forever at attempt %d returned %d instances (%v), want rs-forever scheduled with that attempt", i, len(got), ids(got))
		}
	}
}

// testRescueCancelRequested checks that a cancel request outlives the
// lease it was made under: an attempt whose lease lapsed before its owner
// saw the request is rescued into Canceled, whatever retries it has left,
// and never runs again.
func testRescueCancelRequested(t *testing.T, h Harness) {
	e := setup(t, h)
	retry, term, forever, plain := inst("rc-retry", "q-rc"), inst("rc-term", "q-rc"), inst("rc-forever", "q-rc"), inst("rc-plain", "q-rc")
	retry.MaxRetries, term.MaxRetries, forever.MaxRetries = 3, 0, -1
	res := e.enqueue(e.s, base, retry, term, forever, plain)
	checkIDs(t, "claim", e.claim(e.s, "q-rc", "w1", 4, base).Instances, "rc-retry", "rc-term", "rc-forever", "rc-plain") // leases until base+30s
	for _, id := range []string{"rc-retry", "rc-term", "rc-forever"} {
		if _, err := e.open().Cancel(e.ctx, &store.CancelParams{ID: id, Now: at(time.Second), Node: "n-cancel"}); err != nil {
			t.Fatalf("Cancel of processing %s: %v", id, err)
		}
	}
	// w1 never renews: its leases lapse before it sees the requests.
	now := at(time.Minute)
	got := e.rescue(e.open(), now, 10)
	byID := map[string]*store.Instance{}
	for _, in := range got {
		byID[in.ID] = in
	}
	if len(got) != 4 || len(byID) != 4 {
		t.Fatalf("Rescue returned %v, want the four lapsed attempts once each", ids(got))
	}
	for i, in := range []*store.Instance{retry, term, forever, plain} {
		want := in.Clone()
		want.Seq, want.Attempt, want.UpdatedAt = res[i].Seq, 1, now
		if in.ID == "rc-plain" {
			want.State = store.Scheduled // no cancel requested: retried as usual
		} else {
			want.State, want.FinishedAt = store.Canceled, now
		}
		stored := e.get(e.s, in.ID)
		checkRecord(t, "rescued "+in.ID, want, stored, "Error")
		checkRecord(t, "Rescue's returned "+in.ID, stored, byID[in.ID])
		hist := e.history(e.s, &store.Query{InstanceID: in.ID})
		if n := len(hist); n != 4 || hist[3].State != want.State || hist[3].Attempt != 1 || hist[3].Node != "node-rescue" || hist[3].Error == "" || !hist[3].Time.Equal(now) {
			t.Fatalf("%s: history after rescue %s; want a last record %v, attempt 1, by node-rescue at %v, saying the lease expired", in.ID, fmtHistory(hist), want.State, now)
		}
	}
	canceled := e.instances(e.s, &store.Query{Queue: "q-rc", States: []store.State{store.Canceled}})
	if got := ids(canceled); len(got) != 3 {
		t.Fatalf("LookupInstances(state canceled) after rescue returned %v, want rc-retry, rc-term, rc-forever", got)
	}
	// Only the instance nobody canceled runs again; the others are final.
	c := e.claim(e.s, "q-rc", "w2", 10, at(2*time.Minute))
	checkIDs(t, "claim after rescue", c.Instances, "rc-plain")
	if !c.NextRunAt.IsZero() {
		t.Fatalf("claim after rescue: NextRunAt %v, want zero (nothing waits)", c.NextRunAt)
	}
	if got := e.rescue(e.s, at(time.Hour), 10); len(got) != 1 || got[0].ID != "rc-plain" {
		t.Fatalf("second Rescue returned %v, want only rc-plain (the canceled ones are final)", ids(got))
	}
	_, err := e.s.Cancel(e.ctx, &store.CancelParams{ID: "rc-retry", Now: at(2 * time.Hour), Node: "n-cancel"})
	wantErr(t, "Cancel of an instance rescued into canceled", err, store.ErrFinished)
	// The late owner's outcome is not applied over the rescue.
	errs := e.finish(e.s, "w1", at(2*time.Hour), store.Outcome{ID: "rc-forever", Attempt: 1, State: store.Canceled, Error: "canceled"})
	wantErr(t, "Finish by the owner whose lease was rescued", errs[0].Err, store.ErrLeaseLost)
}

// testFinishCancelRequested checks that a cancel request outlives the
// attempt it was made during: an outcome that would run the instance
// again (a retry or a release) ends it Canceled instead when its cancel
// was requested before the owner saw it at a Renew, while a final outcome
// stays as given. Each applied outcome clears the request.
func testFinishCancelRequested(t *testing.T, h Harness) {
	e := setup(t, h)
	cases := outcomeCases()
	var ins []*store.Instance
	var outs []store.Outcome
	for _, c := range cases {
		in := inst("fc-"+c.name, "q-fc")
		in.Kind = "kind-" + c.name
		ins = append(ins, in)
		o := c.out
		o.ID, o.Attempt = in.ID, 1
		outs = append(outs, o)
	}
	// One retry nobody canceled: it is retried as usual.
	plain := inst("fc-plain", "q-fc")
	ins = append(ins, plain)
	outs = append(outs, store.Outcome{ID: plain.ID, Attempt: 1, State: store.Scheduled, RunAt: at(time.Hour), Error: "temporary failure"})
	res := e.enqueue(e.s, base, ins...)
	if c := e.claim(e.s, "q-fc", "w1", len(ins), base); len(c.Instances) != len(ins) {
		t.Fatalf("claimed %v, want all %d", ids(c.Instances), len(ins))
	}
	for _, in := range ins[:len(cases)] {
		if _, err := e.open().Cancel(e.ctx, &store.CancelParams{ID: in.ID, Now: at(time.Second), Node: "n-cancel"}); err != nil {
			t.Fatalf("Cancel of processing %s: %v", in.ID, err)
		}
	}
	// w1 finishes every attempt before a Renew told it of the requests.
	now := at(20 * time.Second)
	applied := e.finishOK(e.s, "w1", now, outs...)
	for i, in := range ins {
		o := outs[i]
		want := in.Clone()
		want.Seq, want.Attempt, want.UpdatedAt = res[i].Seq, 1, now
		want.State, want.Error, want.Result = o.State, o.Error, o.Result
		switch {
		case o.State != store.Scheduled:
			want.FinishedAt = now // a final outcome stays as given
		case in.ID == plain.ID:
			want.RunAt = o.RunAt
		default:
			// A retry or release of a canceled instance: no further
			// attempt, the attempt counted, its RunAt kept.
			want.State, want.FinishedAt = store.Canceled, now
		}
		if applied[i].State != want.State {
			t.Fatalf("Finish of %s (-> %v) reported state %v, want %v", in.ID, o.State, applied[i].State, want.State)
		}
		stored := e.get(e.s, in.ID)
		checkRecord(t, "instance "+in.ID+" after its outcome", want, stored)
		hist := e.history(e.s, &store.Query{InstanceID: in.ID})
		wantH := &store.HistoryRecord{InstanceID: in.ID, Kind: in.Kind, State: want.State, Attempt: 1, Time: now, Node: "w1", Error: o.Error, Result: o.Result}
		if len(hist) != 4 {
			t.Fatalf("%s: history %s; want created, scheduled, processing, %v", in.ID, fmtHistory(hist), want.State)
		}
		checkRecord(t, "history record of "+in.ID+"'s outcome", wantH, hist[3], "Seq")
	}
	canceled := e.instances(e.s, &store.Query{Queue: "q-fc", States: []store.State{store.Canceled}})
	if got := ids(canceled); len(got) != 3 {
		t.Fatalf("LookupInstances(state canceled) returned %v, want fc-canceled, fc-retry, fc-release", got)
	}
	// A repeated Finish (its reply lost) changes nothing and succeeds.
	before := map[string]*store.Instance{}
	for _, in := range ins {
		before[in.ID] = e.get(e.s, in.ID)
	}
	for i, r := range e.finish(e.open(), "w1", at(21*time.Second), outs...) {
		if r.Err != nil || r.State != before[outs[i].ID].State {
			t.Fatalf("Finish repeated (%s -> %v): state %v, error %v; want it reported as applied, state %v", outs[i].ID, outs[i].State, r.State, r.Err, before[outs[i].ID].State)
		}
	}
	for _, in := range ins {
		checkRecord(t, "instance "+in.ID+" after a repeated Finish", before[in.ID], e.get(e.s, in.ID))
		if hist := e.history(e.s, &store.Query{InstanceID: in.ID}); len(hist) != 4 {
			t.Fatalf("%s: repeated Finish added history: %s", in.ID, fmtHistory(hist))
		}
	}
	// Only the retry nobody canceled runs again; the others are final.
	c := e.claim(e.s, "q-fc", "w2", 10, at(2*time.Hour))
	checkIDs(t, "claim after the outcomes", c.Instances, plain.ID)
	if !c.NextRunAt.IsZero() {
		t.Fatalf("claim after the outcomes: NextRunAt %v, want zero (nothing waits)", c.NextRunAt)
	}
	for _, id := range []string{"fc-retry", "fc-release"} {
		_, err := e.s.Cancel(e.ctx, &store.CancelParams{ID: id, Now: at(3 * time.Hour), Node: "n-cancel"})
		wantErr(t, "Cancel of "+id+" finished into canceled", err, store.ErrFinished)
	}
}

func testRescueLimit(t *testing.T, h Harness) {
	e := setup(t, h)
	var ins []*store.Instance
	for i := range 5 {
		ins = append(ins, inst(fmt.Sprintf("rl-%d", i), "q-rl"))
	}
	e.enqueue(e.s, base, ins...)
	e.claim(e.s, "q-rl", "w1", 5, base)
	seen := map[string]bool{}
	for _, want := range []int{2, 2, 1, 0} {
		got := e.rescue(e.s, at(time.Minute), 2)
		if len(got) != want {
			t.Fatalf("Rescue with limit 2 returned %d, want %d", len(got), want)
		}
		for _, in := range got {
			if seen[in.ID] {
				t.Fatalf("Rescue returned %s twice", in.ID)
			}
			seen[in.ID] = true
		}
	}
}

func testCancel(t *testing.T, h Harness) {
	e := setup(t, h)
	e.enqueue(e.s, base, inst("c-sched", "q-c"), inst("c-proc", "q-c2"), inst("c-done", "q-c3"))
	cancel := func(id string, now time.Time) (*store.Instance, error) {
		return e.open().Cancel(e.ctx, &store.CancelParams{ID: id, Now: now, Node: "n-cancel"})
	}
	// Scheduled: canceled at once, never claimed.
	now := at(time.Second)
	got, err := cancel("c-sched", now)
	if err != nil {
		t.Fatalf("Cancel of a scheduled instance: %v", err)
	}
	stored := e.get(e.s, "c-sched")
	if stored.State != store.Canceled || !stored.FinishedAt.Equal(now) || !stored.UpdatedAt.Equal(now) {
		t.Fatalf("canceled scheduled instance: state %v finished %v updated %v; want canceled at %v", stored.State, stored.FinishedAt, stored.UpdatedAt, now)
	}
	checkRecord(t, "Cancel's returned instance", stored, got)
	if res := e.claim(e.s, "q-c", "w1", 10, at(time.Hour)); len(res.Instances) != 0 || !res.NextRunAt.IsZero() {
		t.Fatalf("claim after cancel returned %v, NextRunAt %v; want nothing", ids(res.Instances), res.NextRunAt)
	}
	hist := e.history(e.s, &store.Query{InstanceID: "c-sched"})
	if n := len(hist); n != 3 || hist[2].State != store.Canceled || hist[2].Node != "n-cancel" || !hist[2].Time.Equal(now) {
		t.Fatalf("history of a canceled scheduled instance: %s", fmtHistory(hist))
	}
	_, err = cancel("c-sched", at(2*time.Second))
	wantErr(t, "second Cancel", err, store.ErrFinished)

	// Processing: flagged, the owner sees it, finishes as Canceled.
	e.claimOne(e.s, "q-c2", "w1", now, "c-proc")
	got, err = cancel("c-proc", at(2*time.Second))
	if err != nil {
		t.Fatalf("Cancel of a processing instance: %v", err)
	}
	if got.State != store.Processing || !got.CancelRequested || got.LeaseOwner != "w1" {
		t.Fatalf("Cancel of a processing instance returned state %v, cancel requested %v, owner %q; want processing, true, w1", got.State, got.CancelRequested, got.LeaseOwner)
	}
	if stored := e.get(e.s, "c-proc"); !stored.CancelRequested || stored.State != store.Processing {
		t.Fatalf("stored processing instance after Cancel: state %v, cancel requested %v", stored.State, stored.CancelRequested)
	}
	r, err := e.s.Renew(e.ctx, &store.RenewParams{Owner: "w1", Leases: []store.LeaseRef{{ID: "c-proc", Attempt: 1}}, Now: at(3 * time.Second), Until: at(time.Minute)})
	if err != nil || len(r.CancelRequested) != 1 || r.CancelRequested[0].ID != "c-proc" {
		t.Fatalf("Renew after Cancel: %+v, %v; want c-proc in CancelRequested", r, err)
	}
	e.finishOK(e.s, "w1", at(4*time.Second), store.Outcome{ID: "c-proc", Attempt: 1, State: store.Canceled, Error: "canceled"})
	if stored := e.get(e.s, "c-proc"); stored.State != store.Canceled {
		t.Fatalf("state after finishing a cancel request: %v, want canceled", stored.State)
	}

	// Finished and unknown.
	e.claimOne(e.s, "q-c3", "w1", now, "c-done")
	e.finishOK(e.s, "w1", at(2*time.Second), store.Outcome{ID: "c-done", Attempt: 1, State: store.Completed})
	_, err = cancel("c-done", at(3*time.Second))
	wantErr(t, "Cancel of a completed instance", err, store.ErrFinished)
	if stored := e.get(e.s, "c-done"); stored.State != store.Completed || stored.CancelRequested {
		t.Fatalf("Cancel of a completed instance changed it: state %v, cancel requested %v", stored.State, stored.CancelRequested)
	}
	_, err = cancel("c-unknown", at(3*time.Second))
	wantErr(t, "Cancel of an unknown instance", err, store.ErrNotFound)
}

// testEnqueueRefusedStoresNothing checks that a call holding one invalid
// instance is refused as a whole, with ErrInvalid, before anything is
// stored: the engine's batch (job.Manager.ScheduleJobs) relies on it to
// send the rest again without the record at fault.
func testEnqueueRefusedStoresNothing(t *testing.T, h Harness) {
	e := setup(t, h)
	good := inst("refused-good", "q-refused")
	bad := inst("refused-bad", "q-refused")
	bad.Kind = ""
	res, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{good, bad}, Node: "n", Now: base})
	wantErr(t, "Enqueue of a batch holding an instance without a kind", err, store.ErrInvalid)
	if res != nil {
		t.Fatalf("refused Enqueue returned results %+v", res)
	}
	e.absent(e.s, "refused-good")
	if hist := e.history(e.s, &store.Query{InstanceID: "refused-good"}); len(hist) != 0 {
		t.Fatalf("a refused Enqueue left %d history records", len(hist))
	}
	e.enqueue(e.s, base, good) // the rest goes through on its own
	e.get(e.s, "refused-good")
}

func testUniqueKey(t *testing.T, h Harness) {
	e := setup(t, h)
	holder := inst("u-holder", "q-u")
	holder.UniqueKey, holder.UniqueUntil = "key-1", at(time.Hour)
	e.enqueue(e.s, base, holder)

	dup := inst("u-dup", "q-u")
	dup.UniqueKey, dup.UniqueUntil = "key-1", at(2*time.Hour)
	other := inst("u-other", "q-u")
	other.UniqueKey, other.UniqueUntil = "key-2", at(time.Hour)
	plain := inst("u-plain", "q-u")
	res, err := e.open().Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{dup, other, plain}, Node: "n", Now: at(59 * time.Minute)})
	if err != nil {
		t.Fatalf("Enqueue with a duplicate: %v", err)
	}
	if len(res) != 3 {
		t.Fatalf("Enqueue of 3 returned %d results", len(res))
	}
	wantErr(t, "Enqueue of a held unique key", res[0].Err, store.ErrDuplicate)
	if res[0].ID != "u-holder" || res[0].Seq != 0 {
		t.Fatalf("duplicate result: ID %q Seq %d; want the holder's ID u-holder and Seq 0", res[0].ID, res[0].Seq)
	}
	if res[1].Err != nil || res[2].Err != nil || res[1].ID != "u-other" || res[2].ID != "u-plain" {
		t.Fatalf("instances next to a duplicate: %+v, %+v; want both stored", res[1], res[2])
	}
	e.absent(e.s, "u-dup")
	if hist := e.history(e.s, &store.Query{InstanceID: "u-dup"}); len(hist) != 0 {
		t.Fatalf("a rejected duplicate left %d history records", len(hist))
	}

	// The key is held whatever the holder's state, and free once UniqueUntil passes.
	e.claimOne(e.s, "q-u", "w1", base, "u-holder")
	e.finishOK(e.s, "w1", at(time.Second), store.Outcome{ID: "u-holder", Attempt: 1, State: store.Completed})
	res, err = e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{dup}, Now: at(30 * time.Minute)})
	if err != nil || len(res) != 1 {
		t.Fatalf("Enqueue: %v, %d results", err, len(res))
	}
	wantErr(t, "Enqueue of a key held by a finished instance", res[0].Err, store.ErrDuplicate)
	e.enqueue(e.s, at(time.Hour), dup) // UniqueUntil == Now: no longer held
	if got := e.get(e.s, "u-dup"); got.UniqueKey != "key-1" || !got.UniqueUntil.Equal(at(2*time.Hour)) {
		t.Fatalf("new holder: key %q until %v", got.UniqueKey, got.UniqueUntil)
	}
	late := inst("u-late", "q-u")
	late.UniqueKey, late.UniqueUntil = "key-1", at(3*time.Hour)
	res, err = e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{late}, Now: at(90 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Enqueue against the new holder", res[0].Err, store.ErrDuplicate)
	if res[0].ID != "u-dup" {
		t.Fatalf("duplicate names holder %q, want the new holder u-dup", res[0].ID)
	}

	// The same key twice in one batch: the first holds it.
	a, b := inst("u-batch-a", "q-u"), inst("u-batch-b", "q-u")
	a.UniqueKey, a.UniqueUntil = "key-batch", at(time.Hour)
	b.UniqueKey, b.UniqueUntil = "key-batch", at(time.Hour)
	res, err = e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{a, b}, Now: base})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[0].ID != "u-batch-a" {
		t.Fatalf("first of a key in one batch: %+v", res[0])
	}
	wantErr(t, "second of a key in one batch", res[1].Err, store.ErrDuplicate)
	if res[1].ID != "u-batch-a" {
		t.Fatalf("second of a key in one batch names %q, want u-batch-a", res[1].ID)
	}
	e.absent(e.s, "u-batch-b")
}

// testRescueKeepsPlace checks that a rescued instance keeps its RunAt and
// so its place in the queue: it runs before instances scheduled after it,
// instead of going behind a backlog.
func testRescueKeepsPlace(t *testing.T, h Harness) {
	e := setup(t, h)
	first := inst("kp-first", "q-kp")
	e.enqueue(e.s, base, first)
	e.claim(e.s, "q-kp", "w1", 1, base) // the lease ends at base+30s, unrenewed
	var later []*store.Instance
	for i := range 3 {
		in := inst(fmt.Sprintf("kp-later-%d", i), "q-kp")
		in.RunAt, in.CreatedAt = at(time.Duration(i+1)*time.Second), at(time.Duration(i+1)*time.Second)
		later = append(later, in)
	}
	e.enqueue(e.s, at(time.Second), later...)
	now := at(time.Minute)
	got := e.rescue(e.s, now, 10)
	checkIDs(t, "Rescue", got, "kp-first")
	if !got[0].RunAt.Equal(base) {
		t.Fatalf("rescued instance has RunAt %v, want its original %v", got[0].RunAt, base)
	}
	c := e.claim(e.s, "q-kp", "w2", 2, now)
	checkIDs(t, "claim after rescue", c.Instances, "kp-first", "kp-later-0")
}

package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

func testNamespaceIsolation(t *testing.T, h Harness) {
	a := setup(t, h)
	b := setup(t, h)
	if a.ns == b.ns {
		t.Fatalf("two namespaces with one name %q", a.ns)
	}
	// The same IDs, queue and unique key in both namespaces.
	mk := func(id string) *store.Instance {
		in := inst(id, "q-ns")
		in.UniqueKey, in.UniqueUntil = "key-"+id, at(time.Hour)
		return in
	}
	a.enqueue(a.s, base, mk("ns-1"), mk("ns-2"), mk("ns-3"))
	a.claimOne(a.s, "q-ns", "w1", base, "ns-1")
	a.claimOne(a.s, "q-ns", "w1", base, "ns-2")
	a.finishOK(a.s, "w1", at(time.Second), store.Outcome{ID: "ns-2", Attempt: 1, State: store.Completed})
	if err := a.s.AppendLogs(a.ctx, []*store.LogRecord{logRec("ns-1", "kind-a", store.LevelInfo, 0, "in a")}); err != nil {
		t.Fatal(err)
	}
	snapshot := func() ([]*store.Instance, int, int) {
		t.Helper()
		return a.instances(a.s, &store.Query{}), len(a.history(a.s, &store.Query{})), len(a.logs(a.s, &store.Query{}))
	}
	insA, histA, logsA := snapshot()

	// b sees nothing and changes nothing of a's.
	if got := b.instances(b.s, &store.Query{}); len(got) != 0 {
		t.Fatalf("another namespace sees %d instances", len(got))
	}
	if got := b.history(b.s, &store.Query{}); len(got) != 0 {
		t.Fatalf("another namespace sees %d history records", len(got))
	}
	if got := b.logs(b.s, &store.Query{}); len(got) != 0 {
		t.Fatalf("another namespace sees %d log records", len(got))
	}
	if res := b.claim(b.s, "q-ns", "w2", 10, at(time.Hour)); len(res.Instances) != 0 || !res.NextRunAt.IsZero() {
		t.Fatalf("another namespace claimed %v (NextRunAt %v)", ids(res.Instances), res.NextRunAt)
	}
	if got := b.rescue(b.s, at(time.Hour), 10); len(got) != 0 {
		t.Fatalf("another namespace rescued %v", ids(got))
	}
	_, err := b.s.Cancel(b.ctx, &store.CancelParams{ID: "ns-3", Now: at(time.Second), Node: "n"})
	wantErr(t, "Cancel from another namespace", err, store.ErrNotFound)
	r, err := b.s.Renew(b.ctx, &store.RenewParams{Owner: "w1", Leases: []store.LeaseRef{{ID: "ns-1", Attempt: 1}}, Now: at(time.Second), Until: at(time.Hour)})
	if err != nil || len(r.Lost) != 1 {
		t.Fatalf("Renew from another namespace: %+v, %v; want the lease reported lost", r, err)
	}
	errs := b.finish(b.s, "w1", at(time.Second), store.Outcome{ID: "ns-1", Attempt: 1, State: store.Completed})
	wantErr(t, "Finish from another namespace", errs[0].Err, store.ErrLeaseLost)
	res := b.prune(b.s, store.PruneParams{Now: at(time.Hour), FinishedBefore: at(time.Hour), KeepFinished: 1, HistoryBefore: at(time.Hour), LogsBefore: at(time.Hour)})
	if *res != (store.PruneResult{}) {
		t.Fatalf("Prune in an empty namespace removed %+v", *res)
	}
	// The same IDs and unique keys are free in b.
	b.enqueue(b.s, base, mk("ns-1"), mk("ns-2"), mk("ns-3"))
	b.claimOne(b.s, "q-ns", "w2", base, "ns-1")

	insA2, histA2, logsA2 := snapshot()
	if len(insA2) != len(insA) || histA2 != histA || logsA2 != logsA {
		t.Fatalf("namespace a changed: %d instances, %d history, %d logs; had %d, %d, %d", len(insA2), histA2, logsA2, len(insA), histA, logsA)
	}
	for i := range insA {
		checkRecord(t, "instance "+insA[i].ID+" of namespace a", insA[i], insA2[i])
	}
	// Rescue and Prune in b leave a's expired lease and finished instance alone.
	b.rescue(b.s, at(time.Hour), 10)
	b.prune(b.s, store.PruneParams{Now: at(time.Hour), FinishedBefore: at(time.Hour), HistoryBefore: at(time.Hour), LogsBefore: at(time.Hour)})
	checkLease(t, a.get(a.s, "ns-1"), "w1", 1, base.Add(lease))
	if got := a.get(a.s, "ns-2"); got.State != store.Completed {
		t.Fatalf("ns-2 in namespace a: state %v, want completed", got.State)
	}
	if _, hist, logs := snapshot(); hist != histA || logs != logsA {
		t.Fatalf("Prune in namespace b removed records of a: %d history, %d logs; had %d, %d", hist, logs, histA, logsA)
	}
}

func testCanceledContext(t *testing.T, h Harness) {
	e := setup(t, h)
	e.enqueue(e.s, base, inst("cx-1", "q-cx"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := []struct {
		name string
		fn   func() error
	}{
		{"Enqueue", func() error {
			_, err := e.s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{inst("cx-2", "q-cx")}, Now: base})
			return err
		}},
		{"Claim", func() error {
			_, err := e.s.Claim(ctx, &store.ClaimParams{Queue: "q-cx", Owner: "w1", Limit: 1, Now: base, LeaseUntil: at(lease)})
			return err
		}},
		{"Renew", func() error {
			_, err := e.s.Renew(ctx, &store.RenewParams{Owner: "w1", Leases: []store.LeaseRef{{ID: "cx-1", Attempt: 1}}, Now: base, Until: at(lease)})
			return err
		}},
		{"Finish", func() error {
			_, err := e.s.Finish(ctx, &store.FinishParams{Owner: "w1", Now: base, Outcomes: []store.Outcome{{ID: "cx-1", Attempt: 1, State: store.Completed}}})
			return err
		}},
		{"Rescue", func() error {
			_, err := e.s.Rescue(ctx, &store.RescueParams{Now: base, Limit: 1})
			return err
		}},
		{"Cancel", func() error {
			_, err := e.s.Cancel(ctx, &store.CancelParams{ID: "cx-1", Now: base})
			return err
		}},
		{"LookupInstances", func() error {
			_, err := e.s.LookupInstances(ctx, &store.Query{})
			return err
		}},
		{"LookupHistory", func() error {
			_, err := e.s.LookupHistory(ctx, &store.Query{})
			return err
		}},
		{"AppendLogs", func() error {
			return e.s.AppendLogs(ctx, []*store.LogRecord{logRec("cx-1", "kind-a", store.LevelInfo, 0, "m")})
		}},
		{"LookupLogs", func() error {
			_, err := e.s.LookupLogs(ctx, &store.Query{})
			return err
		}},
		{"Prune", func() error {
			_, err := e.s.Prune(ctx, &store.PruneParams{Now: base, HistoryBefore: base})
			return err
		}},
	}
	for _, c := range calls {
		done := make(chan error, 1)
		go func() { done <- c.fn() }()
		select {
		case err := <-done:
			wantErr(t, c.name+" with a canceled context", err, context.Canceled)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s with a canceled context did not return within 5s", c.name)
		}
	}
	if n, ok := e.s.(store.Notifier); ok {
		ch, err := n.Subscribe(ctx, "q-cx")
		if err != nil {
			wantErr(t, "Subscribe with a canceled context", err, context.Canceled)
		} else {
			waitClosed(t, ch, "Subscribe's channel with a canceled context")
		}
	}
	// Nothing changed.
	if got := e.get(e.s, "cx-1"); got.State != store.Scheduled {
		t.Fatalf("cx-1 is %v after calls with a canceled context, want scheduled", got.State)
	}
}

func testInvalidParams(t *testing.T, h Harness) {
	e := setup(t, h)
	e.enqueue(e.s, base, inst("inv-1", "q-inv"))
	e.claimOne(e.s, "q-inv", "w1", base, "inv-1")
	claim := func(p store.ClaimParams) error {
		_, err := e.s.Claim(e.ctx, &p)
		return err
	}
	ok := store.ClaimParams{Queue: "q-inv", Owner: "w1", Limit: 1, Now: base, LeaseUntil: at(lease)}
	for name, mod := range map[string]func(*store.ClaimParams){
		"limit 0":        func(p *store.ClaimParams) { p.Limit = 0 },
		"negative limit": func(p *store.ClaimParams) { p.Limit = -1 },
		"no queue":       func(p *store.ClaimParams) { p.Queue = "" },
		"no owner":       func(p *store.ClaimParams) { p.Owner = "" },
		"lease not after now": func(p *store.ClaimParams) {
			p.LeaseUntil = p.Now
		},
	} {
		p := ok
		mod(&p)
		wantErr(t, "Claim with "+name, claim(p), store.ErrInvalid)
	}
	if _, err := e.s.Claim(e.ctx, nil); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Claim(nil): %v, want ErrInvalid", err)
	}
	_, err := e.s.Rescue(e.ctx, &store.RescueParams{Now: base, Limit: 0})
	wantErr(t, "Rescue with limit 0", err, store.ErrInvalid)

	for name, mod := range map[string]func(*store.Instance){
		"no ID":                 func(in *store.Instance) { in.ID = "" },
		"no kind":               func(in *store.Instance) { in.Kind = "" },
		"no queue":              func(in *store.Instance) { in.Queue = "" },
		"no creation time":      func(in *store.Instance) { in.CreatedAt = time.Time{} },
		"unique key, no expiry": func(in *store.Instance) { in.UniqueKey = "k" },
		"max retries too high":  func(in *store.Instance) { in.MaxRetries = store.MaxRetriesLimit + 1 },
	} {
		bad := inst("inv-bad", "q-inv-bad")
		mod(bad)
		good := inst("inv-good", "q-inv-bad")
		_, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{good, bad}, Now: base})
		wantErr(t, "Enqueue of an instance with "+name, err, store.ErrInvalid)
		e.absent(e.s, "inv-good") // the batch is rejected as a whole
	}
	_, err = e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{nil}, Now: base})
	wantErr(t, "Enqueue of a nil instance", err, store.ErrInvalid)

	_, err = e.s.Cancel(e.ctx, &store.CancelParams{Now: base})
	wantErr(t, "Cancel without an ID", err, store.ErrInvalid)

	for name, o := range map[string]store.Outcome{
		"no ID":                  {Attempt: 1, State: store.Completed},
		"state processing":       {ID: "inv-1", Attempt: 1, State: store.Processing},
		"state created":          {ID: "inv-1", Attempt: 1, State: store.Created},
		"no state":               {ID: "inv-1", Attempt: 1},
		"unknown state":          {ID: "inv-1", Attempt: 1, State: 99},
		"scheduled without time": {ID: "inv-1", Attempt: 1, State: store.Scheduled},
		"release into completed": {ID: "inv-1", Attempt: 1, State: store.Completed, Release: true},
	} {
		errs, err := e.s.Finish(e.ctx, &store.FinishParams{Owner: "w1", Now: at(time.Second), Outcomes: []store.Outcome{o}})
		// Either the call fails, or the outcome's entry does.
		if !errors.Is(err, store.ErrInvalid) && (err != nil || len(errs) != 1 || !errors.Is(errs[0].Err, store.ErrInvalid)) {
			t.Fatalf("Finish with an outcome with %s: %v, %v; want ErrInvalid", name, err, errs)
		}
		checkLease(t, e.get(e.s, "inv-1"), "w1", 1, at(lease))
	}

	for name, q := range map[string]store.Query{
		"negative limit": {Limit: -1},
		"unknown state":  {States: []store.State{store.Completed, 42}},
		"empty range":    {Since: at(time.Minute), Until: at(time.Minute)},
	} {
		_, err := e.s.LookupInstances(e.ctx, &q)
		wantErr(t, "LookupInstances with "+name, err, store.ErrInvalid)
		_, err = e.s.LookupHistory(e.ctx, &q)
		wantErr(t, "LookupHistory with "+name, err, store.ErrInvalid)
		if name != "unknown state" { // logs ignore States
			_, err = e.s.LookupLogs(e.ctx, &q)
			wantErr(t, "LookupLogs with "+name, err, store.ErrInvalid)
		}
	}
}

// waitClosed drains ch until it is closed, failing after a deadline.
func waitClosed(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("%s not closed within 5s", what)
		}
	}
}

// drain takes any pending signal off ch without waiting.
func drain(ch <-chan struct{}) {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// waitSignal fails unless ch yields a value within the deadline.
func waitSignal(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: subscription closed before the signal", what)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no signal within 5s", what)
	}
}

func testNotifier(t *testing.T, h Harness) {
	e := setup(t, h)
	n, ok := e.s.(store.Notifier)
	if !ok {
		t.Log("store does not implement store.Notifier; nothing to check")
		return
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, err := n.Subscribe(ctx, "q-notify")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	other := e.open()

	// Enqueue from another handle wakes the subscriber.
	drain(ch)
	e.enqueue(other, base, inst("nt-1", "q-notify"))
	waitSignal(t, ch, "Enqueue from another handle")

	// So does a handed-back lease.
	e.claimOne(other, "q-notify", "w1", base, "nt-1")
	drain(ch)
	e.finishOK(other, "w1", at(time.Second), store.Outcome{ID: "nt-1", Attempt: 1, State: store.Scheduled, RunAt: at(time.Second), Release: true})
	waitSignal(t, ch, "Finish releasing a lease")

	// And a rescue.
	e.claimOne(other, "q-notify", "w1", at(2*time.Second), "nt-1")
	drain(ch)
	if got := e.rescue(other, at(time.Hour), 10); len(got) != 1 {
		t.Fatalf("Rescue returned %v, want nt-1", ids(got))
	}
	waitSignal(t, ch, "Rescue")

	// Signals coalesce: many enqueues while nobody reads do not block the
	// writer, and a reader then finds at least one.
	drain(ch)
	for i := range 50 {
		in := inst("nt-many-"+string(rune('a'+i%26))+string(rune('a'+i/26)), "q-notify")
		e.enqueue(other, base, in)
	}
	waitSignal(t, ch, "many Enqueues")

	// Ending ctx closes the channel.
	cancel()
	waitClosed(t, ch, "Subscribe's channel after its ctx ended")
}

// testInvalidParamsEveryCall: every call refuses nil or invalid
// parameters with ErrInvalid (the checks of their Validate methods), and
// a refused call changes nothing: the claimed attempt keeps its lease,
// no log is stored.
func testInvalidParamsEveryCall(t *testing.T, h Harness) {
	e := setup(t, h)
	e.enqueue(e.s, base, inst("ipe-1", "q-ipe"))
	e.claimOne(e.s, "q-ipe", "w1", base, "ipe-1")
	now := at(time.Second)
	badList := &store.ListDocumentsParams{Collection: store.TriggerCollection, Limit: -1}
	calls := map[string]func() error{
		"Enqueue(nil)": func() error { _, err := e.s.Enqueue(e.ctx, nil); return err },
		"Renew(nil)":   func() error { _, err := e.s.Renew(e.ctx, nil); return err },
		"Renew without an owner": func() error {
			_, err := e.s.Renew(e.ctx, &store.RenewParams{Leases: []store.LeaseRef{{ID: "ipe-1", Attempt: 1}}, Until: at(time.Hour), Now: now})
			return err
		},
		"Renew of a lease without an ID": func() error {
			_, err := e.s.Renew(e.ctx, &store.RenewParams{Owner: "w1", Leases: []store.LeaseRef{{ID: "ipe-1", Attempt: 1}, {Attempt: 1}}, Until: at(time.Hour), Now: now})
			return err
		},
		"Finish(nil)": func() error { _, err := e.s.Finish(e.ctx, nil); return err },
		"Finish without an owner": func() error {
			_, err := e.s.Finish(e.ctx, &store.FinishParams{Now: now, Outcomes: []store.Outcome{{ID: "ipe-1", Attempt: 1, State: store.Completed}}})
			return err
		},
		"Rescue(nil)": func() error { _, err := e.s.Rescue(e.ctx, nil); return err },
		"Rescue with limit -1": func() error {
			_, err := e.s.Rescue(e.ctx, &store.RescueParams{Now: at(time.Hour), Limit: -1})
			return err
		},
		"Cancel(nil)":           func() error { _, err := e.s.Cancel(e.ctx, nil); return err },
		"Prune(nil)":            func() error { _, err := e.s.Prune(e.ctx, nil); return err },
		"Prune with limit -1":   func() error { _, err := e.s.Prune(e.ctx, &store.PruneParams{Now: now, Limit: -1}); return err },
		"Prune keeping -1":      func() error { _, err := e.s.Prune(e.ctx, &store.PruneParams{Now: now, KeepFinished: -1}); return err },
		"Counts(nil)":           func() error { _, err := e.s.Counts(e.ctx, nil); return err },
		"Lag(nil)":              func() error { _, err := e.s.Lag(e.ctx, nil); return err },
		"Lag without Now":       func() error { _, err := e.s.Lag(e.ctx, &store.LagParams{Queue: "q-ipe"}); return err },
		"ListDocuments limit-1": func() error { _, err := e.s.ListDocuments(e.ctx, badList); return err },
		"AppendLogs of nil":     func() error { return e.s.AppendLogs(e.ctx, []*store.LogRecord{nil}) },
		"AppendLogs without an ID": func() error {
			return e.s.AppendLogs(e.ctx, []*store.LogRecord{
				{InstanceID: "ipe-1", Kind: "k", Attempt: 1, Level: store.LevelInfo, Time: now, Message: "kept?"},
				{Kind: "k", Attempt: 1, Level: store.LevelInfo, Time: now, Message: "no instance"},
			})
		},
	}
	for name, call := range calls {
		wantErr(t, name, call(), store.ErrInvalid)
	}
	checkLease(t, e.get(e.s, "ipe-1"), "w1", 1, at(lease))
	logs, err := e.s.LookupLogs(e.ctx, &store.Query{InstanceID: "ipe-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) != 0 {
		t.Fatalf("a refused AppendLogs stored %d records: %+v", len(logs), logs)
	}
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// testAdmin runs the checks of store.Admin, each as a parallel sub-test
// with its own namespace.
func testAdmin(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Retry", testRetry},
		{"RetryAttempts", testRetryAttempts},
		{"RetryRefused", testRetryRefused},
		{"RetryUniqueKey", testRetryUniqueKey},
		{"RetryThenPrune", testRetryThenPrune},
		{"RetryWakes", testRetryWakes},
		{"RetryEvent", testRetryEvent},
		{"Delete", testDelete},
		{"Many", testAdminMany},
		{"Concurrent", testAdminConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// retry calls Retry and checks that it answers once per ID, in order.
func (e *env) retry(s store.Store, p store.RetryParams) []store.AdminResult {
	e.t.Helper()
	res, err := s.Retry(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("Retry(%v): %v", p.IDs, err)
	}
	checkAdminResults(e.t, "Retry", p.IDs, res)
	return res
}

// del calls Delete and checks that it answers once per ID, in order.
func (e *env) del(s store.Store, ids ...string) []store.AdminResult {
	e.t.Helper()
	res, err := s.Delete(e.ctx, &store.DeleteParams{IDs: ids, Now: at(time.Hour), Node: "n-admin"})
	if err != nil {
		e.t.Fatalf("Delete(%v): %v", ids, err)
	}
	checkAdminResults(e.t, "Delete", ids, res)
	return res
}

func checkAdminResults(t testing.TB, op string, ids []string, res []store.AdminResult) {
	t.Helper()
	if len(res) != len(ids) {
		t.Fatalf("%s(%d IDs) returned %d results, want one per ID", op, len(ids), len(res))
	}
	for i, r := range res {
		if r.ID != ids[i] {
			t.Fatalf("%s: result %d names %q, want %q", op, i, r.ID, ids[i])
		}
		if (r.Err == nil) == (r.State == 0) {
			t.Fatalf("%s: result %d (%s) has state %v and error %v; want exactly one of them", op, i, r.ID, r.State, r.Err)
		}
	}
}

// final stores instance id in queue "q-"+id and leaves it in final state
// st (finished at d), after attempt 1, with one log record.
func (e *env) final(id string, st store.State, maxRetries int, d time.Duration) {
	e.t.Helper()
	in := inst(id, "q-"+id)
	in.MaxRetries = maxRetries
	e.enqueue(e.s, base, in)
	if st == store.Canceled {
		// Canceled while it waited in its ready list: a store that leaves
		// the list entry behind must not let it claim the instance again.
		if _, err := e.s.Cancel(e.ctx, &store.CancelParams{ID: id, Now: at(d), Node: "n-cancel"}); err != nil {
			e.t.Fatalf("Cancel(%s): %v", id, err)
		}
	} else {
		e.claimOne(e.s, "q-"+id, "w1", base, id)
		o := store.Outcome{ID: id, Attempt: 1, State: st, Error: "failed"}
		if st == store.Completed {
			o.Error, o.Result = "", []byte(`["done"]`)
		}
		e.finishOK(e.s, "w1", at(d), o)
	}
	if err := e.s.AppendLogs(e.ctx, []*store.LogRecord{logRec(id, "kind-a", store.LevelInfo, time.Millisecond, "ran")}); err != nil {
		e.t.Fatal(err)
	}
}

func testRetry(t *testing.T, h Harness) {
	e := setup(t, h)
	states := []store.State{store.Completed, store.Terminated, store.Canceled, store.TimedOut}
	for _, reset := range []bool{false, true} {
		for _, st := range states {
			id := fmt.Sprintf("r-%v-%v", st, reset)
			e.final(id, st, 0, time.Second)
			before := e.get(e.s, id)
			now, runAt := at(time.Minute), at(time.Hour)
			res := e.retry(e.open(), store.RetryParams{IDs: []string{id}, RunAt: runAt, ResetAttempts: reset, Now: now, Node: "n-admin"})
			if res[0].Err != nil || res[0].State != store.Scheduled {
				t.Fatalf("Retry of a %v instance: %+v, want scheduled", st, res[0])
			}
			want := before.Clone()
			want.State, want.RunAt, want.UpdatedAt = store.Scheduled, runAt, now
			want.FinishedAt, want.Result, want.Error = time.Time{}, nil, ""
			if reset {
				want.Attempt = 0
			}
			checkRecord(t, fmt.Sprintf("%v instance after Retry (reset %v)", st, reset), want, e.get(e.s, id))
			hist := e.history(e.s, &store.Query{InstanceID: id})
			last := hist[len(hist)-1]
			if last.State != store.Scheduled || last.Node != "n-admin" || last.Error != store.RetryMessage("n-admin") || !last.Time.Equal(now) || last.Attempt != want.Attempt {
				t.Fatalf("history after Retry of a %v instance ends with %s; want scheduled by n-admin, error %q, at %v, attempt %d",
					st, fmtHistory(hist[len(hist)-1:]), store.RetryMessage("n-admin"), now, want.Attempt)
			}
			if n := len(e.logs(e.s, &store.Query{InstanceID: id})); n != 1 {
				t.Fatalf("Retry of %s: %d log records, want the 1 it had", id, n)
			}
			// Waiting for RunAt: not claimed before, claimed once at it.
			if res := e.claim(e.s, "q-"+id, "w2", 10, at(30*time.Minute)); len(res.Instances) != 0 || !res.NextRunAt.Equal(runAt) {
				t.Fatalf("claim before the retry's RunAt returned %v, NextRunAt %v; want nothing, %v", ids(res.Instances), res.NextRunAt, runAt)
			}
			got := e.claimOne(e.s, "q-"+id, "w2", runAt, id)
			checkLease(t, got, "w2", want.Attempt+1, runAt.Add(lease))
			if res := e.claim(e.s, "q-"+id, "w3", 10, runAt.Add(time.Minute)); len(res.Instances) != 0 {
				t.Fatalf("second claim after Retry returned %v, want nothing", ids(res.Instances))
			}
			e.finishOK(e.s, "w2", runAt.Add(time.Second), store.Outcome{ID: id, Attempt: want.Attempt + 1, State: store.Completed})
		}
	}
	// Lookups by state follow the retried instances.
	byState := func(st store.State) []string {
		var out []string
		for _, in := range e.instances(e.s, &store.Query{States: []store.State{st}}) {
			out = append(out, in.ID)
		}
		slices.Sort(out)
		return out
	}
	if got := byState(store.Completed); len(got) != 2*len(states) {
		t.Fatalf("completed after retries: %v, want all %d", got, 2*len(states))
	}
	for _, st := range states[1:] {
		if got := byState(st); len(got) != 0 {
			t.Fatalf("%v after retries: %v, want none", st, got)
		}
	}
}

// testRetryAttempts: an instance with no retries left, retried with its
// attempts kept, runs exactly once more; reset, it gets its retries back.
func testRetryAttempts(t *testing.T, h Harness) {
	e := setup(t, h)
	e.final("ra-keep", store.Terminated, 1, time.Second)
	// A second attempt uses its one retry.
	e.retry(e.s, store.RetryParams{IDs: []string{"ra-keep"}, Now: at(2 * time.Second), Node: "n-admin"})
	got := e.claimOne(e.s, "q-ra-keep", "w1", at(2*time.Second), "ra-keep")
	if got.Attempt != 2 || got.RetriesLeft() {
		t.Fatalf("retried (attempts kept) instance claimed as attempt %d, retries left %v; want 2, false", got.Attempt, got.RetriesLeft())
	}
	e.finishOK(e.s, "w1", at(3*time.Second), store.Outcome{ID: "ra-keep", Attempt: 2, State: store.Terminated, Error: "again"})
	// Out of retries: kept attempts still run once more (attempt 3).
	e.retry(e.s, store.RetryParams{IDs: []string{"ra-keep"}, Now: at(4 * time.Second), Node: "n-admin"})
	got = e.claimOne(e.s, "q-ra-keep", "w1", at(4*time.Second), "ra-keep")
	if got.Attempt != 3 {
		t.Fatalf("retried instance out of retries claimed as attempt %d, want 3", got.Attempt)
	}
	// Its lease lapses: out of retries, Rescue terminates it.
	moved := e.rescue(e.s, at(4*time.Second).Add(2*lease), 10)
	if len(moved) != 1 || moved[0].State != store.Terminated {
		t.Fatalf("rescue of a retried attempt with no retries left: %v; want it terminated", moved)
	}
	// Reset: attempt 0, a lapsed lease is retried again.
	e.retry(e.s, store.RetryParams{IDs: []string{"ra-keep"}, ResetAttempts: true, Now: at(10 * time.Minute), Node: "n-admin"})
	got = e.claimOne(e.s, "q-ra-keep", "w1", at(10*time.Minute), "ra-keep")
	if got.Attempt != 1 || !got.RetriesLeft() {
		t.Fatalf("retried (reset) instance claimed as attempt %d, retries left %v; want 1, true", got.Attempt, got.RetriesLeft())
	}
	moved = e.rescue(e.s, at(10*time.Minute).Add(2*lease), 10)
	if len(moved) != 1 || moved[0].State != store.Scheduled {
		t.Fatalf("rescue of a reset retry: %v; want it scheduled again", moved)
	}
}

func testRetryRefused(t *testing.T, h Harness) {
	e := setup(t, h)
	e.enqueue(e.s, base, inst("rr-proc", "q-rr"), inst("rr-sched", "q-rr"))
	e.claimOne(e.s, "q-rr", "w1", base, "rr-proc") // the first in the queue
	e.final("rr-done", store.Completed, 3, time.Second)
	sched, proc := e.get(e.s, "rr-sched"), e.get(e.s, "rr-proc")
	ids := []string{"rr-sched", "rr-unknown", "rr-proc", "rr-done", "rr-done"}
	res := e.retry(e.open(), store.RetryParams{IDs: ids, Now: at(time.Minute), Node: "n-admin"})
	wantErr(t, "Retry of a scheduled instance", res[0].Err, store.ErrNotFinished)
	wantErr(t, "Retry of an unknown instance", res[1].Err, store.ErrNotFound)
	wantErr(t, "Retry of a processing instance", res[2].Err, store.ErrNotFinished)
	if res[3].Err != nil || res[3].State != store.Scheduled {
		t.Fatalf("Retry of a completed instance among refused ones: %+v", res[3])
	}
	wantErr(t, "Retry of an instance given twice (second time)", res[4].Err, store.ErrNotFinished)
	checkRecord(t, "scheduled instance after a refused Retry", sched, e.get(e.s, "rr-sched"))
	checkRecord(t, "processing instance after a refused Retry", proc, e.get(e.s, "rr-proc"))
	if _, err := e.s.Retry(e.ctx, &store.RetryParams{IDs: []string{"rr-done", ""}, Now: at(time.Minute)}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Retry with an empty ID: %v, want ErrInvalid", err)
	}
	if _, err := e.s.Retry(e.ctx, nil); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Retry(nil): %v, want ErrInvalid", err)
	}
	if res, err := e.s.Retry(e.ctx, &store.RetryParams{Now: at(time.Minute)}); err != nil || len(res) != 0 {
		t.Fatalf("Retry of no IDs: %v, %v; want nothing", res, err)
	}
}

// testRetryUniqueKey: Retry neither checks nor takes a unique key.
func testRetryUniqueKey(t *testing.T, h Harness) {
	e := setup(t, h)
	in := inst("ru-1", "q-ru")
	in.UniqueKey, in.UniqueUntil = "ru-key", at(time.Minute)
	e.enqueue(e.s, base, in)
	e.claimOne(e.s, "q-ru", "w1", base, "ru-1")
	e.finishOK(e.s, "w1", at(time.Second), store.Outcome{ID: "ru-1", Attempt: 1, State: store.Completed})
	// The key expires and another instance takes it.
	other := inst("ru-2", "q-ru")
	other.UniqueKey, other.UniqueUntil = "ru-key", at(time.Hour)
	e.enqueue(e.s, at(2*time.Minute), other)
	res := e.retry(e.s, store.RetryParams{IDs: []string{"ru-1"}, Now: at(3 * time.Minute), Node: "n-admin"})
	if res[0].Err != nil {
		t.Fatalf("Retry of an instance whose unique key another holds: %v", res[0].Err)
	}
	if got := e.get(e.s, "ru-1"); got.UniqueKey != "ru-key" || !got.UniqueUntil.Equal(at(time.Minute)) {
		t.Fatalf("retried instance has unique key %q until %v; want its own, ru-key until %v", got.UniqueKey, got.UniqueUntil, at(time.Minute))
	}
	dup := inst("ru-3", "q-ru")
	dup.UniqueKey, dup.UniqueUntil = "ru-key", at(2*time.Hour)
	r, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{dup}, Now: at(4 * time.Minute), Node: "n"})
	if err != nil || !errors.Is(r[0].Err, store.ErrDuplicate) || r[0].ID != "ru-2" {
		t.Fatalf("Enqueue with the key after the retry: %+v, %v; want ErrDuplicate held by ru-2", r, err)
	}
}

// testRetryThenPrune: retention sees a retried instance's latest finish
// only.
func testRetryThenPrune(t *testing.T, h Harness) {
	e := setup(t, h)
	e.final("rp-1", store.Completed, 3, time.Second)
	e.final("rp-2", store.Completed, 3, 2*time.Second)
	e.retry(e.s, store.RetryParams{IDs: []string{"rp-1"}, Now: at(time.Minute), Node: "n-admin"})
	// Pending again: never pruned, however old its last finish was.
	if res := e.prune(e.s, store.PruneParams{Now: at(time.Hour), FinishedBefore: at(90 * time.Second)}); res.Instances != 1 {
		t.Fatalf("Prune FinishedBefore while rp-1 waits again removed %d instances, want 1 (rp-2)", res.Instances)
	}
	e.checkKept("rp-1")
	e.claimOne(e.s, "q-rp-1", "w1", at(2*time.Minute), "rp-1")
	e.finishOK(e.s, "w1", at(10*time.Minute), store.Outcome{ID: "rp-1", Attempt: 2, State: store.Completed})
	e.final("rp-3", store.Completed, 3, 5*time.Minute)
	// Finished at 10 min now, not at 1 s.
	if res := e.prune(e.s, store.PruneParams{Now: at(time.Hour), FinishedBefore: at(6 * time.Minute)}); res.Instances != 1 {
		t.Fatalf("Prune FinishedBefore 6m removed %d instances, want 1 (rp-3)", res.Instances)
	}
	e.checkKept("rp-1")
	if res := e.prune(e.s, store.PruneParams{Now: at(time.Hour), KeepFinished: 1}); res.Instances != 0 {
		t.Fatalf("Prune KeepFinished 1 with one finished instance removed %d", res.Instances)
	}
	e.checkKept("rp-1")
	if res := e.prune(e.s, store.PruneParams{Now: at(time.Hour), FinishedBefore: at(11 * time.Minute)}); res.Instances != 1 {
		t.Fatalf("Prune FinishedBefore 11m removed %d instances, want 1 (rp-1)", res.Instances)
	}
	e.checkGone("rp-1")
}

func testDelete(t *testing.T, h Harness) {
	e := setup(t, h)
	due, later := inst("d-due", "q-d"), inst("d-later", "q-d")
	later.RunAt = at(time.Hour)
	due.UniqueKey, due.UniqueUntil = "d-key", at(24*time.Hour)
	e.enqueue(e.s, base, due, later, inst("d-proc", "q-dp"))
	e.claimOne(e.s, "q-dp", "w1", base, "d-proc")
	e.final("d-done", store.Terminated, 0, time.Second)
	e.final("d-kept", store.Completed, 0, time.Second)
	if err := e.s.AppendLogs(e.ctx, []*store.LogRecord{logRec("d-due", "kind-a", store.LevelInfo, 0, "x"), logRec("d-proc", "kind-a", store.LevelWarn, 0, "y")}); err != nil {
		t.Fatal(err)
	}
	gone := []string{"d-due", "d-later", "d-proc", "d-done"}
	res := e.del(e.open(), "d-due", "d-later", "d-unknown", "d-proc", "d-done", "d-due")
	for i, want := range []store.State{store.Scheduled, store.Scheduled, 0, store.Processing, store.Terminated, 0} {
		if want == 0 {
			wantErr(t, fmt.Sprintf("Delete result %d (%s)", i, res[i].ID), res[i].Err, store.ErrNotFound)
			continue
		}
		if res[i].Err != nil || res[i].State != want {
			t.Fatalf("Delete result %d: %+v, want state %v", i, res[i], want)
		}
	}
	for _, id := range gone {
		e.checkGone(id)
	}
	// Gone from every lookup path, not only by ID.
	for _, in := range e.instances(e.s, &store.Query{}) {
		if slices.Contains(gone, in.ID) {
			t.Fatalf("LookupInstances of everything returns deleted %s", in.ID)
		}
	}
	all := []store.State{store.Scheduled, store.Processing, store.Completed, store.Terminated, store.Canceled, store.TimedOut}
	for _, in := range e.instances(e.s, &store.Query{Kind: "kind-a", States: all}) {
		if slices.Contains(gone, in.ID) {
			t.Fatalf("LookupInstances by states returns deleted %s", in.ID)
		}
	}
	for _, hr := range e.history(e.s, &store.Query{Kind: "kind-a"}) {
		if slices.Contains(gone, hr.InstanceID) {
			t.Fatalf("LookupHistory by kind returns a record of deleted %s", hr.InstanceID)
		}
	}
	for _, hr := range e.history(e.s, &store.Query{Since: base}) {
		if slices.Contains(gone, hr.InstanceID) {
			t.Fatalf("LookupHistory by time returns a record of deleted %s", hr.InstanceID)
		}
	}
	for _, l := range e.logs(e.s, &store.Query{Kind: "kind-a"}) {
		if slices.Contains(gone, l.InstanceID) {
			t.Fatalf("LookupLogs by kind returns a record of deleted %s", l.InstanceID)
		}
	}
	e.checkKept("d-kept")
	// Deleted while it ran: its owner's renew reports the lease lost, its
	// finish is refused, and nobody rescues it.
	r, err := e.s.Renew(e.ctx, &store.RenewParams{Owner: "w1", Leases: []store.LeaseRef{{ID: "d-proc", Attempt: 1}}, Now: at(2 * time.Hour), Until: at(3 * time.Hour)})
	if err != nil || len(r.Lost) != 1 || r.Lost[0].ID != "d-proc" {
		t.Fatalf("Renew of a deleted running instance: %+v, %v; want it lost", r, err)
	}
	fr := e.finish(e.s, "w1", at(2*time.Hour), store.Outcome{ID: "d-proc", Attempt: 1, State: store.Completed})
	wantErr(t, "Finish of a deleted running instance", fr[0].Err, store.ErrLeaseLost)
	e.absent(e.s, "d-proc")
	if moved := e.rescue(e.s, at(10*time.Hour), 10); len(moved) != 0 {
		t.Fatalf("Rescue after deleting a running instance moved %v", ids(moved))
	}
	// Nothing left to claim, and the unique key is free.
	if res := e.claim(e.s, "q-d", "w2", 10, at(2*time.Hour)); len(res.Instances) != 0 || !res.NextRunAt.IsZero() {
		t.Fatalf("claim after deleting the queue's instances: %v, NextRunAt %v; want nothing", ids(res.Instances), res.NextRunAt)
	}
	next := inst("d-next", "q-d")
	next.UniqueKey, next.UniqueUntil = "d-key", at(25*time.Hour)
	e.enqueue(e.s, at(2*time.Hour), next)
	// An ID can be used again, as a new instance.
	again := inst("d-due", "q-d")
	again.CreatedAt = at(2 * time.Hour)
	if r := e.enqueue(e.s, at(2*time.Hour), again); r[0].Existed {
		t.Fatalf("Enqueue of a deleted instance's ID reports it existed")
	}
	got := e.claim(e.s, "q-d", "w2", 10, at(2*time.Hour))
	checkIDs(t, "claim after enqueueing into the emptied queue", got.Instances, "d-next", "d-due")
	if got.Instances[1].Attempt != 1 {
		t.Fatalf("reused ID claimed as attempt %d, want 1", got.Instances[1].Attempt)
	}
	if h := e.history(e.s, &store.Query{InstanceID: "d-due"}); len(h) != 3 {
		t.Fatalf("history of the reused ID: %s; want only the new instance's 3 records", fmtHistory(h))
	}
	// Retention after deletes keeps working and counts nothing twice.
	if res := e.prune(e.s, store.PruneParams{Now: at(100 * time.Hour), FinishedBefore: at(99 * time.Hour)}); res.Instances != 1 {
		t.Fatalf("Prune after deletes removed %d instances, want 1 (d-kept)", res.Instances)
	}
	if _, err := e.s.Delete(e.ctx, &store.DeleteParams{IDs: []string{""}}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Delete of an empty ID: %v, want ErrInvalid", err)
	}
	if _, err := e.s.Delete(e.ctx, nil); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Delete(nil): %v, want ErrInvalid", err)
	}
}

// testAdminMany retries and deletes a few hundred instances per call, so
// stores that split a call into several writes are exercised.
func testAdminMany(t *testing.T, h Harness) {
	e := setup(t, h)
	const n = 300
	var all []string
	var ins []*store.Instance
	for i := range n {
		id := fmt.Sprintf("am-%03d", i)
		all = append(all, id)
		ins = append(ins, inst(id, "q-am"))
	}
	e.enqueue(e.s, base, ins...)
	claimed := e.claim(e.s, "q-am", "w1", n, base)
	if len(claimed.Instances) != n {
		t.Fatalf("claimed %d of %d", len(claimed.Instances), n)
	}
	var outs []store.Outcome
	for _, id := range all {
		outs = append(outs, store.Outcome{ID: id, Attempt: 1, State: store.Terminated, Error: "boom"})
	}
	e.finishOK(e.s, "w1", at(time.Second), outs...)
	res := e.retry(e.open(), store.RetryParams{IDs: all, ResetAttempts: true, Now: at(time.Minute), Node: "n-admin"})
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("Retry of %s among %d: %v", r.ID, n, r.Err)
		}
	}
	if got := e.instances(e.s, &store.Query{States: []store.State{store.Terminated}}); len(got) != 0 {
		t.Fatalf("%d still terminated after retrying all", len(got))
	}
	again := e.claim(e.s, "q-am", "w1", 2*n, at(time.Minute))
	if len(again.Instances) != n {
		t.Fatalf("claimed %d of %d retried instances", len(again.Instances), n)
	}
	res = e.del(e.open(), all...)
	for _, r := range res {
		if r.Err != nil || r.State != store.Processing {
			t.Fatalf("Delete of %s among %d: %+v, want it deleted while processing", r.ID, n, r)
		}
	}
	if got := e.instances(e.s, &store.Query{Kind: "kind-a"}); len(got) != 0 {
		t.Fatalf("%d instances left after deleting all", len(got))
	}
	if got := e.history(e.s, &store.Query{Kind: "kind-a"}); len(got) != 0 {
		t.Fatalf("%d history records left after deleting all", len(got))
	}
	var refs []store.LeaseRef
	for _, id := range all {
		refs = append(refs, store.LeaseRef{ID: id, Attempt: 1})
	}
	r, err := e.s.Renew(e.ctx, &store.RenewParams{Owner: "w1", Leases: refs, Now: at(2 * time.Minute), Until: at(time.Hour)})
	if err != nil || len(r.Lost) != n {
		t.Fatalf("Renew after deleting all: %d lost, %v; want %d", len(r.Lost), err, n)
	}
}

// testRetryWakes: a retry that makes an instance ready wakes the queue's
// subscribers on another handle.
func testRetryWakes(t *testing.T, h Harness) {
	e := setup(t, h)
	n, ok := e.s.(store.Notifier)
	if !ok {
		t.Log("store does not implement store.Notifier; nothing to check")
		return
	}
	e.final("rw-1", store.Terminated, 0, time.Second)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, err := n.Subscribe(ctx, "q-rw-1")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	drain(ch)
	e.retry(e.open(), store.RetryParams{IDs: []string{"rw-1"}, Now: at(time.Minute), Node: "n-admin"})
	waitSignal(t, ch, "Retry from another handle")
}

// testAdminConcurrent deletes and retries instances from one handle while
// claimers on other handles run them: a deleted instance is gone for good
// (its owner's Finish is refused, and only for deleted ones), every other
// ends Completed, and each retry runs exactly once more.
func testAdminConcurrent(t *testing.T, h Harness) {
	e := setup(t, h)
	const n, queue = 150, "q-ac"
	var all []string
	var ins []*store.Instance
	for i := range n {
		id := fmt.Sprintf("ac-%03d", i)
		all = append(all, id)
		ins = append(ins, inst(id, queue))
	}
	e.enqueue(e.s, base, ins...)
	var doomed, kept []string
	for i, id := range all {
		if i%3 == 0 {
			doomed = append(doomed, id)
		} else {
			kept = append(kept, id)
		}
	}
	now := at(time.Second)
	var (
		mu   sync.Mutex
		lost = map[string]bool{}
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	// work claims and completes until the queue stays empty after stop
	// is closed.
	work := func(stop <-chan struct{}) {
		var wg sync.WaitGroup
		for c := range 3 {
			s := e.open()
			owner := fmt.Sprintf("w%d", c)
			wg.Go(func() {
				for {
					stopped := false
					select {
					case <-stop:
						stopped = true
					default:
					}
					res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: queue, Owner: owner, Limit: 4, Now: now, LeaseUntil: now.Add(lease)})
					if err != nil {
						fail(fmt.Errorf("claimer %s: %w", owner, err))
						return
					}
					if len(res.Instances) == 0 {
						if stopped {
							return
						}
						runtime.Gosched()
						continue
					}
					var outs []store.Outcome
					for _, in := range res.Instances {
						outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed})
					}
					fr, err := s.Finish(e.ctx, &store.FinishParams{Owner: owner, Now: now, Outcomes: outs})
					if err != nil {
						fail(fmt.Errorf("claimer %s: Finish: %w", owner, err))
						return
					}
					for i, r := range fr {
						switch {
						case errors.Is(r.Err, store.ErrLeaseLost):
							mu.Lock()
							lost[outs[i].ID] = true
							mu.Unlock()
						case r.Err != nil:
							fail(fmt.Errorf("claimer %s: Finish %s: %w", owner, outs[i].ID, r.Err))
						}
					}
				}
			})
		}
		wg.Wait()
	}
	// Phase 1: delete a third while the queue is worked.
	stop := make(chan struct{})
	admin := e.open()
	go func() {
		defer close(stop)
		for i := 0; i < len(doomed); i += 5 {
			res, err := admin.Delete(e.ctx, &store.DeleteParams{IDs: doomed[i:min(i+5, len(doomed))], Now: now, Node: "n-admin"})
			if err != nil {
				fail(fmt.Errorf("delete: %w", err))
				return
			}
			for _, r := range res {
				if r.Err != nil {
					fail(fmt.Errorf("delete %s: %w", r.ID, r.Err))
				}
			}
		}
	}()
	work(stop)
	if len(errs) > 0 {
		t.Fatalf("while deleting: %v", errs)
	}
	for id := range lost {
		if !slices.Contains(doomed, id) {
			t.Fatalf("Finish of %s was refused, but it was not deleted", id)
		}
	}
	for _, id := range doomed {
		e.absent(e.s, id)
		if h := e.history(e.s, &store.Query{InstanceID: id}); len(h) != 0 {
			t.Fatalf("deleted %s has %d history records", id, len(h))
		}
	}
	got := e.instances(e.s, &store.Query{States: []store.State{store.Scheduled, store.Processing, store.Completed}})
	if len(got) != len(kept) {
		t.Fatalf("%d instances left after deleting %d of %d, want %d", len(got), len(doomed), n, len(kept))
	}
	for _, in := range got {
		if in.State != store.Completed || in.Attempt != 1 {
			t.Fatalf("kept instance %s: %v attempt %d, want completed in attempt 1", in.ID, in.State, in.Attempt)
		}
	}
	// Phase 2: retry the rest, a few at a time, while the queue is worked.
	stop = make(chan struct{})
	go func() {
		defer close(stop)
		for i := 0; i < len(kept); i += 7 {
			res, err := admin.Retry(e.ctx, &store.RetryParams{IDs: kept[i:min(i+7, len(kept))], Now: now, Node: "n-admin"})
			if err != nil {
				fail(fmt.Errorf("retry: %w", err))
				return
			}
			for _, r := range res {
				if r.Err != nil {
					fail(fmt.Errorf("retry %s: %w", r.ID, r.Err))
				}
			}
		}
	}()
	work(stop)
	if len(errs) > 0 {
		t.Fatalf("while retrying: %v", errs)
	}
	for _, id := range kept {
		in := e.get(e.s, id)
		if in.State != store.Completed || in.Attempt != 2 {
			t.Fatalf("retried %s: %v attempt %d, want completed in attempt 2", id, in.State, in.Attempt)
		}
		retries := 0
		for _, h := range e.history(e.s, &store.Query{InstanceID: id}) {
			if h.Error == store.RetryMessage("n-admin") {
				retries++
			}
		}
		if retries != 1 {
			t.Fatalf("%s has %d retry records, want 1", id, retries)
		}
	}
}

// testRetryEvent: a retry is a state change like any other, so the feed
// of events has it (a delete removes history and has none).
func testRetryEvent(t *testing.T, h Harness) {
	e := setup(t, h)
	e.final("re-1", store.Canceled, 0, time.Second)
	ch, _ := e.follow(e.open(), store.FollowParams{Cursor: e.cursor(e.s), InstanceID: "re-1"})
	e.retry(e.open(), store.RetryParams{IDs: []string{"re-1"}, ResetAttempts: true, Now: at(time.Minute), Node: "n-admin"})
	ev := next(t, ch, "the retry's event")
	if ev.InstanceID != "re-1" || ev.State != store.Scheduled || ev.Error != store.RetryMessage("n-admin") || ev.Node != "n-admin" || !ev.Time.Equal(at(time.Minute)) {
		t.Fatalf("event of a retry: %+v; want re-1 scheduled by n-admin at %v, error %q", ev, at(time.Minute), store.RetryMessage("n-admin"))
	}
}

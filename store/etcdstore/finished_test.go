package etcdstore_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// finishAll finishes the attempts ins (attempt 1, claimed by owner) as
// Completed in one Finish call at now.
func finishAll(t *testing.T, s store.Store, owner string, now time.Time, ids ...string) {
	t.Helper()
	var os []store.Outcome
	for _, id := range ids {
		os = append(os, store.Outcome{ID: id, Attempt: 1, State: store.Completed})
	}
	res, err := s.Finish(t.Context(), &store.FinishParams{Owner: owner, Now: now, Outcomes: os})
	if err != nil {
		t.Fatalf("finish %v by %s: %v", ids, owner, err)
	}
	for _, r := range res {
		if r.Err != nil || r.State != store.Completed {
			t.Fatalf("finish by %s: %+v", owner, r)
		}
	}
}

// finishedKeys returns the keys of namespace ns's finished index, both
// layouts: layout 2's after f/, the batches as fb/<rest>.
func finishedKeys(t *testing.T, cli *clientv3.Client, ns string) []string {
	return append(indexKeys(t, cli, ns, "f/"), prefixed("fb/", indexKeys(t, cli, ns, "fb/"))...)
}

// createdKeys is finishedKeys of the creation index (ic/, icb/).
func createdKeys(t *testing.T, cli *clientv3.Client, ns string) []string {
	return append(indexKeys(t, cli, ns, "ic/"), prefixed("icb/", indexKeys(t, cli, ns, "icb/"))...)
}

func prefixed(p string, ks []string) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = p + k
	}
	return out
}

// indexKeys returns the keys of namespace ns under index, after it.
func indexKeys(t *testing.T, cli *clientv3.Client, ns, index string) []string {
	t.Helper()
	p := keyPrefix(ns) + index
	resp, err := cli.Get(t.Context(), p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key)[len(p):])
	}
	return out
}

// An Enqueue of a batch writes one creation-index key for all of it, and
// a Finish one finished-index key, not one per instance: what a job
// costs etcd is mostly the keys it writes.
func TestOneIndexKeyPerBatch(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	s := open(t, ns)
	cli := newClient(t, testserver.Etcd(t))
	var ids []string
	var ins []*store.Instance
	for i := range 10 {
		id := fmt.Sprintf("j%02d", i)
		ids = append(ids, id)
		ins = append(ins, testInst(id))
	}
	mustEnqueue(t, s, ins...)
	if ck := createdKeys(t, cli, ns); len(ck) != 1 {
		t.Fatalf("creation index after one Enqueue of 10: %d keys %v; want 1", len(ck), ck)
	}
	if got := claimN(t, s, "w", 10); len(got) != 10 {
		t.Fatalf("claimed %d; want 10", len(got))
	}
	finishAll(t, s, "w", t0.Add(time.Second), ids...)
	if fk := finishedKeys(t, cli, ns); len(fk) != 1 {
		t.Fatalf("finished index after one Finish of 10: %d keys %v; want 1", len(fk), fk)
	}
	res, err := s.Prune(t.Context(), &store.PruneParams{KeepFinished: 4})
	if err != nil || res.Instances != 6 {
		t.Fatalf("prune keeping 4: %+v, %v; want 6 instances removed", res, err)
	}
	left, err := s.LookupInstances(t.Context(), &store.Query{States: []store.State{store.Completed}})
	if err != nil || len(left) != 4 {
		t.Fatalf("completed after the prune: %d, %v; want 4", len(left), err)
	}
	if fk := finishedKeys(t, cli, ns); len(fk) != 1 {
		t.Fatalf("finished index after the prune: %v; want the batch, rewritten with the 4 left", fk)
	}
}

// An entry of a finished batch whose instance ran again (Retry) or was
// deleted is stale: Prune drops it without counting it or touching the
// instance, removes the others, and the instance that ran again is pruned
// by its own later entry.
func TestPruneSkipsStaleFinishedEntries(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	s := open(t, ns)
	cli := newClient(t, testserver.Etcd(t))
	mustEnqueue(t, s, testInst("a"), testInst("b"), testInst("c"), testInst("d"))
	claimN(t, s, "w", 4)
	finishAll(t, s, "w", t0.Add(time.Second), "a", "b", "c", "d")
	if r, err := s.Retry(t.Context(), &store.RetryParams{IDs: []string{"b"}, Now: t0.Add(2 * time.Second), ResetAttempts: true}); err != nil || r[0].Err != nil {
		t.Fatalf("retry b: %+v, %v", r, err)
	}
	if r, err := s.Delete(t.Context(), &store.DeleteParams{IDs: []string{"d"}}); err != nil || r[0].Err != nil {
		t.Fatalf("delete d: %+v, %v", r, err)
	}
	res, err := s.Prune(t.Context(), &store.PruneParams{FinishedBefore: t0.Add(time.Hour)})
	if err != nil || res.Instances != 2 {
		t.Fatalf("prune: %+v, %v; want a and c removed", res, err)
	}
	if fk := finishedKeys(t, cli, ns); len(fk) != 0 {
		t.Fatalf("finished index after the prune: %v; want none (b is scheduled)", fk)
	}
	in, err := s.LookupInstances(t.Context(), &store.Query{InstanceID: "b"})
	if err != nil || len(in) != 1 || in[0].State != store.Scheduled {
		t.Fatalf("b after the prune: %v, %v; want it scheduled", in, err)
	}
	if r, err := s.Claim(t.Context(), &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: t0.Add(3 * time.Second), LeaseUntil: t0.Add(time.Hour)}); err != nil || len(r.Instances) != 1 {
		t.Fatalf("claim of b again: %+v, %v", r, err)
	}
	finishAll(t, s, "w", t0.Add(4*time.Second), "b")
	res, err = s.Prune(t.Context(), &store.PruneParams{KeepFinished: 1})
	if err != nil || res.Instances != 0 {
		t.Fatalf("prune keeping 1 of 1: %+v, %v; want nothing removed", res, err)
	}
	res, err = s.Prune(t.Context(), &store.PruneParams{FinishedBefore: t0.Add(time.Hour)})
	if err != nil || res.Instances != 1 || len(finishedKeys(t, cli, ns)) != 0 {
		t.Fatalf("prune of b: %+v, %v, index %v; want b removed, the index empty", res, err, finishedKeys(t, cli, ns))
	}
}

// toLayout2 rewrites namespace ns's finished and creation indexes as
// layout 2 wrote them (before issue 34's batches): one key f/<finished>/<id>
// = id and one key ic/<created><seq> = <kind>/<id> per instance. Every
// other key of an instance is the same in both layouts.
func toLayout2(t *testing.T, cli *clientv3.Client, ns string) {
	t.Helper()
	p := keyPrefix(ns) + "f/"
	resp, err := cli.Get(t.Context(), keyPrefix(ns)+"fb/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	// (None with the code before the batches: its namespace is layout 2's.)
	for _, kv := range resp.Kvs {
		var ents []struct {
			ID string `json:"i"`
			T  int64  `json:"t"`
		}
		if err := json.Unmarshal(kv.Value, &ents); err != nil {
			t.Fatalf("finished batch %s: %v", kv.Key, err)
		}
		ops := []clientv3.Op{clientv3.OpDelete(string(kv.Key))}
		for _, e := range ents {
			ops = append(ops, clientv3.OpPut(p+fmt.Sprintf("%016x", uint64(e.T)^1<<63)+"/"+url.PathEscape(e.ID), e.ID))
		}
		if _, err := cli.Txn(t.Context()).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range finishedKeys(t, cli, ns) {
		if len(k) <= 16 || k[16] != '/' {
			t.Fatalf("finished index key %q is not layout 2's <time>/<id>", k)
		}
	}
	p = keyPrefix(ns) + "ic/"
	resp, err = cli.Get(t.Context(), keyPrefix(ns)+"icb/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		var ents []struct {
			C    int64  `json:"c"`
			S    uint64 `json:"s"`
			K, I string
		}
		if err := json.Unmarshal(kv.Value, &ents); err != nil {
			t.Fatalf("creation batch %s: %v", kv.Key, err)
		}
		ops := []clientv3.Op{clientv3.OpDelete(string(kv.Key))}
		for _, e := range ents {
			ops = append(ops, clientv3.OpPut(p+fmt.Sprintf("%016x%016x", uint64(e.C)^1<<63, e.S), url.PathEscape(e.K)+"/"+url.PathEscape(e.I)))
		}
		if _, err := cli.Txn(t.Context()).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range createdKeys(t, cli, ns) {
		if len(k) != 32 {
			t.Fatalf("creation index key %q is not layout 2's <time><seq>", k)
		}
	}
}

// TestUpgradeFromLayout2: a namespace that layout 2 left with pending,
// running and finished instances (one creation-index and one
// finished-index key each) keeps working under the batched indexes: the pending one is claimed
// and finished beside one enqueued after the upgrade, the running one
// finished by its owner; every history and lookup reads as before, newest
// first across both layouts, by page and time range; the counts stay
// exact; and retention removes the finished instances of both layouts
// oldest first (by time, then by count), their logs with them, until both
// indexes are empty.
func TestUpgradeFromLayout2(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	cleanup(t, ns)
	cli := newClient(t, testserver.Etcd(t))
	before := open(t, ns)
	mustEnqueue(t, before, testInst("a"), testInst("b"), testInst("c"), testInst("run"))
	if got := claimN(t, before, "w1", 4); len(got) != 4 {
		t.Fatalf("claimed %d; want 4", len(got))
	}
	finishAll(t, before, "w1", t0.Add(1*time.Second), "a", "b")
	finishAll(t, before, "w1", t0.Add(2*time.Second), "c")
	pend := testInst("pend")
	pend.RunAt, pend.CreatedAt = t0.Add(time.Second), t0.Add(time.Second)
	mustEnqueue(t, before, pend)
	if err := before.AppendLogs(ctx, []*store.LogRecord{{InstanceID: "a", Kind: "k", Attempt: 1, Level: store.LevelInfo, Time: t0.Add(time.Second), Message: "a ran"}}); err != nil {
		t.Fatal(err)
	}
	toLayout2(t, cli, ns)
	if fk := finishedKeys(t, cli, ns); len(fk) != 3 {
		t.Fatalf("layout 2's finished index: %v; want a key for each of a, b, c", fk)
	}
	if ck := createdKeys(t, cli, ns); len(ck) != 5 {
		t.Fatalf("layout 2's creation index: %v; want a key for each of the 5 instances", ck)
	}

	// The upgraded process: a new handle on the same namespace.
	s := open(t, ns)
	history := func(id string, want ...store.State) {
		t.Helper()
		hs, err := s.LookupHistory(ctx, &store.Query{InstanceID: id})
		if err != nil {
			t.Fatal(err)
		}
		var got []store.State
		for _, h := range hs {
			got = append(got, h.State)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("history of %s: %v; want %v", id, got, want)
		}
	}
	done := []store.State{store.Created, store.Scheduled, store.Processing, store.Completed}
	for _, id := range []string{"a", "b", "c"} {
		history(id, done...)
	}
	history("run", store.Created, store.Scheduled, store.Processing)
	history("pend", store.Created, store.Scheduled)
	completed := func(want ...string) {
		t.Helper()
		ins, err := s.LookupInstances(ctx, &store.Query{States: []store.State{store.Completed}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range ins {
			got = append(got, in.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("completed instances: %v; want %v", got, want)
		}
	}
	completed("a", "b", "c")

	mustEnqueue(t, s, testInst("new"))
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w2", Limit: 5, Now: t0.Add(time.Minute), LeaseUntil: t0.Add(time.Hour)})
	if err != nil || len(res.Instances) != 2 {
		t.Fatalf("claim after the upgrade: %+v, %v; want pend and new", res, err)
	}
	finishAll(t, s, "w1", t0.Add(2*time.Minute), "run")
	finishAll(t, s, "w2", t0.Add(2*time.Minute), "pend", "new")
	for _, id := range []string{"a", "b", "c", "run", "pend", "new"} {
		history(id, done...)
	}
	completed("a", "b", "c", "new", "pend", "run")
	newest := func(q *store.Query, want ...string) {
		t.Helper()
		ins, err := s.LookupInstances(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range ins {
			got = append(got, in.ID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("lookup %+v: %v; want %v", *q, got, want)
		}
	}
	// Newest first over both layouts: pend (t0+1s), then new (t0, enqueued
	// last), then the four of layout 2 (t0) in reverse enqueue order.
	newest(&store.Query{}, "pend", "new", "run", "c", "b", "a")
	newest(&store.Query{Limit: 3}, "pend", "new", "run")
	newest(&store.Query{Until: t0.Add(time.Second), Limit: 2}, "new", "run")
	newest(&store.Query{Since: t0.Add(time.Second)}, "pend")
	if hs, err := s.LookupHistory(ctx, &store.Query{Kind: "k"}); err != nil || len(hs) != 24 {
		t.Fatalf("history of kind k: %d records, %v; want 24", len(hs), err)
	}
	if ck := createdKeys(t, cli, ns); len(ck) != 6 || strings.Count(strings.Join(ck, " "), "icb/") != 1 {
		t.Fatalf("creation index: %v; want layout 2's 5 keys and 1 batch", ck)
	}
	counts, err := s.Counts(ctx, &store.CountsParams{})
	if err != nil || len(counts) != 1 || counts[0].States[store.Completed] != 6 {
		t.Fatalf("counts: %+v, %v; want 6 completed", counts, err)
	}
	if fk := finishedKeys(t, cli, ns); len(fk) != 5 || strings.Count(strings.Join(fk, " "), "fb/") != 2 {
		t.Fatalf("finished index: %v; want layout 2's 3 keys and 2 batches", fk)
	}

	// Retention over both layouts: finished before t0+1.5s is a and b
	// (layout 2, with a's log), then keeping 3 of the 4 left is c
	// (layout 2, the oldest), then the rest (batches).
	pr, err := s.Prune(ctx, &store.PruneParams{FinishedBefore: t0.Add(1500 * time.Millisecond)})
	if err != nil || pr.Instances != 2 || pr.Logs != 1 {
		t.Fatalf("prune finished before t0+1.5s: %+v, %v; want a and b, and a's log", pr, err)
	}
	completed("c", "new", "pend", "run")
	pr, err = s.Prune(ctx, &store.PruneParams{KeepFinished: 3})
	if err != nil || pr.Instances != 1 {
		t.Fatalf("prune keeping 3: %+v, %v; want c removed", pr, err)
	}
	completed("new", "pend", "run")
	if fk := finishedKeys(t, cli, ns); len(fk) != 2 {
		t.Fatalf("finished index: %v; want the 2 batches only", fk)
	}
	pr, err = s.Prune(ctx, &store.PruneParams{FinishedBefore: t0.Add(time.Hour)})
	if err != nil || pr.Instances != 3 {
		t.Fatalf("prune of the rest: %+v, %v; want 3", pr, err)
	}
	if fk, ck := finishedKeys(t, cli, ns), createdKeys(t, cli, ns); len(fk)+len(ck) != 0 {
		t.Fatalf("indexes after every finished instance went: finished %v, creation %v", fk, ck)
	}
	counts, err = s.Counts(ctx, &store.CountsParams{})
	if err != nil || len(counts) > 0 && counts[0].States[store.Completed] != 0 {
		t.Fatalf("counts after the prune: %+v, %v; want no completed", counts, err)
	}
}

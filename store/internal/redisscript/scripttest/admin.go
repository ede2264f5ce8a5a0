package scripttest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// testAdminDeleteKeys: Delete removes what an instance owns under the
// namespace (spec, state, run-set membership, scheduled-set member, log
// list and log entries, kind count and bucket, unique key); what is left
// (ready-list, lease-batch and done-list members) points at nothing and is
// dropped where it is read, and the history entries are freed by
// retention's sweep.
func testAdminDeleteKeys(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	later := inst("later", "q")
	later.RunAt = at(time.Hour)
	held := inst("held", "q")
	held.UniqueKey, held.UniqueUntil = "u", at(time.Hour)
	e.enqueue(base, inst("run", "q"), inst("done", "q"), held, later)
	e.claim("q", "w", 2, base, at(time.Minute)) // run, done
	e.done("w", at(time.Second), "done")
	// A history entry after every finish: freed only because Delete moves
	// the sweep's horizon.
	e.claim("q", "w", 1, at(5*time.Second), at(time.Minute)) // held
	if err := e.s.AppendLogs(ctx, []*store.LogRecord{
		{InstanceID: "run", Kind: "kind-a", Level: store.LevelInfo, Time: base, Message: "r"},
		{InstanceID: "done", Kind: "kind-a", Level: store.LevelInfo, Time: base, Message: "d"},
	}); err != nil {
		t.Fatal(err)
	}
	res, err := e.s.Delete(ctx, &store.DeleteParams{IDs: []string{"run", "done", "held", "later"}, Now: at(6 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("Delete %s: %v", r.ID, r.Err)
		}
	}
	keys, err := e.rc.Keys(ctx, e.keys.Prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	// What may stay: counters, streams, sets of names, lease batches,
	// ready lists, their levels and head hints, done lists.
	keep := []string{"ctr", "cnt", "hist", "logs", "lease", "kinds", "queues", "q:q:r:", "q:q:p", "q:q:h", "done:"}
	for _, k := range keys {
		name := strings.TrimPrefix(k, e.keys.Prefix)
		if !slices.ContainsFunc(keep, func(p string) bool { return strings.HasPrefix(name, p) }) {
			t.Errorf("Delete of every instance left key %q", name)
		}
	}
	if n, err := e.rc.XLen(ctx, e.key("logs")).Result(); err != nil || n != 0 {
		t.Errorf("logs stream holds %d entries after deleting every instance (%v), want 0", n, err)
	}
	if f, err := e.rc.HKeys(ctx, e.key("ctr")).Result(); err != nil || slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, "k:") }) {
		t.Errorf("ctr fields %v (%v): a kind count is left", f, err)
	}
	rows, err := e.s.Counts(ctx, &store.CountsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Total() != 0 {
			t.Errorf("Counts after deleting every instance: %s/%s has %v", r.Queue, r.Kind, r.States)
		}
	}
	// Retention passes over the done-list member left behind, removes
	// nothing, and its sweep frees the history entries.
	if r := e.prune(&store.PruneParams{Now: at(time.Hour), FinishedBefore: at(time.Hour)}); r.Instances != 0 {
		t.Errorf("Prune after deleting every instance removed %d", r.Instances)
	}
	if n, err := e.rc.XLen(ctx, e.key("hist")).Result(); err != nil || n != 0 {
		t.Errorf("history stream holds %d entries after deleting every instance and pruning (%v), want 0", n, err)
	}
	if r := e.claim("q", "w2", 10, at(2*time.Hour), at(3*time.Hour)); len(r.Instances) != 0 {
		t.Errorf("claim after deleting every instance: %v", ids(r.Instances))
	}
	if n, err := e.rc.Exists(ctx, e.keys.Ready("q", 0)).Result(); err != nil || n != 0 {
		t.Errorf("ready list still there after a claim dropped its deleted members (%d, %v)", n, err)
	}
}

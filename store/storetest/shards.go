package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// shardTask returns the parent "<name>" of a sharded task of n shards in
// queue, due at parentAt, and its shards, due at base.
func shardTask(name, queue string, n int, parentAt time.Time) (*store.Instance, []*store.Instance) {
	p := inst(name, queue)
	p.ShardCount = n
	p.RunAt = parentAt
	shards := make([]*store.Instance, n)
	for i := range shards {
		s := inst(store.ShardID(name, i), queue)
		s.Parent, s.ShardIndex, s.ShardCount = name, i, n
		s.Args = fmt.Appendf(nil, "[%d]", i)
		shards[i] = s
	}
	return p, shards
}

// checkShardFields fails unless in has the shard fields of want.
func checkShardFields(t *testing.T, what string, in, want *store.Instance) {
	t.Helper()
	if in.Parent != want.Parent || in.ShardIndex != want.ShardIndex || in.ShardCount != want.ShardCount {
		t.Fatalf("%s: instance %s has Parent %q, ShardIndex %d, ShardCount %d; want %q, %d, %d",
			what, in.ID, in.Parent, in.ShardIndex, in.ShardCount, want.Parent, want.ShardIndex, want.ShardCount)
	}
}

// testShards pins the shard fields (Instance.Parent, ShardIndex,
// ShardCount) and Query.Parent: the fields come back from every read, on
// every handle, through claim, finish and rescue; a lookup by parent
// returns exactly that parent's shards, newest first, narrowed by the
// query's other fields and limit, and pages.
func testShards(t *testing.T, h Harness) {
	e := setup(t, h)
	p, shards := shardTask("sh-parent", "q-sh", 3, at(time.Hour))
	shards[1].Labels = []string{"region=eu"}
	shards[2].Metadata = map[string]string{"k": "v"}
	p2, shards2 := shardTask("sh-other", "q-sh2", 2, at(time.Hour))
	plain := inst("sh-plain", "q-sh")
	e.enqueue(e.s, base, append(append([]*store.Instance{p}, shards...), plain)...)
	e.enqueue(e.s, base, append([]*store.Instance{p2}, shards2...)...)

	other := e.open()
	want := map[string]*store.Instance{p.ID: p, plain.ID: plain, p2.ID: p2}
	for _, s := range append(shards, shards2...) {
		want[s.ID] = s
	}
	for id, w := range want {
		checkShardFields(t, "Lookup", e.get(e.s, id), w)
		checkShardFields(t, "Lookup on a second handle", e.get(other, id), w)
	}

	// By parent: the shards, newest first (one enqueue, so by Seq).
	checkIDs(t, "Query{Parent}", e.instances(other, &store.Query{Parent: p.ID}), shards[2].ID, shards[1].ID, shards[0].ID)
	checkIDs(t, "Query{Parent: other}", e.instances(other, &store.Query{Parent: p2.ID}), shards2[1].ID, shards2[0].ID)
	checkIDs(t, "Query{Parent, Limit 2}", e.instances(other, &store.Query{Parent: p.ID, Limit: 2}), shards[2].ID, shards[1].ID)
	checkIDs(t, "Query{Parent: unknown}", e.instances(other, &store.Query{Parent: "sh-none"}))
	checkIDs(t, "Query{Parent: a shard}", e.instances(other, &store.Query{Parent: shards[0].ID}))
	checkIDs(t, "Query{Parent: an unsharded instance}", e.instances(other, &store.Query{Parent: plain.ID}))
	checkIDs(t, "Query{Parent, Kind other}", e.instances(other, &store.Query{Parent: p.ID, Kind: "kind-b"}))
	checkIDs(t, "Query{Parent, InstanceID}", e.instances(other, &store.Query{Parent: p.ID, InstanceID: shards[1].ID}), shards[1].ID)
	checkIDs(t, "Query{Parent, InstanceID of another}", e.instances(other, &store.Query{Parent: p.ID, InstanceID: shards2[1].ID}))

	// Claims carry the fields; a lookup by parent and state follows the
	// shards' states. The parent waits (due in an hour).
	c := e.claimWith(other, "q-sh", "w1", 10, at(time.Second), nil, []string{"region=us"})
	if len(c.Instances) != 3 { // shards 0 and 2, and the plain one; shard 1 needs a label
		t.Fatalf("Claim returned %v, want shards 0 and 2 and sh-plain", ids(c.Instances))
	}
	for _, in := range c.Instances {
		checkShardFields(t, "Claim", in, want[in.ID])
	}
	checkIDs(t, "Query{Parent, Scheduled}", e.instances(e.s, &store.Query{Parent: p.ID, States: []store.State{store.Scheduled}}), shards[1].ID)
	e.finishOK(other, "w1", at(2*time.Second),
		store.Outcome{ID: shards[0].ID, Attempt: 1, State: store.Completed, Result: []byte(`[0]`)},
		store.Outcome{ID: shards[2].ID, Attempt: 1, State: store.Scheduled, RunAt: at(3 * time.Second), Error: "again"})
	checkShardFields(t, "Lookup after Finish", e.get(e.s, shards[0].ID), shards[0])
	checkIDs(t, "Query{Parent, Completed}", e.instances(e.s, &store.Query{Parent: p.ID, States: []store.State{store.Completed}}), shards[0].ID)
	checkIDs(t, "Claim of the retry", e.claimWith(other, "q-sh", "w1", 1, at(3*time.Second), nil, []string{"region=us"}).Instances, shards[2].ID)
	resc := e.rescue(e.s, at(time.Hour), 10)
	for _, in := range resc {
		if w, ok := want[in.ID]; ok {
			checkShardFields(t, "Rescue", in, w)
		}
	}
	checkShardFields(t, "Lookup after Rescue", e.get(e.s, shards[2].ID), shards[2])

	// Pages of a parent's shards.
	pg, err := other.PageInstances(e.ctx, &store.Query{Parent: p.ID, Limit: 2})
	if err != nil {
		t.Fatalf("PageInstances(Parent, Limit 2): %v", err)
	}
	checkIDs(t, "PageInstances(Parent) page 1", pg.Instances, shards[2].ID, shards[1].ID)
	if pg.Next == "" {
		t.Fatal("PageInstances(Parent) page 1 has no Next cursor, want one")
	}
	next := pg.Next
	pg, err = other.PageInstances(e.ctx, &store.Query{Parent: p.ID, Limit: 2, Cursor: next})
	if err != nil {
		t.Fatalf("PageInstances(Parent) page 2: %v", err)
	}
	checkIDs(t, "PageInstances(Parent) page 2", pg.Instances, shards[0].ID)
	if _, err := other.PageInstances(e.ctx, &store.Query{Parent: p2.ID, Limit: 2, Cursor: next}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("PageInstances with another parent's cursor: %v, want ErrInvalid", err)
	}

	// With the parent gone, its shards are still found by it.
	if _, err := e.s.Delete(e.ctx, &store.DeleteParams{IDs: []string{p.ID}, Now: at(time.Hour), Node: "n"}); err != nil {
		t.Fatalf("Delete(parent): %v", err)
	}
	checkIDs(t, "Query{Parent} after the parent's delete", e.instances(other, &store.Query{Parent: p.ID}), shards[2].ID, shards[1].ID, shards[0].ID)
}

// testShardsInvalid: Enqueue refuses, as a whole and storing nothing,
// shard fields that do not make a task.
func testShardsInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	cases := map[string]func(in *store.Instance){
		"negative count":       func(in *store.Instance) { in.ShardCount = -1 },
		"count over MaxShards": func(in *store.Instance) { in.ShardCount = store.MaxShards + 1 },
		"index without parent": func(in *store.Instance) { in.ShardIndex = 2 },
		"shard without count": func(in *store.Instance) {
			in.Parent, in.ShardIndex, in.ID = "p", 0, store.ShardID("p", 0)
		},
		"index out of range": func(in *store.Instance) {
			in.Parent, in.ShardIndex, in.ShardCount, in.ID = "p", 3, 3, store.ShardID("p", 3)
		},
		"negative index": func(in *store.Instance) {
			in.Parent, in.ShardIndex, in.ShardCount, in.ID = "p", -1, 3, store.ShardID("p", -1)
		},
		"ID not derived": func(in *store.Instance) { in.Parent, in.ShardIndex, in.ShardCount = "p", 1, 3 },
	}
	for name, mutate := range cases {
		bad := inst("shinv-bad", "q-shinv")
		mutate(bad)
		good := inst("shinv-good-"+name, "q-shinv")
		_, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{good, bad}, Node: "n", Now: base})
		if !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("%s: Enqueue: %v, want ErrInvalid", name, err)
		}
		e.absent(e.s, good.ID)
		e.absent(e.s, bad.ID)
	}
	// At the limit: accepted.
	p := inst("shinv-max", "q-shinv")
	p.ShardCount = store.MaxShards
	e.enqueue(e.s, base, p)
}

// testWake pins Shards.Wake: a Scheduled instance due later becomes due
// at Now and is claimed then; one due already, running, finished or
// unknown is left alone, and no history record is written.
func testWake(t *testing.T, h Harness) {
	e := setup(t, h)
	later := inst("wk-later", "q-wk")
	later.RunAt = at(time.Hour)
	due := inst("wk-due", "q-wk")
	running := inst("wk-running", "q-wk2")
	done := inst("wk-done", "q-wk2")
	e.enqueue(e.s, base, later, due, running, done)
	e.claimOne(e.s, "q-wk2", "w1", base, running.ID)
	e.claimOne(e.s, "q-wk2", "w1", base, done.ID)
	e.finishOK(e.s, "w1", base, store.Outcome{ID: done.ID, Attempt: 1, State: store.Completed})
	hist := len(e.history(e.s, &store.Query{}))
	before := map[string]*store.Instance{}
	for _, id := range []string{due.ID, running.ID, done.ID} {
		before[id] = e.get(e.s, id)
	}

	other := e.open()
	var sig <-chan struct{}
	if n, ok := e.s.(store.Notifier); ok {
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		ch, err := n.Subscribe(ctx, "q-wk")
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		drain(ch)
		sig = ch
	}
	now := at(time.Minute)
	if err := other.Wake(e.ctx, &store.WakeParams{IDs: []string{later.ID, due.ID, running.ID, done.ID, "wk-unknown"}, Now: now}); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	if sig != nil {
		waitSignal(t, sig, "Wake")
	}
	got := e.get(e.s, later.ID)
	if got.State != store.Scheduled || !got.RunAt.Equal(now) {
		t.Fatalf("woken instance: state %v, RunAt %v; want scheduled at %v", got.State, got.RunAt, now)
	}
	for id, b := range before {
		a := e.get(e.s, id)
		if a.State != b.State || !a.RunAt.Equal(b.RunAt) || a.Attempt != b.Attempt {
			t.Fatalf("Wake changed %s: state %v -> %v, RunAt %v -> %v", id, b.State, a.State, b.RunAt, a.RunAt)
		}
	}
	if n := len(e.history(e.s, &store.Query{})); n != hist {
		t.Fatalf("Wake wrote history: %d records, want %d", n, hist)
	}
	// Claimed at Now, behind what was due before it.
	c := e.claim(e.s, "q-wk", "w2", 10, now)
	checkIDs(t, "Claim after Wake", c.Instances, due.ID, later.ID)

	// Invalid parameters.
	for name, p := range map[string]*store.WakeParams{
		"nil":      nil,
		"no time":  {IDs: []string{"x"}},
		"empty ID": {IDs: []string{""}, Now: now},
	} {
		if err := e.s.Wake(e.ctx, p); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Wake(%s): %v, want ErrInvalid", name, err)
		}
	}
	if err := e.s.Wake(e.ctx, &store.WakeParams{Now: now}); err != nil {
		t.Fatalf("Wake(no IDs): %v, want nil", err)
	}
}

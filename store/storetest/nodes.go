package storetest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// deadAfter is the dead threshold the node tests use: liveness is judged
// on real time (the store's clock, or how long a handle has seen a record
// unchanged), so the tests wait for it, on a condition with a deadline.
const deadAfter = 200 * time.Millisecond

// nodesTests are the node registry's sub-tests, run by Run.
var nodesTests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"NodesHeartbeatList", testNodesHeartbeatList},
	{"NodesGoneListedThenExpired", testNodesGoneExpire},
	{"NodesStale", testNodesStale},
	{"NodesRescueStaleOnly", testNodesRescueStaleOnly},
	{"NodesRescueLimit", testNodesRescueLimit},
	{"NodesRescueConcurrent", testNodesRescueConcurrent},
	{"NodesLeftNotRescued", testNodesLeftNotRescued},
	{"NodesRescuerSilentToo", testNodesRescuerSilent},
	{"NodesLateFinishAfterRescue", testNodesLateFinishAfterRescue},
	{"NodesInvalidParams", testNodesInvalid},
}

func runNodes(t *testing.T, h Harness) {
	for _, tc := range nodesTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// nodeInfo is a node record with every field a node reports.
func nodeInfo(id string) store.NodeInfo {
	return store.NodeInfo{
		ID: id, Host: "host-" + id, Labels: []string{"gpu", "region=eu"},
		Kinds: []string{"kind-a", "kind-b"}, Queues: []string{"q"}, Workers: 8, Busy: 3,
		ExecutorTypes: []string{"command", "webhook"},
		Version:       "v1.2.3", Started: base, Skew: 7 * time.Millisecond,
	}
}

func (e *env) heartbeat(s store.Store, id string, now time.Time, leaving bool, retain time.Duration) *store.HeartbeatResult {
	e.t.Helper()
	res, err := s.Heartbeat(e.ctx, &store.HeartbeatParams{Node: nodeInfo(id), Now: now, DeadAfter: deadAfter, Leaving: leaving, Retain: retain})
	if err != nil {
		e.t.Fatalf("Heartbeat(%s): %v", id, err)
	}
	if res == nil {
		e.t.Fatalf("Heartbeat(%s) returned a nil result", id)
	}
	return res
}

func (e *env) listNodes(s store.Store, now time.Time) map[string]*store.NodeInfo {
	e.t.Helper()
	ns, err := s.ListNodes(e.ctx, &store.ListNodesParams{Now: now, DeadAfter: deadAfter})
	if err != nil {
		e.t.Fatalf("ListNodes: %v", err)
	}
	out := map[string]*store.NodeInfo{}
	for i, n := range ns {
		if i > 0 && ns[i-1].ID >= n.ID {
			e.t.Errorf("ListNodes not ordered by ID: %s before %s", ns[i-1].ID, n.ID)
		}
		out[n.ID] = n
	}
	return out
}

func (e *env) rescueNodes(s store.Store, rescuer string, now time.Time, limit int) *store.RescueNodesResult {
	e.t.Helper()
	res, err := s.RescueNodes(e.ctx, &store.RescueNodesParams{Now: now, Node: rescuer, DeadAfter: deadAfter, Limit: limit})
	if err != nil {
		e.t.Fatalf("RescueNodes: %v", err)
	}
	if len(res.Rescued) > limit {
		e.t.Fatalf("RescueNodes(limit %d) rescued %d", limit, len(res.Rescued))
	}
	return res
}

// waitUntil polls cond (which may act, e.g. heartbeat a live node) until
// it holds, for at most 20 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20 s waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkStoreNow checks a heartbeat's clock reading: a store with a clock
// of its own reads about the wall clock; one that derives it from the
// nodes' clocks (Harness.NodeClock) reads, with one node, that node's
// clock, or nothing while it learns.
func (e *env) checkStoreNow(res *store.HeartbeatResult, now time.Time) {
	e.t.Helper()
	if e.h.NodeClock {
		if !res.StoreNow.IsZero() && (res.StoreNow.Sub(now) > time.Second || now.Sub(res.StoreNow) > time.Second) {
			e.t.Errorf("StoreNow = %v with one node whose clock read %v; want that clock (the median of the nodes')", res.StoreNow, now)
		}
		return
	}
	if d := time.Since(res.StoreNow); d > time.Minute || d < -time.Minute {
		e.t.Errorf("StoreNow = %v, %v from the wall clock; want the store's clock", res.StoreNow, d)
	}
}

func testNodesHeartbeatList(t *testing.T, h Harness) {
	e := setup(t, h)
	res := e.heartbeat(e.s, "n1", at(time.Second), false, 0)
	e.checkStoreNow(res, at(time.Second))
	if res.WasDead {
		t.Error("first heartbeat reports WasDead")
	}
	other := e.open()
	e.heartbeat(other, "n2", at(time.Second), false, 0)
	got := e.listNodes(e.s, at(time.Second))
	if len(got) != 2 || got["n1"] == nil || got["n2"] == nil {
		t.Fatalf("ListNodes = %v, want n1 and n2", got)
	}
	n := got["n1"]
	want := nodeInfo("n1")
	want.LastSeen = at(time.Second)
	checkRecord(t, "node n1", &want, n, "StoreSeen", "Status", "GoneAt")
	if n.Status != store.NodeLive {
		t.Errorf("n1 status %v, want live", n.Status)
	}
	if n.StoreSeen.IsZero() && !h.NodeClock {
		t.Error("n1 has no StoreSeen")
	}
	// A later heartbeat replaces the record.
	info := nodeInfo("n1")
	info.Busy, info.Kinds, info.ExecutorTypes = 5, []string{"kind-c"}, []string{"wasm"}
	if _, err := e.s.Heartbeat(e.ctx, &store.HeartbeatParams{Node: info, Now: at(3 * time.Second), DeadAfter: deadAfter}); err != nil {
		t.Fatal(err)
	}
	n = e.listNodes(other, at(3*time.Second))["n1"]
	if n == nil || n.Busy != 5 || len(n.Kinds) != 1 || n.Kinds[0] != "kind-c" || !n.LastSeen.Equal(at(3*time.Second)) ||
		len(n.ExecutorTypes) != 1 || n.ExecutorTypes[0] != "wasm" {
		t.Errorf("after a second heartbeat n1 = %+v, want busy 5, kinds [kind-c], executor types [wasm], last seen %v", n, at(3*time.Second))
	}
	// A node that stops enabling executor types reports none.
	info.ExecutorTypes = nil
	if _, err := e.s.Heartbeat(e.ctx, &store.HeartbeatParams{Node: info, Now: at(4 * time.Second), DeadAfter: deadAfter}); err != nil {
		t.Fatal(err)
	}
	if n = e.listNodes(other, at(4*time.Second))["n1"]; n == nil || len(n.ExecutorTypes) != 0 {
		t.Errorf("after a heartbeat with no executor types n1 = %+v, want none", n)
	}
}

func testNodesGoneExpire(t *testing.T, h Harness) {
	e := setup(t, h)
	e.heartbeat(e.s, "n1", at(0), false, 0)
	e.heartbeat(e.s, "n1", at(time.Second), true, 0) // stopped
	n := e.listNodes(e.s, at(time.Second))["n1"]
	if n == nil || n.Status != store.NodeLeft || n.GoneAt.IsZero() {
		t.Fatalf("a node that left is listed as %+v, want status left with GoneAt", n)
	}
	if !n.Status.Gone() {
		t.Error("NodeLeft.Gone() = false")
	}
	// Another node's heartbeats with a short retention delete it.
	waitUntil(t, "the left node's record to expire", func() bool {
		e.heartbeat(e.s, "n2", at(2*time.Second), false, 100*time.Millisecond)
		_, ok := e.listNodes(e.s, at(2*time.Second))["n1"]
		return !ok
	})
	if e.listNodes(e.s, at(2*time.Second))["n2"] == nil {
		t.Error("the live node's record expired too")
	}
}

func testNodesStale(t *testing.T, h Harness) {
	e := setup(t, h)
	e.heartbeat(e.s, "n1", at(0), false, 0)
	if n := e.listNodes(e.s, at(0))["n1"]; n == nil || n.Status != store.NodeLive {
		t.Fatalf("n1 just heartbeated: %+v, want live", n)
	}
	waitUntil(t, "n1 listed as stale", func() bool {
		n := e.listNodes(e.s, at(10*time.Second))["n1"]
		return n != nil && n.Status == store.NodeStale
	})
}

// claimedBy enqueues n instances prefixed pre and claims them as owner.
func (e *env) claimedBy(owner, pre string, n int) []string {
	e.t.Helper()
	var ins []*store.Instance
	for i := range n {
		ins = append(ins, inst(fmt.Sprintf("%s-%03d", pre, i), "q-"+pre))
	}
	e.enqueue(e.s, at(0), ins...)
	res := e.claim(e.s, "q-"+pre, owner, n, at(time.Second))
	if len(res.Instances) != n {
		e.t.Fatalf("claimed %d of %d", len(res.Instances), n)
	}
	return ids(res.Instances)
}

func testNodesRescueStaleOnly(t *testing.T, h Harness) {
	e := setup(t, h)
	e.heartbeat(e.s, "dead", at(0), false, 0)
	e.heartbeat(e.s, "live", at(0), false, 0)
	deadIDs := e.claimedBy("dead", "d", 2)
	liveIDs := e.claimedBy("live", "l", 2)
	// An attempt of the dead node with a cancel request ends Canceled.
	if _, err := e.s.Cancel(e.ctx, &store.CancelParams{ID: deadIDs[1], Now: at(2 * time.Second), Node: "x"}); err != nil {
		t.Fatal(err)
	}
	var res *store.RescueNodesResult
	waitUntil(t, "node dead declared dead", func() bool {
		e.heartbeat(e.s, "live", at(2*time.Second), false, 0)
		res = e.rescueNodes(e.s, "rescuer", at(3*time.Second), 100)
		return len(res.Dead) > 0
	})
	if len(res.Dead) != 1 || res.Dead[0] != "dead" {
		t.Fatalf("declared dead %v, want [dead]", res.Dead)
	}
	checkIDSet(t, "rescued", res.Rescued, deadIDs...)
	for _, in := range res.Rescued {
		want := store.Scheduled
		if in.ID == deadIDs[1] {
			want = store.Canceled
		}
		if in.State != want || in.LeaseOwner != "" || in.Attempt != 1 {
			t.Errorf("rescued %s: state %v owner %q attempt %d, want %v, no owner, attempt 1", in.ID, in.State, in.LeaseOwner, in.Attempt, want)
		}
	}
	if got := e.get(e.s, deadIDs[0]); got.State != store.Scheduled || !got.RunAt.Equal(base) {
		t.Errorf("stored %s after rescue: %v run at %v, want scheduled at its run time %v", deadIDs[0], got.State, got.RunAt, base)
	}
	hist := e.history(e.s, &store.Query{InstanceID: deadIDs[0]})
	if last := hist[len(hist)-1]; last.State != store.Scheduled || last.Node != "rescuer" || !strings.Contains(last.Error, "dead") {
		t.Errorf("last history record of %s: %+v, want scheduled by rescuer with an error naming the dead node", deadIDs[0], last)
	}
	for _, id := range liveIDs {
		if got := e.get(e.s, id); got.State != store.Processing || got.LeaseOwner != "live" {
			t.Errorf("live node's %s: %v owned by %q, want processing by live", id, got.State, got.LeaseOwner)
		}
	}
	// The counts follow the rescue (Inspector): the dead node's attempts
	// left Processing, the live node's did not.
	e.wantCounts("RescueNodes", map[string]int64{
		"q-d/kind-a/scheduled": 1, "q-d/kind-a/canceled": 1, "q-l/kind-a/processing": 2,
	})
	// Nothing more to do; the node is listed dead. (live heartbeats first:
	// the checks above take longer than deadAfter on a loaded machine.)
	e.heartbeat(e.s, "live", at(3*time.Second), false, 0)
	if again := e.rescueNodes(e.open(), "rescuer2", at(3*time.Second), 100); len(again.Dead) != 0 || len(again.Rescued) != 0 {
		t.Errorf("a second RescueNodes declared %v and rescued %v, want nothing", again.Dead, ids(again.Rescued))
	}
	if n := e.listNodes(e.s, at(3*time.Second))["dead"]; n == nil || n.Status != store.NodeDead || n.GoneAt.IsZero() {
		t.Errorf("dead node listed as %+v, want dead with GoneAt", n)
	}
	// The dead node comes back: it learns it was dead and is live again.
	if r := e.heartbeat(e.s, "dead", at(4*time.Second), false, 0); !r.WasDead {
		t.Error("a dead node's next heartbeat does not report WasDead")
	}
	if r := e.heartbeat(e.s, "dead", at(5*time.Second), false, 0); r.WasDead {
		t.Error("WasDead reported twice")
	}
	if n := e.listNodes(e.s, at(5*time.Second))["dead"]; n == nil || n.Status != store.NodeLive {
		t.Errorf("node back after being dead listed as %+v, want live", n)
	}
}

func testNodesRescueLimit(t *testing.T, h Harness) {
	e := setup(t, h)
	e.heartbeat(e.s, "dead", at(0), false, 0)
	all := e.claimedBy("dead", "d", 5)
	var got []*store.Instance
	waitUntil(t, "node dead declared dead", func() bool {
		res := e.rescueNodes(e.s, "rescuer", at(3*time.Second), 2)
		got = append(got, res.Rescued...)
		return len(res.Dead) > 0
	})
	for range 5 {
		got = append(got, e.rescueNodes(e.s, "rescuer", at(3*time.Second), 2).Rescued...)
	}
	checkIDSet(t, "rescued over several calls", got, all...)
}

func testNodesRescueConcurrent(t *testing.T, h Harness) {
	e := setup(t, h)
	e.heartbeat(e.s, "dead", at(0), false, 0)
	all := e.claimedBy("dead", "d", 60)
	handles := []store.Store{e.s, e.open(), e.open()}
	var (
		mu       sync.Mutex
		rescued  = map[string]int{}
		declared []string
		wg       sync.WaitGroup
		errs     = make(chan error, len(handles))
	)
	deadline := time.Now().Add(20 * time.Second)
	for i, s := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				res, err := s.RescueNodes(e.ctx, &store.RescueNodesParams{Now: at(3 * time.Second), Node: fmt.Sprintf("r%d", i), DeadAfter: deadAfter, Limit: 7})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				declared = append(declared, res.Dead...)
				for _, in := range res.Rescued {
					rescued[in.ID]++
				}
				n := len(rescued)
				mu.Unlock()
				if n == len(all) {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(declared) != 1 {
		t.Errorf("node declared dead %d times (%v), want once", len(declared), declared)
	}
	var missing, twice []string
	for _, id := range all {
		switch rescued[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			twice = append(twice, id)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 || len(twice) > 0 {
		t.Errorf("rescue from three handles: %d never rescued %v, %d rescued more than once %v", len(missing), missing, len(twice), twice)
	}
}

// testNodesLateFinishAfterRescue: a node that fenced itself (its
// heartbeats failed) and was declared dead writes its outcomes late, once
// it reaches the store again. Whatever they are, the store refuses each
// one (ErrLeaseLost) and writes nothing, while the rescued instance waits
// and after another node claimed it again (attempt 2): the rescue is what
// decides, so an instance never ends twice.
func testNodesLateFinishAfterRescue(t *testing.T, h Harness) {
	e := setup(t, h)
	cases := outcomeCases()
	e.heartbeat(e.s, "fenced", at(0), false, 0)
	fenced := e.claimedBy("fenced", "lf", len(cases))
	waitUntil(t, "node fenced declared dead", func() bool {
		return len(e.rescueNodes(e.s, "rescuer", at(3*time.Second), 100).Dead) > 0
	})
	e.rescueNodes(e.s, "rescuer", at(3*time.Second), 100)
	late := func(when string, now time.Time) {
		t.Helper()
		for i, c := range cases {
			id := fenced[i]
			before := e.get(e.s, id)
			hbefore := e.history(e.s, &store.Query{InstanceID: id})
			o := c.out
			o.ID, o.Attempt = id, 1
			errs := e.finish(e.open(), "fenced", now, o)
			wantErr(t, "late Finish ("+c.name+") of a node declared dead, "+when, errs[0].Err, store.ErrLeaseLost)
			checkRecord(t, "instance after a late "+c.name+" "+when, before, e.get(e.s, id))
			if hafter := e.history(e.s, &store.Query{InstanceID: id}); len(hafter) != len(hbefore) {
				t.Fatalf("late Finish (%s) %s added history: %d records, had %d", c.name, when, len(hafter), len(hbefore))
			}
		}
	}
	for _, id := range fenced {
		if got := e.get(e.s, id); got.State != store.Scheduled || got.LeaseOwner != "" || got.Attempt != 1 {
			t.Fatalf("rescued %s: %v owned by %q attempt %d, want Scheduled, no owner, attempt 1", id, got.State, got.LeaseOwner, got.Attempt)
		}
	}
	late("while the rescued instance waits", at(4*time.Second))
	res := e.claim(e.s, "q-lf", "w2", len(cases), at(5*time.Second))
	if len(res.Instances) != len(cases) {
		t.Fatalf("claimed %d rescued instances again, want %d", len(res.Instances), len(cases))
	}
	for _, in := range res.Instances {
		if in.Attempt != 2 {
			t.Fatalf("rescued %s claimed again with attempt %d, want 2", in.ID, in.Attempt)
		}
	}
	late("after another node claimed it again", at(6*time.Second))
}

func testNodesLeftNotRescued(t *testing.T, h Harness) {
	e := setup(t, h)
	e.heartbeat(e.s, "gone", at(0), false, 0)
	e.heartbeat(e.s, "stale", at(0), false, 0)
	left := e.claimedBy("gone", "g", 2)
	e.heartbeat(e.s, "gone", at(time.Second), true, 0)
	// Once the stale node is declared dead, the left one was past the
	// threshold too, and must not be declared.
	var dead []string
	waitUntil(t, "the stale node declared dead", func() bool {
		res := e.rescueNodes(e.s, "rescuer", at(3*time.Second), 100)
		dead = append(dead, res.Dead...)
		return len(dead) > 0
	})
	dead = append(dead, e.rescueNodes(e.s, "rescuer", at(3*time.Second), 100).Dead...)
	if len(dead) != 1 || dead[0] != "stale" {
		t.Errorf("declared dead %v, want [stale] (a node that left is never declared dead)", dead)
	}
	for _, id := range left {
		if got := e.get(e.s, id); got.State != store.Processing || got.LeaseOwner != "gone" {
			t.Errorf("left node's %s: %v owned by %q, want left to its lease", id, got.State, got.LeaseOwner)
		}
	}
}

func testNodesInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	cases := []struct {
		what string
		err  error
	}{
		{"nil heartbeat", func() error { _, err := e.s.Heartbeat(e.ctx, nil); return err }()},
		{"heartbeat without ID", func() error {
			_, err := e.s.Heartbeat(e.ctx, &store.HeartbeatParams{Now: base, DeadAfter: time.Second})
			return err
		}()},
		{"heartbeat without dead threshold", func() error {
			_, err := e.s.Heartbeat(e.ctx, &store.HeartbeatParams{Node: store.NodeInfo{ID: "n"}, Now: base})
			return err
		}()},
		{"list without dead threshold", func() error { _, err := e.s.ListNodes(e.ctx, &store.ListNodesParams{Now: base}); return err }()},
		{"rescue nodes without rescuer", func() error {
			_, err := e.s.RescueNodes(e.ctx, &store.RescueNodesParams{Now: base, DeadAfter: time.Second, Limit: 1})
			return err
		}()},
		{"rescue nodes without limit", func() error {
			_, err := e.s.RescueNodes(e.ctx, &store.RescueNodesParams{Now: base, Node: "r", DeadAfter: time.Second})
			return err
		}()},
	}
	for _, c := range cases {
		if !errors.Is(c.err, store.ErrInvalid) {
			t.Errorf("%s: error %v, want one wrapping store.ErrInvalid", c.what, c.err)
		}
	}
}

// checkIDSet checks that got holds the IDs want, in any order.
func checkIDSet(t testing.TB, what string, got []*store.Instance, want ...string) {
	t.Helper()
	g := ids(got)
	sort.Strings(g)
	w := append([]string(nil), want...)
	sort.Strings(w)
	if !slicesEqual(g, w) {
		t.Errorf("%s: got %v, want %v (any order)", what, g, w)
	}
}

// testNodesRescuerSilent checks that a rescuer whose own heartbeat is as
// old as another node's does not declare that node dead, as after a store
// stall that delayed every heartbeat; once the rescuer heartbeats again
// for the threshold and the other does not, it does.
func testNodesRescuerSilent(t *testing.T, h Harness) {
	e := setup(t, h)
	e.heartbeat(e.s, "other", at(0), false, 0)
	e.heartbeat(e.s, "rescuer", at(0), false, 0)
	start := time.Now()
	for time.Since(start) < 3*deadAfter {
		if res := e.rescueNodes(e.s, "rescuer", at(time.Second), 100); len(res.Dead) > 0 {
			t.Fatalf("a rescuer silent as long as the other node declared %v dead", res.Dead)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitUntil(t, "the other node declared dead once the rescuer heartbeats", func() bool {
		e.heartbeat(e.s, "rescuer", at(2*time.Second), false, 0)
		res := e.rescueNodes(e.s, "rescuer", at(2*time.Second), 100)
		return len(res.Dead) == 1 && res.Dead[0] == "other"
	})
}

package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// workflowTests pin the workflow fields (Instance.Task), Query.IDs and
// the release of a waiting task that workflows build on.
var workflowTests = []struct {
	name string
	fn   func(*testing.T, Harness)
}{
	{"WorkflowFields", testWorkflowFields},
	{"WorkflowInvalid", testWorkflowInvalid},
	{"WorkflowFanInRelease", testWorkflowFanInRelease},
	{"WorkflowLostWake", testWorkflowLostWake},
}

// wfTask returns the task name of workflow wf in queue, waiting for deps
// (task names) and woken by the end of dependents (task names); a task
// with dependencies is due at waitUntil, one without at base.
func wfTask(wf, name, queue string, deps, dependents []string, waitUntil time.Time) *store.Instance {
	in := inst(store.WorkflowTaskID(wf, name), queue)
	t := &store.WorkflowTask{Workflow: wf, Name: name}
	for _, d := range deps {
		t.Deps = append(t.Deps, store.WorkflowTaskID(wf, d))
	}
	for _, d := range dependents {
		t.Dependents = append(t.Dependents, store.WorkflowTaskID(wf, d))
	}
	if len(deps) > 0 {
		in.RunAt = waitUntil
	}
	in.Task = t
	return in
}

// checkTask fails unless in carries want's workflow fields.
func checkTask(t *testing.T, what string, in, want *store.Instance) {
	t.Helper()
	if !in.Task.Equal(want.Task) {
		t.Fatalf("%s: instance %s has Task %+v, want %+v", what, in.ID, in.Task, want.Task)
	}
}

// testWorkflowFields: Instance.Task comes back from every read, on every
// handle, through claim, finish and rescue; Query.IDs returns exactly the
// named instances, newest first, narrowed by the query's other fields.
func testWorkflowFields(t *testing.T, h Harness) {
	e := setup(t, h)
	wf := "wf-fields"
	a := wfTask(wf, "a", "q-wf", nil, []string{"b", "c"}, time.Time{})
	b := wfTask(wf, "b", "q-wf", []string{"a"}, nil, at(time.Hour))
	b.Task.OnDepFailure = store.DepRun
	c := wfTask(wf, "c", "q-wf", []string{"a"}, nil, at(time.Hour))
	c.Task.OnDepFailure = store.DepCancelWorkflow
	c.Task.Parted = true
	c.Labels = []string{"region=eu"}
	c.Metadata = map[string]string{"k": "v"}
	end := inst(wf, "q-wf")
	end.RunAt = at(time.Hour)
	end.Task = &store.WorkflowTask{Workflow: wf, Name: store.EndTask, Deps: []string{b.ID, c.ID}, Gate: true}
	plain := inst("wf-plain", "q-wf")
	e.enqueue(e.s, base, a, b, c, end, plain)

	other := e.open()
	want := map[string]*store.Instance{a.ID: a, b.ID: b, c.ID: c, end.ID: end, plain.ID: plain}
	for id, w := range want {
		checkTask(t, "Lookup", e.get(e.s, id), w)
		checkTask(t, "Lookup on a second handle", e.get(other, id), w)
	}
	// Repeating the enqueue is a repeat: nothing changes.
	res, err := other.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{a, b}, Node: "n", Now: at(time.Second)})
	if err != nil || len(res) != 2 || !res[0].Existed || !res[1].Existed {
		t.Fatalf("repeated Enqueue of workflow tasks: %+v, %v; want both Existed", res, err)
	}

	// By IDs: the named ones (unknown ones left out), newest first.
	checkIDs(t, "Query{IDs}", e.instances(other, &store.Query{IDs: []string{a.ID, end.ID, "wf-unknown", c.ID}}), end.ID, c.ID, a.ID)
	checkIDs(t, "Query{IDs, Limit 2}", e.instances(other, &store.Query{IDs: []string{a.ID, end.ID, c.ID}, Limit: 2}), end.ID, c.ID)
	checkIDs(t, "Query{IDs, Scheduled later}", e.instances(e.s, &store.Query{IDs: []string{a.ID, b.ID}, States: []store.State{store.Scheduled}}), b.ID, a.ID)
	checkIDs(t, "Query{IDs, Kind other}", e.instances(e.s, &store.Query{IDs: []string{a.ID, b.ID}, Kind: "kind-b"}))
	checkIDs(t, "Query{IDs, InstanceID}", e.instances(e.s, &store.Query{IDs: []string{a.ID, b.ID}, InstanceID: b.ID}), b.ID)
	checkIDs(t, "Query{IDs, InstanceID not among them}", e.instances(e.s, &store.Query{IDs: []string{a.ID}, InstanceID: b.ID}))

	// Claim, finish and rescue carry the fields.
	got := e.claimOne(other, "q-wf", "w1", base, a.ID)
	checkTask(t, "Claim", got, a)
	e.finishOK(other, "w1", at(time.Second), store.Outcome{ID: a.ID, Attempt: 1, State: store.Completed, Result: []byte(`["out"]`)})
	checkTask(t, "Lookup after Finish", e.get(e.s, a.ID), a)
	checkIDs(t, "Query{IDs, Completed}", e.instances(e.s, &store.Query{IDs: []string{a.ID, b.ID, c.ID}, States: []store.State{store.Completed}}), a.ID)
	if err := e.s.Wake(e.ctx, &store.WakeParams{IDs: []string{b.ID}, Now: at(2 * time.Second)}); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	got = e.claimOne(e.s, "q-wf", "w2", at(2*time.Second), plain.ID)
	checkTask(t, "Claim of a plain instance", got, plain)
	got = e.claimOne(e.s, "q-wf", "w2", at(2*time.Second), b.ID)
	checkTask(t, "Claim after Wake", got, b)
	for _, in := range e.rescue(other, at(time.Hour), 10) {
		if w, ok := want[in.ID]; ok {
			checkTask(t, "Rescue", in, w)
		}
	}
	checkTask(t, "Lookup after Rescue", e.get(e.s, b.ID), b)

	// A page by IDs.
	pg, err := other.PageInstances(e.ctx, &store.Query{IDs: []string{a.ID, b.ID, c.ID}, Limit: 2})
	if err != nil {
		t.Fatalf("PageInstances(IDs, Limit 2): %v", err)
	}
	first := ids(pg.Instances)
	if len(first) != 2 || pg.Next == "" {
		t.Fatalf("PageInstances(IDs, Limit 2) page 1: %v, next %q; want two and a cursor", first, pg.Next)
	}
	pg, err = other.PageInstances(e.ctx, &store.Query{IDs: []string{a.ID, b.ID, c.ID}, Limit: 2, Cursor: pg.Next})
	if err != nil {
		t.Fatalf("PageInstances(IDs) page 2: %v", err)
	}
	all := append(first, ids(pg.Instances)...)
	slices.Sort(all)
	wantAll := []string{a.ID, b.ID, c.ID}
	slices.Sort(wantAll)
	if !slices.Equal(all, wantAll) {
		t.Fatalf("PageInstances(IDs): pages hold %v, want %v", all, wantAll)
	}

	// Query.IDs bounds.
	if _, err := e.s.LookupInstances(e.ctx, &store.Query{IDs: make([]string, store.MaxQueryIDs+1)}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("LookupInstances with %d IDs: %v, want ErrInvalid", store.MaxQueryIDs+1, err)
	}
	if _, err := e.s.LookupInstances(e.ctx, &store.Query{IDs: []string{a.ID, ""}}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("LookupInstances with an empty ID: %v, want ErrInvalid", err)
	}
}

// testWorkflowInvalid: Enqueue refuses, as a whole and storing nothing,
// workflow fields that do not make a task.
func testWorkflowInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	wf := "wfinv"
	id := store.WorkflowTaskID(wf, "t")
	cases := map[string]func(in *store.Instance){
		"no workflow":   func(in *store.Instance) { in.Task.Workflow = "" },
		"no name":       func(in *store.Instance) { in.Task.Name = "" },
		"ID not named":  func(in *store.Instance) { in.ID = "wfinv-other" },
		"end not by ID": func(in *store.Instance) { in.Task.Name = store.EndTask },
		"self dep":      func(in *store.Instance) { in.Task.Deps = []string{id} },
		"empty dep":     func(in *store.Instance) { in.Task.Deps = []string{""} },
		"bad policy":    func(in *store.Instance) { in.Task.OnDepFailure = 9 },
		"sharded":       func(in *store.Instance) { in.ShardCount = 2 },
		"too many deps": func(in *store.Instance) {
			in.Task.Deps = make([]string, store.MaxTaskDeps+1)
			for i := range in.Task.Deps {
				in.Task.Deps[i] = fmt.Sprint("d", i)
			}
		},
	}
	for name, mutate := range cases {
		bad := inst(id, "q-wfinv")
		bad.Task = &store.WorkflowTask{Workflow: wf, Name: "t"}
		mutate(bad)
		good := inst("wfinv-good-"+name, "q-wfinv")
		_, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{good, bad}, Node: "n", Now: base})
		if !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("%s: Enqueue: %v, want ErrInvalid", name, err)
		}
		e.absent(e.s, good.ID)
		e.absent(e.s, bad.ID)
	}
}

// testWorkflowFanInRelease: a join waiting for many parents that finish
// at once on several handles is released once, never early. Each
// finisher, after its own Finish, reads the parents' states and wakes the
// join when every one has ended (the engine's release); claims race on
// every handle. The join is due only once all parents ended, and exactly
// one claim takes it.
func testWorkflowFanInRelease(t *testing.T, h Harness) {
	e := setup(t, h)
	const parents, handles = 24, 4
	wf := "wf-fanin"
	names := make([]string, parents)
	for i := range names {
		names[i] = fmt.Sprint("p", i)
	}
	join := wfTask(wf, "join", "q-join", names, nil, at(time.Hour))
	ins := []*store.Instance{join}
	for _, n := range names {
		ins = append(ins, wfTask(wf, n, "q-fan", nil, []string{"join"}, time.Time{}))
	}
	e.enqueue(e.s, base, ins...)
	hs := []store.Store{e.s}
	for len(hs) < handles {
		hs = append(hs, e.open())
	}
	// Each handle claims its share of the parents.
	var claimed [handles][]*store.Instance
	for i, s := range hs {
		claimed[i] = e.claim(s, "q-fan", fmt.Sprint("w", i), parents/handles, at(time.Second)).Instances
		if len(claimed[i]) != parents/handles {
			t.Fatalf("handle %d claimed %d parents, want %d", i, len(claimed[i]), parents/handles)
		}
	}
	if c := e.claim(e.s, "q-join", "early", 1, at(time.Second)); len(c.Instances) != 0 {
		t.Fatalf("the join was claimed before any parent ended: %v", ids(c.Instances))
	}
	now := at(2 * time.Second)
	var wakes, joins atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 4*handles)
	start := make(chan struct{})
	for i, s := range hs {
		wg.Go(func() {
			<-start
			owner := fmt.Sprint("w", i)
			for _, p := range claimed[i] {
				// One finish per parent, so ends interleave across handles.
				_, err := s.Finish(e.ctx, &store.FinishParams{Owner: owner, Now: now, Outcomes: []store.Outcome{{ID: p.ID, Attempt: 1, State: store.Completed, Result: fmt.Appendf(nil, `[%q]`, p.Task.Name)}}})
				if err != nil {
					errs <- fmt.Errorf("handle %d: Finish(%s): %w", i, p.Task.Name, err)
					return
				}
				deps, err := s.LookupInstances(e.ctx, &store.Query{IDs: join.Task.Deps})
				if err != nil {
					errs <- fmt.Errorf("handle %d: reading the join's dependencies: %w", i, err)
					return
				}
				ended := 0
				for _, d := range deps {
					if d.State.Final() {
						ended++
					}
				}
				if ended == parents {
					wakes.Add(1)
					if err := s.Wake(e.ctx, &store.WakeParams{IDs: []string{join.ID}, Now: now}); err != nil {
						errs <- fmt.Errorf("handle %d: Wake: %w", i, err)
						return
					}
				}
			}
			// Everyone claims the join after its own finishes.
			res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: "q-join", Owner: owner, Limit: 1, Now: now, LeaseUntil: now.Add(lease)})
			if err != nil {
				errs <- fmt.Errorf("handle %d: Claim(join): %w", i, err)
				return
			}
			joins.Add(int32(len(res.Instances)))
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if wakes.Load() == 0 {
		t.Fatal("no finisher saw every parent ended; the last one to finish must")
	}
	// A finisher's claim may have run before the last wake; claim again.
	if joins.Load() == 0 {
		joins.Add(int32(len(e.claim(e.s, "q-join", "late", 1, now).Instances)))
	}
	if n := joins.Load(); n != 1 {
		t.Fatalf("the join was claimed %d times, want exactly once", n)
	}
	got := e.get(e.s, join.ID)
	if got.State != store.Processing || got.Attempt != 1 {
		t.Fatalf("join: state %v attempt %d, want processing attempt 1", got.State, got.Attempt)
	}
	checkTask(t, "the claimed join", got, join)
	// The parents' results are there for the join, in its Deps order.
	deps := e.instances(e.s, &store.Query{IDs: join.Task.Deps})
	if len(deps) != parents {
		t.Fatalf("the join's dependencies: %d found, want %d", len(deps), parents)
	}
	for _, d := range deps {
		if d.State != store.Completed || string(d.Result) != fmt.Sprintf(`[%q]`, d.Task.Name) {
			t.Fatalf("dependency %s: state %v result %s", d.Task.Name, d.State, d.Result)
		}
	}
	// A late wake (a repeated release) changes nothing.
	if err := e.s.Wake(e.ctx, &store.WakeParams{IDs: []string{join.ID}, Now: at(3 * time.Second)}); err != nil {
		t.Fatalf("Wake of the claimed join: %v", err)
	}
	if c := e.claim(e.s, "q-join", "again", 1, at(3*time.Second)); len(c.Instances) != 0 {
		t.Fatalf("the join was claimed again after a repeated wake: %v", ids(c.Instances))
	}
}

// testWorkflowLostWake: a dependent whose wake was lost (its parent's
// engine crashed between the parent's finish and the release) is not due
// before its recheck time and is claimed at it.
func testWorkflowLostWake(t *testing.T, h Harness) {
	e := setup(t, h)
	wf := "wf-lost"
	recheck := at(30 * time.Second)
	p := wfTask(wf, "p", "q-lost", nil, []string{"d"}, time.Time{})
	d := wfTask(wf, "d", "q-lost", []string{"p"}, nil, recheck)
	e.enqueue(e.s, base, p, d)
	e.claimOne(e.s, "q-lost", "w1", at(time.Second), p.ID)
	e.finishOK(e.s, "w1", at(2*time.Second), store.Outcome{ID: p.ID, Attempt: 1, State: store.Completed})
	// No wake: the engine that finished p died.
	other := e.open()
	c := e.claim(other, "q-lost", "w2", 1, recheck.Add(-time.Millisecond))
	if len(c.Instances) != 0 {
		t.Fatalf("the dependent was claimed before its recheck: %v", ids(c.Instances))
	}
	if !c.NextRunAt.Equal(recheck) {
		t.Fatalf("Claim's NextRunAt is %v, want the dependent's recheck %v", c.NextRunAt, recheck)
	}
	got := e.claimOne(other, "q-lost", "w2", recheck, d.ID)
	checkTask(t, "the recovered dependent", got, d)
	dep := e.instances(other, &store.Query{IDs: got.Task.Deps})
	if len(dep) != 1 || dep[0].State != store.Completed {
		t.Fatalf("the recovered dependent's dependency: %v, want p completed", ids(dep))
	}
}

package job

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jobkit/job/store"
)

// The release of a workflow task's dependents, and what it learns for
// their gates: a task known to have completed here needs no read when a
// dependent looks at it.

// doneTaskCap bounds the tasks a manager remembers as done (two
// generations of up to this many each).
const doneTaskCap = 1 << 15

// doneResultCap is the largest result a manager keeps with a done task;
// a gate task (a workflow's end, the join of added tasks) reads a larger
// one from the store.
const doneResultCap = 1 << 10

// doneTask is a workflow task known to be done: Completed, and the tasks
// it added (AddTasks), if any, completed too, as read after its end was
// stored. Both are final, so it stays true (short of an operator's
// Retry or Delete of a completed task, after which its dependents may
// still run on the first completion: it did complete).
type doneTask struct {
	result []byte
	kept   bool // result holds the task's result
}

// doneTasks is the tasks this manager saw done, so a dependent's gate
// decides without reading them again. Zero value ready; safe for
// concurrent use.
type doneTasks struct {
	mu       sync.Mutex
	cur, old map[string]doneTask
	// results holds the results of tasks whose Completed outcome this
	// manager's completer just applied, until workflowsEnded (same flush)
	// takes them.
	results map[string]recordedTask
	// joins holds the dependencies of the fan-in tasks stored here (more
	// than one dependency: what a wide join waits for) and how far the
	// release found them done, so a join is woken once, when its last
	// dependency ends, instead of at every end (each wake-up a claim and
	// a read of all its dependencies).
	joins, oldJoins map[string]*joinWait
	// committed holds the workflows stored in parts whose end this
	// manager knows stored (workflow_commit.go).
	committed, oldCommitted map[string]bool
}

// joinWait is what a manager knows of a fan-in task: its dependencies
// (never changed after enqueue), those before next known ended.
type joinWait struct {
	deps []string
	next int
}

// stored remembers the dependencies of the fan-in tasks among recs,
// which this manager stores.
func (d *doneTasks) stored(recs []*store.Instance) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range recs {
		if r.Task == nil || len(r.Task.Deps) < 2 {
			continue
		}
		if d.joins == nil {
			d.joins = make(map[string]*joinWait)
		}
		if len(d.joins) >= doneTaskCap {
			d.oldJoins, d.joins = d.joins, make(map[string]*joinWait)
		}
		d.joins[r.ID] = &joinWait{deps: r.Task.Deps}
	}
}

// join returns what is known of the fan-in task id, or nil.
func (d *doneTasks) join(id string) *joinWait {
	d.mu.Lock()
	defer d.mu.Unlock()
	if j := d.joins[id]; j != nil {
		return j
	}
	return d.oldJoins[id]
}

// forget drops what is known of the fan-in task id (it was woken).
func (d *doneTasks) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.joins, id)
	delete(d.oldJoins, id)
}

// recordedTask is a completed task as its completer saw it.
type recordedTask struct {
	result []byte
	// alone is set when no attempt of the task added tasks: this one did
	// not call AddTasks and none ran before it (the first attempt, and
	// no error left by an earlier outcome: a failure counts an attempt,
	// a rescue too, and every hand-back leaves an error).
	alone bool
}

func (d *doneTasks) put(id string, t doneTask) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur == nil {
		d.cur = make(map[string]doneTask)
	}
	if len(d.cur) >= doneTaskCap {
		d.old, d.cur = d.cur, make(map[string]doneTask, doneTaskCap/4)
	}
	d.cur[id] = t
}

func (d *doneTasks) get(id string) (doneTask, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.cur[id]; ok {
		return t, true
	}
	t, ok := d.old[id]
	return t, ok
}

// recorded keeps the result of a completed workflow task until the flush
// that applied it releases its dependents.
func (d *doneTasks) recorded(id string, t recordedTask) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.results == nil {
		d.results = make(map[string]recordedTask)
	}
	if len(d.results) < doneTaskCap { // bounded if workflowsEnded never runs
		d.results[id] = t
	}
}

// take returns and forgets what recorded kept for id.
func (d *doneTasks) take(id string) (recordedTask, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.results[id]
	delete(d.results, id)
	return r, ok
}

// workflowRecorded follows each outcome the completer applied: it keeps
// a completed task's result for the release, and looks again after a
// step's hand-back (stepWaited: a gate's or a sharded task's join).
func (m *Manager) workflowRecorded(r *finishReq, state State) {
	if rec := r.a.rec; rec.Task != nil && state == store.Completed {
		added := r.inst != nil && r.inst.added.Load()
		m.done.recorded(r.out.ID, recordedTask{result: r.out.Result, alone: !added && rec.Attempt == 1 && rec.Error == ""})
	}
	m.stepWaited(r, state)
}

// workflowsEnded wakes the dependents of the workflow tasks among recs
// that reached a final state (by this manager's outcome, rescue or
// cancel, each stored before this call), in one store call: the release.
// First it remembers as done the completed ones that added no tasks
// (AddTasks) in any attempt, as their completer saw; for the others it
// reads the joins of the tasks they added (one read for the whole batch,
// after their ends are stored), and remembers those with none, or with
// all their added tasks completed. The dependents' gates then decide
// without reading them. A dependent woken
// before all its dependencies ended looks and waits again (its gate);
// one whose wake-up was lost (a crash, a failed call) looks on its own
// after the recheck interval. Failures are logged, never returned.
func (m *Manager) workflowsEnded(ctx context.Context, recs []*store.Instance) {
	m.workflowsFinished(ctx, recs) // observers (workflow_observe.go)
	type done struct {
		id string
		doneTask
	}
	var ids, joins []string
	var completed []done
	for _, r := range recs {
		if r.Task == nil || !r.State.Final() {
			continue
		}
		ids = append(ids, r.Task.Dependents...)
		rt, kept := m.done.take(r.ID)
		if r.State != store.Completed || len(r.Task.Dependents) == 0 {
			continue // nothing waits for it (a workflow's end)
		}
		if kept && len(rt.result) > doneResultCap {
			rt.result, kept = nil, false
		}
		d := doneTask{result: rt.result, kept: kept}
		if rt.alone {
			m.done.put(r.ID, d) // added no tasks: done
			continue
		}
		completed = append(completed, done{r.ID, d})
		joins = append(joins, addedJoinID(r.Task.Workflow, r.ID))
	}
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if len(joins) > 0 {
		if got, err := m.readIDs(ctx, joins); err == nil {
			for k, c := range completed {
				if j := got[k]; j == nil || j.State == store.Completed {
					m.done.put(c.id, c.doneTask)
				}
			}
		} // a failed read: the gates read for themselves
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	ids = m.joinsReady(ctx, ids, recs)
	if len(ids) == 0 {
		return
	}
	if err := m.store.Wake(ctx, &store.WakeParams{IDs: ids, Now: m.clock.Now()}); err != nil {
		m.log.Warn("workflow: waking the dependents of ended tasks; they look again on their own", "instances", len(ids), "err", err)
		return
	}
	m.notifyLocal()
}

// gateKnown decides the gate of the claimed task p without a read when
// every dependency is known done here: it reports the decision as
// gateOutcome would, and ok false when one is not known (the gate then
// reads them all).
func (m *Manager) gateKnown(p *store.Instance) (d stepDecision, ok bool) {
	t := p.Task
	var known []doneTask
	if t.Gate {
		known = make([]doneTask, len(t.Deps))
	}
	for k, id := range t.Deps {
		dt, found := m.done.get(id)
		if !found || t.Gate && !dt.kept {
			return stepDecision{}, false
		}
		if t.Gate {
			known[k] = dt
		}
	}
	if !t.Gate {
		return stepDecision{run: true}, true
	}
	deps := make([]*store.Instance, len(known))
	for k, dt := range known {
		deps[k] = &store.Instance{Result: dt.result}
	}
	d.out, d.results, d.err = gateResults(p, deps)
	return d, true
}

// joinsReady returns the dependents among ids to wake: all but the fan-in
// tasks stored here that still wait for a dependency. For each of those
// it follows the dependencies in order from where it last stopped: known
// done here, or read (a chunk at a time, after the ends in recs are
// stored), up to the first one not ended. That one's end releases the
// task later: here when it runs here (this manager's next batch looks
// again), else by the manager that ends it, which reads what it does
// not know after its end is stored, or, not knowing the task, wakes it
// for its gate to decide. So of the managers ending the last two
// dependencies at once, the later sees both ended. A task one of whose
// dependencies ended without completing is woken at once (its gate
// follows its policy).
func (m *Manager) joinsReady(ctx context.Context, ids []string, recs []*store.Instance) []string {
	failed := map[string]bool{}
	for _, r := range recs {
		if r.Task != nil && r.State.Final() && r.State != store.Completed {
			for _, id := range r.Task.Dependents {
				failed[id] = true
			}
		}
	}
	out := ids[:0]
	for _, id := range ids {
		j := m.done.join(id)
		if j == nil || failed[id] || m.joinEnded(ctx, j) {
			m.done.forget(id)
			out = append(out, id)
		}
	}
	return out
}

// joinEnded advances j past the dependencies known ended and reports
// whether it reached the end; a failed read reports true (the gate
// decides).
func (m *Manager) joinEnded(ctx context.Context, j *joinWait) bool {
	m.done.mu.Lock()
	next := j.next
	m.done.mu.Unlock()
	defer func() {
		m.done.mu.Lock()
		j.next = max(j.next, next)
		m.done.mu.Unlock()
	}()
	for next < len(j.deps) {
		id := j.deps[next]
		if _, ok := m.done.get(id); ok {
			next++
			continue
		}
		if m.active.get(id) != nil {
			return false // runs here: this manager's batch with its end looks again
		}
		got, err := m.readIDs(ctx, j.deps[next:min(next+gateChunk, len(j.deps))])
		if err != nil {
			return true
		}
		for _, d := range got {
			if d == nil || !d.State.Final() {
				return false
			}
			next++
		}
	}
	return true
}

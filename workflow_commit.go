package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobkit/job/store"
)

// A workflow stored in parts. A store whose Enqueue splits a large call
// over several atomic writes (store.PartialEnqueuer: etcd, past one
// transaction) may keep part of a call that fails. ScheduleWorkflow then
// stores the workflow under a commit marker, its end: every task first,
// marked Parted, those due at once held back one recheck interval, then
// the end alone, then a wake-up of the held-back tasks. A Parted task
// runs only once its workflow's end is stored (its gate looks, unless
// this manager knows it stored); one found without an end after
// partedGraceRechecks recheck intervals is what a failed call left, and
// is canceled without running. So a workflow whose call failed runs
// nothing, and is not seen (GetWorkflow and ListWorkflows find workflows
// by their ends); repeating the call with the same WithWorkflowID within
// that time stores the rest and runs it whole.

// partedGraceRechecks is how many recheck intervals (WithShardRecheck) a
// Parted task waits for its workflow's end before it counts as left by a
// failed call and is canceled.
const partedGraceRechecks = 10

// errNotStoredWhole is the error of a Parted task canceled for want of
// its workflow's end.
var errNotStoredWhole = errors.New("job: its workflow was not stored whole")

// enqueueWorkflow stores recs, a workflow's records with its end last:
// in one Enqueue when the store writes it atomically, else in parts under
// the end as commit marker (above). The results are in recs' order.
func (m *Manager) enqueueWorkflow(ctx context.Context, recs []*store.Instance, now time.Time) ([]store.EnqueueResult, error) {
	p := &store.EnqueueParams{Instances: recs, Node: m.node, Now: now}
	pe, ok := m.store.(store.PartialEnqueuer)
	if !ok || pe.EnqueueAtomic(p) {
		return m.store.Enqueue(ctx, p)
	}
	end := recs[len(recs)-1]
	var held []string
	for _, r := range recs {
		r.Task.Parted = true
		if r == end {
			continue
		}
		if len(r.Task.Deps) == 0 && !r.RunAt.After(now) {
			r.RunAt = now.Add(m.shards.recheck) // woken once the end is stored
			held = append(held, r.ID)
		}
	}
	res, err := m.store.Enqueue(ctx, &store.EnqueueParams{Instances: recs[:len(recs)-1], Node: m.node, Now: now})
	if err != nil {
		return nil, err
	}
	for _, r := range res {
		if r.Err != nil { // reported by the caller; the end is not stored
			return append(res, store.EnqueueResult{ID: end.ID, Err: fmt.Errorf("not stored, for a refused task: %w", r.Err)}), nil
		}
	}
	endRes, err := m.store.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{end}, Node: m.node, Now: now})
	if err != nil {
		return nil, err
	}
	if len(endRes) == 1 && endRes[0].Err == nil {
		m.done.commit(end.ID)
		if len(held) > 0 {
			if werr := m.store.Wake(ctx, &store.WakeParams{IDs: held, Now: m.clock.Now()}); werr != nil {
				m.log.Warn("workflow: waking its first tasks after storing it in parts; they start at their recheck", "workflow", end.ID, "tasks", len(held), "err", werr)
			}
		}
	}
	return append(res, endRes...), nil
}

// commit remembers that the end of the workflow id, stored in parts, is
// stored.
func (d *doneTasks) commit(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.committed == nil {
		d.committed = make(map[string]bool)
	}
	if len(d.committed) >= doneTaskCap {
		d.oldCommitted, d.committed = d.committed, make(map[string]bool)
	}
	d.committed[id] = true
}

// isCommitted reports whether commit(id) was called (and not forgotten).
func (d *doneTasks) isCommitted(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.committed[id] || d.oldCommitted[id]
}

// partedGate decides for the claimed Parted task p whether its workflow
// is stored whole: ok when its end is stored; otherwise the outcome to
// record: handed back to look again (the call may still be writing), or,
// past the grace, canceled without running.
func (m *Manager) partedGate(ctx context.Context, p *store.Instance) (out store.Outcome, err error, ok bool) {
	wf := p.Task.Workflow
	if m.done.isCommitted(wf) {
		return store.Outcome{}, nil, true
	}
	now := m.clock.Now()
	got, rerr := m.readIDs(ctx, []string{wf})
	switch {
	case rerr == nil && got[0] != nil:
		m.done.commit(wf)
		return store.Outcome{}, nil, true
	case rerr != nil || now.Sub(p.CreatedAt) < partedGraceRechecks*m.shards.recheck:
		why := "its workflow's end is not stored yet (the workflow is being stored in parts)"
		if rerr != nil {
			why = "reading its workflow's end: " + rerr.Error()
		}
		return store.Outcome{ID: p.ID, Attempt: p.Attempt, State: store.Scheduled, RunAt: now.Add(m.shards.recheck), Release: true,
			Error: "waiting: " + why}, nil, false
	}
	err = fmt.Errorf("%w: task %q was stored %v ago and its workflow %s has no end, so the ScheduleWorkflow call that stored it failed part way; canceled without running: schedule the workflow again", errNotStoredWhole, p.Task.Name, now.Sub(p.CreatedAt).Round(time.Millisecond), wf)
	return store.Outcome{ID: p.ID, Attempt: p.Attempt, State: store.Canceled, Error: err.Error()}, err, false
}

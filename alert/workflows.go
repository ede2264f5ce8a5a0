package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// WorkflowFailed fires when a workflow ends failed (a task ended
// Terminated, Canceled or TimedOut and the workflow's end failed), one
// incident per workflow name, and clears when a workflow of that name
// completes. It watches every workflow of the namespace: a rule of this
// condition takes no kind, trigger or queue.
const WorkflowFailed Condition = "workflow_failed"

func init() { Conditions = append(Conditions, WorkflowFailed) }

// workflowFailures moves the failed-workflow runs of next by the events
// (a workflow's end is an instance with the workflow's ID: the events of
// the instances that ended are read to find the ends) and fires the rules
// for the names whose last workflow failed.
func (e *evaluator) workflowFailures(ctx context.Context, rules []*Rule, events []store.Event, next, prev *evalState, now time.Time) error {
	if len(rules) == 0 {
		next.WorkflowFails = nil
		return nil
	}
	if next.WorkflowFails == nil {
		next.WorkflowFails = map[string]*failRun{}
	}
	// Completed ends matter only while a failure is open.
	var ids []string
	for _, ev := range events {
		switch ev.State {
		case store.Terminated, store.TimedOut:
			ids = append(ids, ev.InstanceID)
		case store.Completed:
			if len(next.WorkflowFails) > 0 {
				ids = append(ids, ev.InstanceID)
			}
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	ends := map[string]*store.Instance{}
	for chunk := range slices.Chunk(ids, store.MaxQueryIDs) {
		got, err := e.s.cfg.Store.LookupInstances(ctx, &store.Query{IDs: chunk, Limit: len(chunk)})
		if err != nil && got == nil {
			return fmt.Errorf("alert: look up the instances that ended (workflow_failed): %w", err)
		}
		for _, in := range got {
			if in != nil && in.Task != nil && in.Task.Name == store.EndTask && in.ID == in.Task.Workflow {
				ends[in.ID] = in
			}
		}
	}
	for _, ev := range events {
		end := ends[ev.InstanceID]
		if end == nil || end.State != ev.State {
			continue
		}
		name := workflowName(end)
		for _, r := range rules {
			k := key(r.Name, name)
			if ev.State == store.Completed {
				delete(next.WorkflowFails, k)
				continue
			}
			c := 1
			if run := next.WorkflowFails[k]; run != nil {
				c = run.Count + 1
			}
			next.WorkflowFails[k] = &failRun{Count: c, Last: Subject{
				Workflow: name, InstanceID: end.ID, Error: end.Error,
				Detail: fmt.Sprintf("workflow %s (%s) failed; %d in a row", name, end.ID, c),
			}}
		}
	}
	for k, run := range next.WorkflowFails {
		rule, _, _ := strings.Cut(k, "\x00")
		i := slices.IndexFunc(rules, func(r *Rule) bool { return r.Name == rule })
		if i < 0 {
			delete(next.WorkflowFails, k) // the rule is gone or disabled
			continue
		}
		next.fire(rules[i], run.Last, now, prev)
	}
	return nil
}

// workflowName is the name a workflow's end carries as its argument.
func workflowName(end *store.Instance) string {
	var names []string
	if json.Unmarshal(end.Args, &names) != nil || len(names) != 1 {
		return ""
	}
	return names[0]
}

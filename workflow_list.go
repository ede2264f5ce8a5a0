package job

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jobkit/job/store"
)

// WorkflowQuery selects workflows for ListWorkflows. Zero fields match
// everything.
type WorkflowQuery struct {
	// Name selects the workflows of this name ("" matches all).
	Name string
	// States selects workflows in any of these states (none: all).
	States []WorkflowState
	// Limit is the most workflows a page holds: 0 means
	// DefaultWorkflowPageSize; at most MaxWorkflowPageSize.
	Limit int
	// Cursor is the Next of the previous page ("" for the first).
	Cursor string
}

// DefaultWorkflowPageSize and MaxWorkflowPageSize bound the pages of
// ListWorkflows.
const (
	DefaultWorkflowPageSize = 20
	MaxWorkflowPageSize     = 100
)

// workflowScanPage is how many instances ListWorkflows reads per store
// call, and workflowScanPages how many calls it makes at most per page.
const (
	workflowScanPage  = 200
	workflowScanPages = 20
)

// workflowCursor is ListWorkflows' cursor: the instance page it stopped
// in and the last workflow it returned from that page.
type workflowCursor struct {
	Page  string `json:"p,omitempty"`
	After string `json:"a,omitempty"`
}

// ListWorkflows returns one page of the workflows q selects, newest
// first, each read as GetWorkflow reads it (its tasks included). Pass the
// page's Next as q.Cursor for the next page.
//
// Workflows are found among the instances (each has an end instance with
// its ID): a call reads at most 4,000 instances, so a page may hold fewer
// than q.Limit workflows, even none, while Next is not empty. Filtering by
// state reads the open workflows' tasks. A bad cursor or limit is an
// error wrapping ErrInvalidOption.
func (m *Manager) ListWorkflows(ctx context.Context, q WorkflowQuery) (*Page[*WorkflowInfo], error) {
	limit, cur, err := checkWorkflowQuery(q)
	if err != nil {
		return nil, fmt.Errorf("job: list workflows: %w", err)
	}
	sq := store.Query{Limit: workflowScanPage, States: endStates(q.States)}
	out := &Page[*WorkflowInfo]{}
	for range workflowScanPages {
		sq.Cursor = cur.Page
		p, err := m.store.PageInstances(ctx, &sq)
		if err != nil {
			return nil, pageErr("workflows", err)
		}
		full, err := m.addWorkflows(ctx, q, limit, cur, p.Instances, out)
		if err != nil {
			return nil, err
		}
		if full {
			return out, nil
		}
		if p.Next == "" {
			return out, nil
		}
		cur = workflowCursor{Page: p.Next}
	}
	out.Next = encodeWorkflowCursor(cur)
	return out, nil
}

// checkWorkflowQuery checks q and returns its page size and decoded
// cursor; an error wraps ErrInvalidOption.
func checkWorkflowQuery(q WorkflowQuery) (limit int, cur workflowCursor, err error) {
	limit = q.Limit
	switch {
	case limit < 0 || limit > MaxWorkflowPageSize:
		return 0, cur, fmt.Errorf("%w: limit %d; want 0 (for %d) to %d", ErrInvalidOption, limit, DefaultWorkflowPageSize, MaxWorkflowPageSize)
	case limit == 0:
		limit = DefaultWorkflowPageSize
	}
	if q.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		if err == nil {
			err = json.Unmarshal(b, &cur)
		}
		if err != nil || (cur.Page == "" && cur.After == "") {
			return 0, cur, fmt.Errorf("%w: cursor %q is not one ListWorkflows returned; start again without a cursor", ErrInvalidOption, q.Cursor)
		}
	}
	for _, s := range q.States {
		switch s {
		case WorkflowPending, WorkflowRunning, WorkflowCompleted, WorkflowFailed, WorkflowCanceled:
		default:
			return 0, cur, fmt.Errorf("%w: state %q; want pending, running, completed, failed or canceled", ErrInvalidOption, s)
		}
	}
	return limit, cur, nil
}

// addWorkflows adds to out the workflows q selects among recs, one page
// of instances (the page cur.Page, read past cur.After), each read as
// GetWorkflow reads it; full reports that out holds limit workflows (its
// Next then set).
func (m *Manager) addWorkflows(ctx context.Context, q WorkflowQuery, limit int, cur workflowCursor, recs []*store.Instance, out *Page[*WorkflowInfo]) (full bool, err error) {
	if cur.After != "" {
		if i := slices.IndexFunc(recs, func(r *store.Instance) bool { return r.ID == cur.After }); i >= 0 {
			recs = recs[i+1:]
		}
	}
	for _, r := range recs {
		if r.Task == nil || r.Task.Name != store.EndTask || r.ID != r.Task.Workflow {
			continue
		}
		if q.Name != "" && endName(r) != q.Name {
			continue
		}
		info, err := m.GetWorkflow(ctx, r.ID)
		if errors.Is(err, ErrNotFound) {
			continue // pruned meanwhile
		}
		if err != nil {
			return false, fmt.Errorf("job: list workflows: %w", err)
		}
		if len(q.States) > 0 && !slices.Contains(q.States, info.State) {
			continue
		}
		out.Items = append(out.Items, info)
		if len(out.Items) == limit {
			out.Next = encodeWorkflowCursor(workflowCursor{Page: cur.Page, After: r.ID})
			return true, nil
		}
	}
	return false, nil
}

func encodeWorkflowCursor(c workflowCursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// endStates are the states of the ends of workflows in states (nil for
// all).
func endStates(states []WorkflowState) []store.State {
	var out []store.State
	for _, s := range states {
		switch s {
		case WorkflowPending, WorkflowRunning:
			out = append(out, store.Created, store.Scheduled, store.Processing)
		case WorkflowCompleted:
			out = append(out, store.Completed)
		case WorkflowFailed:
			out = append(out, store.Terminated, store.TimedOut)
		case WorkflowCanceled:
			out = append(out, store.Canceled)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// endName is the workflow name an end carries as its argument.
func endName(end *store.Instance) string {
	names, err := decodeJSONArray(end.Args)
	if err != nil || len(names) != 1 {
		return ""
	}
	s, _ := names[0].(string)
	return s
}

// RetryWorkflowTask retries the task named task of workflow id (an added
// task is "<adder>/<name>"), as RetryInstance does: the dependents its
// failure canceled, and the workflow's end when it failed, wait for it
// again. It returns the workflow as it is then. ErrNotFound for an
// unknown workflow or task; ErrNotFinished while the task has not ended.
func (m *Manager) RetryWorkflowTask(ctx context.Context, id, task string, opts ...AdminOption) (*WorkflowInfo, error) {
	if err := validTaskName(task); err != nil {
		return nil, fmt.Errorf("job: retry workflow %s task: %w: %w", id, ErrInvalidOption, err)
	}
	info, err := m.GetWorkflow(ctx, id)
	if err != nil {
		return nil, err
	}
	t := info.Task(task)
	if t == nil {
		names := make([]string, len(info.Tasks))
		for i, t := range info.Tasks {
			names[i] = t.Task
		}
		return nil, fmt.Errorf("job: retry workflow %s task %q: %w: the workflow has no such task (it has %s)", id, task, ErrNotFound, quoteList(names, 10))
	}
	if _, err := m.RetryInstance(ctx, t.ID, opts...); err != nil {
		return nil, fmt.Errorf("job: retry workflow %s task %q: %w", id, task, err)
	}
	return m.GetWorkflow(ctx, id)
}

// quoteList quotes up to n names, saying how many more there are.
func quoteList(names []string, n int) string {
	s := ""
	for i, name := range names {
		if i == n {
			return s + fmt.Sprintf(" and %d more", len(names)-n)
		}
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", name)
	}
	return s
}

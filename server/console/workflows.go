package console

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// Workflows (issue 35): a list page, and a page per workflow that draws
// its DAG, each task a box in its state linking to its instance page. The
// page is refreshed live like every other (a task's change is an event).

func init() {
	pageNames = append(pageNames, "workflows", "workflow")
}

// workflowRoutes adds the workflow pages to m.
func (c *Console) workflowRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /workflows", c.workflowsPage)
	m.HandleFunc("GET /workflows/{id}", c.workflowPage)
}

// workflowStateName is a workflow state's lower-case name.
func workflowStateName(s pb.WorkflowState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_STATE_"))
}

// workflowRow is one workflow of the list page.
type workflowRow struct {
	W                           *pb.Workflow
	State                       string
	Tasks, Done, Failed, Active int64
}

func (c *Console) workflowsPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	q := r.URL.Query()
	req := &pb.ListWorkflowsRequest{PageSize: 50, PageToken: q.Get("page"), Name: strings.TrimSpace(q.Get("name"))}
	state := q.Get("state")
	if state != "" {
		st, ok := pb.WorkflowState_value["WORKFLOW_STATE_"+strings.ToUpper(state)]
		if !ok {
			c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("state %q; choose pending, running, completed, failed or canceled", state)))
			return
		}
		req.States = []pb.WorkflowState{pb.WorkflowState(st)}
	}
	res, err := s.api.workflows.ListWorkflows(r.Context(), connect.NewRequest(req))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	var rows []workflowRow
	for _, wf := range res.Msg.GetWorkflows() {
		n := wf.GetTaskCounts()
		rows = append(rows, workflowRow{W: wf, State: workflowStateName(wf.GetState()),
			Tasks:  n.GetCreated() + n.GetScheduled() + n.GetProcessing() + n.GetCompleted() + n.GetTerminated() + n.GetCanceled() + n.GetTimedOut(),
			Done:   n.GetCompleted(),
			Failed: n.GetTerminated() + n.GetCanceled() + n.GetTimedOut(),
			Active: n.GetProcessing(),
		})
	}
	c.render(w, r, s, "workflows", http.StatusOK, map[string]any{
		"Rows": rows, "Next": res.Msg.GetNextPageToken(), "Name": req.Name, "State": state,
		"States": []string{"pending", "running", "completed", "failed", "canceled"},
	})
}

// The DAG's geometry, in SVG user units.
const (
	dagNodeW, dagNodeH = 170, 44
	dagGapX, dagGapY   = 56, 14
	dagPad             = 8
	// dagMaxTasks is the most tasks drawn; a larger workflow is shown as
	// its table only.
	dagMaxTasks = 400
)

// dagNode is one task drawn.
type dagNode struct {
	ID, Name, State, Kind string
	X, Y, W, H            int
	TextX, NameY, StateY  int
}

// dagEdge is one dependency drawn, from the dependency to the dependent.
type dagEdge struct {
	From, To, Path, State string
}

// dag is a workflow's graph laid out in columns: a task's column is the
// length of the longest chain of dependencies before it.
type dag struct {
	Nodes         []dagNode
	Edges         []dagEdge
	Width, Height int
}

// layoutDAG lays the tasks out left to right (nil when there are too
// many to draw).
func layoutDAG(tasks []*pb.Instance) *dag {
	if len(tasks) == 0 || len(tasks) > dagMaxTasks {
		return nil
	}
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		index[t.GetId()] = i
	}
	col := make([]int, len(tasks))
	state := make([]int8, len(tasks)) // 0 unseen, 1 in progress, 2 done
	var depth func(i int) int
	depth = func(i int) int {
		switch state[i] {
		case 2:
			return col[i]
		case 1:
			return 0 // a cycle cannot be stored; do not loop on bad data
		}
		state[i] = 1
		d := 0
		for _, dep := range tasks[i].GetDependsOn() {
			if j, ok := index[dep]; ok {
				d = max(d, depth(j)+1)
			}
		}
		col[i], state[i] = d, 2
		return d
	}
	rows := map[int]int{}
	g := &dag{}
	for i, t := range tasks {
		c := depth(i)
		r := rows[c]
		rows[c]++
		x, y := dagPad+c*(dagNodeW+dagGapX), dagPad+r*(dagNodeH+dagGapY)
		g.Nodes = append(g.Nodes, dagNode{ID: t.GetId(), Name: t.GetTask(), State: stateName(t.GetState()), Kind: t.GetKind(),
			X: x, Y: y, W: dagNodeW, H: dagNodeH, TextX: x + 10, NameY: y + 18, StateY: y + 35})
		g.Width = max(g.Width, x+dagNodeW+dagPad)
		g.Height = max(g.Height, y+dagNodeH+dagPad)
	}
	for i, t := range tasks {
		to := g.Nodes[i]
		for _, dep := range t.GetDependsOn() {
			j, ok := index[dep]
			if !ok {
				continue
			}
			from := g.Nodes[j]
			x1, y1 := from.X+from.W, from.Y+from.H/2
			x2, y2 := to.X, to.Y+to.H/2
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, dagEdge{From: from.Name, To: to.Name, State: from.State,
				Path: fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, mid, y1, mid, y2, x2-4, y2)})
		}
	}
	slices.SortStableFunc(g.Edges, func(a, b dagEdge) int { return strings.Compare(a.From+"\x00"+a.To, b.From+"\x00"+b.To) })
	return g
}

func (c *Console) workflowPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	res, err := s.api.workflows.GetWorkflow(r.Context(), connect.NewRequest(&pb.GetWorkflowRequest{Id: r.PathValue("id")}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	wf := res.Msg.GetWorkflow()
	names := map[string]string{}
	for _, t := range wf.GetTasks() {
		names[t.GetId()] = t.GetTask()
	}
	type taskRow struct {
		T     *pb.Instance
		After []string
	}
	var rows []taskRow
	for _, t := range wf.GetTasks() {
		var after []string
		for _, d := range t.GetDependsOn() {
			if n, ok := names[d]; ok {
				after = append(after, n)
			}
		}
		slices.Sort(after)
		rows = append(rows, taskRow{T: t, After: after})
	}
	c.render(w, r, s, "workflow", http.StatusOK, map[string]any{
		"W": wf, "State": workflowStateName(wf.GetState()), "DAG": layoutDAG(wf.GetTasks()), "Rows": rows, "MaxDrawn": dagMaxTasks,
	})
}

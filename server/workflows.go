package server

import (
	"context"
	"fmt"
	"maps"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/store"
)

func init() {
	serviceNames = append(serviceNames, jobkitv1connect.WorkflowServiceName)
	maps.Copy(procedureRoles, map[string]Role{
		jobkitv1connect.WorkflowServiceCreateWorkflowProcedure:    RoleOperator,
		jobkitv1connect.WorkflowServiceGetWorkflowProcedure:       RoleViewer,
		jobkitv1connect.WorkflowServiceListWorkflowsProcedure:     RoleViewer,
		jobkitv1connect.WorkflowServiceCancelWorkflowProcedure:    RoleOperator,
		jobkitv1connect.WorkflowServiceRetryWorkflowTaskProcedure: RoleOperator,
	})
	codeRules = append(codeRules, codeRule{job.ErrWorkflow, connect.CodeInvalidArgument, ""})
}

// workflowService implements jobkitv1connect.WorkflowServiceHandler on
// the namespace's manager.
type workflowService struct{}

// mountWorkflows serves WorkflowService on s's mux with opts.
func (s *Server) mountWorkflows(opts ...connect.HandlerOption) {
	s.mux.Handle(jobkitv1connect.NewWorkflowServiceHandler(workflowService{}, opts...))
}

// depFailures maps the API's dependency failure policies to the engine's.
var depFailures = map[pb.DependencyFailure]job.DepFailure{
	pb.DependencyFailure_DEPENDENCY_FAILURE_CANCEL:          job.DepCancel,
	pb.DependencyFailure_DEPENDENCY_FAILURE_RUN:             job.DepRun,
	pb.DependencyFailure_DEPENDENCY_FAILURE_CANCEL_WORKFLOW: job.DepCancelWorkflow,
}

// workflowStates maps the engine's workflow states to the API's.
var workflowStates = map[job.WorkflowState]pb.WorkflowState{
	job.WorkflowPending:   pb.WorkflowState_WORKFLOW_STATE_PENDING,
	job.WorkflowRunning:   pb.WorkflowState_WORKFLOW_STATE_RUNNING,
	job.WorkflowCompleted: pb.WorkflowState_WORKFLOW_STATE_COMPLETED,
	job.WorkflowFailed:    pb.WorkflowState_WORKFLOW_STATE_FAILED,
	job.WorkflowCanceled:  pb.WorkflowState_WORKFLOW_STATE_CANCELED,
}

var workflowStatesBack = reverse(workflowStates)

// depFailureFromProto converts a policy; ok is false for unspecified.
func depFailureFromProto(field string, p pb.DependencyFailure) (f job.DepFailure, ok bool, err error) {
	if p == pb.DependencyFailure_DEPENDENCY_FAILURE_UNSPECIFIED {
		return 0, false, nil
	}
	f, ok = depFailures[p]
	if !ok {
		return 0, false, fmt.Errorf("%w: %s is %v; want DEPENDENCY_FAILURE_CANCEL, _RUN or _CANCEL_WORKFLOW", store.ErrInvalid, field, p)
	}
	return f, true, nil
}

// workflowFromProto builds the workflow a CreateWorkflowRequest describes.
func workflowFromProto(req *pb.CreateWorkflowRequest) (*job.Workflow, error) {
	if req.GetName() == "" {
		return nil, fmt.Errorf("%w: name is required; name the workflow (it labels its metrics)", store.ErrInvalid)
	}
	if len(req.GetTasks()) == 0 {
		return nil, fmt.Errorf("%w: workflow %q has no tasks; send at least one in tasks", store.ErrInvalid, req.GetName())
	}
	if len(req.GetTasks()) > job.MaxWorkflowTasks {
		return nil, fmt.Errorf("%w: workflow %q has %d tasks; send at most %d", store.ErrInvalid, req.GetName(), len(req.GetTasks()), job.MaxWorkflowTasks)
	}
	var wopts []job.WorkflowOption
	if id := req.GetId(); id != "" {
		wopts = append(wopts, job.WithWorkflowID(id))
	}
	f, ok, err := depFailureFromProto("on_dependency_failure", req.GetOnDependencyFailure())
	if err != nil {
		return nil, err
	}
	if ok {
		wopts = append(wopts, job.WithDepFailure(f))
	}
	wf := job.NewWorkflow(req.GetName(), wopts...)
	for i, t := range req.GetTasks() {
		if t.GetJob() == nil {
			return nil, fmt.Errorf("%w: tasks[%d] (%q) has no job; send job with at least its kind", store.ErrInvalid, i, t.GetName())
		}
		kind, opts, err := scheduleOptions(t.GetJob())
		if err != nil {
			return nil, fmt.Errorf("tasks[%d] (%q): %w", i, t.GetName(), err)
		}
		if deps := t.GetDependsOn(); len(deps) > 0 {
			opts = append(opts, job.After(deps...))
		}
		f, ok, err := depFailureFromProto(fmt.Sprintf("tasks[%d].on_dependency_failure", i), t.GetOnDependencyFailure())
		if err != nil {
			return nil, err
		}
		if ok {
			opts = append(opts, job.WithDepFailure(f))
		}
		wf.Add(t.GetName(), kind, opts...)
	}
	return wf, nil
}

// workflowToProto converts a workflow; withTasks false leaves the tasks
// out (their counts stay).
func workflowToProto(w *job.WorkflowInfo, withTasks bool) *pb.Workflow {
	var counts [store.TimedOut + 1]int64
	out := &pb.Workflow{Id: w.ID, Name: w.Name, State: workflowStates[w.State]}
	for _, t := range w.Tasks {
		if int(t.State) < len(counts) {
			counts[t.State]++
		}
		if withTasks {
			out.Tasks = append(out.Tasks, instanceToProto(t))
		}
	}
	out.TaskCounts = countsToProto(&counts)
	if w.End != nil {
		out.CreatedAt = ts(w.End.CreatedAt)
		if w.End.State.Final() {
			out.EndedAt = ts(w.End.FinishedAt)
			out.Error = w.End.Error
		}
	}
	return out
}

// CreateWorkflow implements WorkflowService.CreateWorkflow.
func (workflowService) CreateWorkflow(ctx context.Context, req *connect.Request[pb.CreateWorkflowRequest]) (*connect.Response[pb.CreateWorkflowResponse], error) {
	wf, err := workflowFromProto(req.Msg)
	if err != nil {
		return nil, toConnect(err)
	}
	info, err := managerOf(ctx).ScheduleWorkflow(ctx, wf)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.CreateWorkflowResponse{Workflow: workflowToProto(info, true)}), nil
}

// GetWorkflow implements WorkflowService.GetWorkflow.
func (workflowService) GetWorkflow(ctx context.Context, req *connect.Request[pb.GetWorkflowRequest]) (*connect.Response[pb.GetWorkflowResponse], error) {
	if req.Msg.GetId() == "" {
		return nil, invalid("id is required; send the ID of the workflow to read (ListWorkflows shows them)")
	}
	info, err := managerOf(ctx).GetWorkflow(ctx, req.Msg.GetId())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.GetWorkflowResponse{Workflow: workflowToProto(info, true)}), nil
}

// ListWorkflows implements WorkflowService.ListWorkflows.
func (workflowService) ListWorkflows(ctx context.Context, req *connect.Request[pb.ListWorkflowsRequest]) (*connect.Response[pb.ListWorkflowsResponse], error) {
	n := req.Msg.GetPageSize()
	switch {
	case n < 0:
		return nil, invalid(fmt.Sprintf("page_size %d is negative; send 0 (for %d) up to %d", n, job.DefaultWorkflowPageSize, job.MaxWorkflowPageSize))
	case n > job.MaxWorkflowPageSize:
		return nil, invalid(fmt.Sprintf("page_size %d is above the limit; send at most %d", n, job.MaxWorkflowPageSize))
	}
	q := job.WorkflowQuery{Name: req.Msg.GetName(), Limit: int(n), Cursor: req.Msg.GetPageToken()}
	for _, s := range req.Msg.GetStates() {
		st, ok := workflowStatesBack[s]
		if !ok {
			return nil, invalid(fmt.Sprintf("states holds %v; want WORKFLOW_STATE_PENDING, _RUNNING, _COMPLETED, _FAILED or _CANCELED", s))
		}
		q.States = append(q.States, st)
	}
	p, err := managerOf(ctx).ListWorkflows(ctx, q)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pb.ListWorkflowsResponse{NextPageToken: p.Next}
	for _, w := range p.Items {
		out.Workflows = append(out.Workflows, workflowToProto(w, false))
	}
	return connect.NewResponse(out), nil
}

// CancelWorkflow implements WorkflowService.CancelWorkflow.
func (workflowService) CancelWorkflow(ctx context.Context, req *connect.Request[pb.CancelWorkflowRequest]) (*connect.Response[pb.CancelWorkflowResponse], error) {
	if req.Msg.GetId() == "" {
		return nil, invalid("id is required; send the ID of the workflow to cancel")
	}
	info, err := managerOf(ctx).CancelWorkflow(ctx, req.Msg.GetId())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.CancelWorkflowResponse{Workflow: workflowToProto(info, true)}), nil
}

// RetryWorkflowTask implements WorkflowService.RetryWorkflowTask.
func (workflowService) RetryWorkflowTask(ctx context.Context, req *connect.Request[pb.RetryWorkflowTaskRequest]) (*connect.Response[pb.RetryWorkflowTaskResponse], error) {
	switch {
	case req.Msg.GetWorkflowId() == "":
		return nil, invalid("workflow_id is required; send the ID of the workflow")
	case req.Msg.GetTask() == "":
		return nil, invalid("task is required; send the name of the task to retry (GetWorkflow lists them)")
	}
	var opts []job.AdminOption
	if req.Msg.GetResetAttempts() {
		opts = append(opts, job.WithResetAttempts())
	}
	info, err := managerOf(ctx).RetryWorkflowTask(ctx, req.Msg.GetWorkflowId(), req.Msg.GetTask(), opts...)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.RetryWorkflowTaskResponse{Workflow: workflowToProto(info, true)}), nil
}

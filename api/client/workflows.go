package client

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// CreateWorkflow stores a workflow's tasks, all or none, and returns it as
// stored; CodeInvalidArgument (naming the task and the fix) for a cycle, an
// unknown dependency, a duplicate name or options a task cannot have,
// CodeNotFound for a task of an unknown kind. Repeating it with the same
// req.Id stores nothing twice.
func (c *Client) CreateWorkflow(ctx context.Context, req *jobkitv1.CreateWorkflowRequest) (*jobkitv1.Workflow, error) {
	res, err := c.workflows.CreateWorkflow(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, wrap(fmt.Sprintf("create workflow %q", req.GetName()), err)
	}
	return res.Msg.GetWorkflow(), nil
}

// GetWorkflow returns the workflow with that ID and its tasks;
// CodeNotFound when there is none.
func (c *Client) GetWorkflow(ctx context.Context, id string) (*jobkitv1.Workflow, error) {
	res, err := c.workflows.GetWorkflow(ctx, connect.NewRequest(&jobkitv1.GetWorkflowRequest{Id: id}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("get workflow %s", id), err)
	}
	return res.Msg.GetWorkflow(), nil
}

// ListWorkflows returns one page of the workflows req selects, newest
// first, with their task counts (not their tasks), and the next page's
// token in Next ("" after the last). A page may hold fewer workflows than
// asked, even none, while Next is set.
func (c *Client) ListWorkflows(ctx context.Context, req *jobkitv1.ListWorkflowsRequest) (*job.Page[*jobkitv1.Workflow], error) {
	res, err := c.workflows.ListWorkflows(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, wrap("list workflows", err)
	}
	return &job.Page[*jobkitv1.Workflow]{Items: res.Msg.GetWorkflows(), Next: res.Msg.GetNextPageToken()}, nil
}

// CancelWorkflow cancels the pending and running tasks of the workflow
// with that ID and returns it; CodeNotFound when there is none.
func (c *Client) CancelWorkflow(ctx context.Context, id string) (*jobkitv1.Workflow, error) {
	res, err := c.workflows.CancelWorkflow(ctx, connect.NewRequest(&jobkitv1.CancelWorkflowRequest{Id: id}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("cancel workflow %s", id), err)
	}
	return res.Msg.GetWorkflow(), nil
}

// RetryWorkflowTask retries the task named task of workflow id, which
// ended without completing; the dependents its failure canceled wait for
// it again. CodeFailedPrecondition while the task has not ended.
func (c *Client) RetryWorkflowTask(ctx context.Context, id, task string, resetAttempts bool) (*jobkitv1.Workflow, error) {
	res, err := c.workflows.RetryWorkflowTask(ctx, connect.NewRequest(&jobkitv1.RetryWorkflowTaskRequest{WorkflowId: id, Task: task, ResetAttempts: resetAttempts}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("retry workflow %s task %q", id, task), err)
	}
	return res.Msg.GetWorkflow(), nil
}

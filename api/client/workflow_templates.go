package client

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// PutWorkflowTemplate stores the workflow template templateJSON (a
// workflow as data with parameters, doc/workflows.md) under its name and
// returns it as stored. ifVersion is the version read (0: create or
// replace whatever is stored); createOnly refuses a name taken
// (CodeAlreadyExists). CodeInvalidArgument, naming the task or parameter
// and the fix, for a template that does not check.
//
// Deprecated: use Admin().PutWorkflowTemplate. It stays for one release.
func (c *Client) PutWorkflowTemplate(ctx context.Context, templateJSON string, ifVersion int64, createOnly bool) (*jobkitv1.WorkflowTemplate, error) {
	res, err := c.workflows.PutWorkflowTemplate(ctx, connect.NewRequest(&jobkitv1.PutWorkflowTemplateRequest{TemplateJson: templateJSON, IfVersion: ifVersion, CreateOnly: createOnly}))
	if err != nil {
		return nil, wrap("put workflow template", err)
	}
	return res.Msg.GetTemplate(), nil
}

// GetWorkflowTemplate returns the stored template name; CodeNotFound when
// there is none.
//
// Deprecated: use Admin().GetWorkflowTemplate. It stays for one release.
func (c *Client) GetWorkflowTemplate(ctx context.Context, name string) (*jobkitv1.WorkflowTemplate, error) {
	res, err := c.workflows.GetWorkflowTemplate(ctx, connect.NewRequest(&jobkitv1.GetWorkflowTemplateRequest{Name: name}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("get workflow template %q", name), err)
	}
	return res.Msg.GetTemplate(), nil
}

// ListWorkflowTemplates returns one page of the stored templates in name
// order (pageSize 0: 100), with the next page's token in Next.
//
// Deprecated: use Admin().ListWorkflowTemplates. It stays for one release.
func (c *Client) ListWorkflowTemplates(ctx context.Context, pageSize int32, pageToken string) (*job.Page[*jobkitv1.WorkflowTemplate], error) {
	res, err := c.workflows.ListWorkflowTemplates(ctx, connect.NewRequest(&jobkitv1.ListWorkflowTemplatesRequest{PageSize: pageSize, PageToken: pageToken}))
	if err != nil {
		return nil, wrap("list workflow templates", err)
	}
	return &job.Page[*jobkitv1.WorkflowTemplate]{Items: res.Msg.GetTemplates(), Next: res.Msg.GetNextPageToken()}, nil
}

// DeleteWorkflowTemplate deletes the stored template name (only at
// ifVersion when not 0); CodeNotFound when there is none.
//
// Deprecated: use Admin().DeleteWorkflowTemplate. It stays for one release.
func (c *Client) DeleteWorkflowTemplate(ctx context.Context, name string, ifVersion int64) error {
	_, err := c.workflows.DeleteWorkflowTemplate(ctx, connect.NewRequest(&jobkitv1.DeleteWorkflowTemplateRequest{Name: name, IfVersion: ifVersion}))
	if err != nil {
		return wrap(fmt.Sprintf("delete workflow template %q", name), err)
	}
	return nil
}

// RunWorkflowTemplate creates a workflow from the stored template name
// with paramsJSON (a JSON object of parameter values, "" for none) and
// returns it as stored; id "" is a new UUID, and a repeated call with the
// same id stores nothing twice.
func (c *Client) RunWorkflowTemplate(ctx context.Context, name, paramsJSON, id string) (*jobkitv1.Workflow, error) {
	res, err := c.workflows.RunWorkflowTemplate(ctx, connect.NewRequest(&jobkitv1.RunWorkflowTemplateRequest{Name: name, ParamsJson: paramsJSON, Id: id}))
	if err != nil {
		return nil, wrap(fmt.Sprintf("run workflow template %q", name), err)
	}
	return res.Msg.GetWorkflow(), nil
}

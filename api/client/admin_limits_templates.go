package client

import (
	"context"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// The operator's calls on concurrency limits and workflow templates, on
// Admin as job.Admin has them. The Client methods of the same names are
// deprecated wrappers kept for one release.

// SetConcurrencyLimit stores l, replacing the concurrency limit of the
// same kind and queue; every node applies it within a second
// (doc/limits.md). CodeInvalidArgument for a negative Max,
// CodeFailedPrecondition when the server's store cannot enforce limits
// (or, with PerKey, per-key limits).
func (a *Admin) SetConcurrencyLimit(ctx context.Context, l job.ConcurrencyLimit) error {
	return a.c.SetConcurrencyLimit(ctx, l)
}

// DeleteConcurrencyLimit removes the concurrency limit of kind in queue
// (either empty as it was set); CodeNotFound when there is none.
func (a *Admin) DeleteConcurrencyLimit(ctx context.Context, kind, queue string) error {
	return a.c.DeleteConcurrencyLimit(ctx, kind, queue)
}

// ListConcurrencyLimits returns the stored concurrency limits, by kind
// then queue, each with how many instances it matches run and wait now.
func (a *Admin) ListConcurrencyLimits(ctx context.Context) ([]job.LimitUse, error) {
	return a.c.ListConcurrencyLimits(ctx)
}

// PutWorkflowTemplate stores the workflow template templateJSON (a
// workflow as data with parameters, doc/workflows.md) under its name and
// returns it as stored. ifVersion is the version read (0: create or
// replace whatever is stored); createOnly refuses a name taken
// (CodeAlreadyExists). CodeInvalidArgument, naming the task or parameter
// and the fix, for a template that does not check.
func (a *Admin) PutWorkflowTemplate(ctx context.Context, templateJSON string, ifVersion int64, createOnly bool) (*jobkitv1.WorkflowTemplate, error) {
	return a.c.PutWorkflowTemplate(ctx, templateJSON, ifVersion, createOnly)
}

// GetWorkflowTemplate returns the stored template name; CodeNotFound when
// there is none.
func (a *Admin) GetWorkflowTemplate(ctx context.Context, name string) (*jobkitv1.WorkflowTemplate, error) {
	return a.c.GetWorkflowTemplate(ctx, name)
}

// ListWorkflowTemplates returns one page of the stored templates in name
// order (pageSize 0: 100), with the next page's token in Next.
func (a *Admin) ListWorkflowTemplates(ctx context.Context, pageSize int, pageToken string) (*job.Page[*jobkitv1.WorkflowTemplate], error) {
	return a.c.ListWorkflowTemplates(ctx, int32(pageSize), pageToken)
}

// DeleteWorkflowTemplate deletes the stored template name (only at
// ifVersion when not 0); CodeNotFound when there is none.
func (a *Admin) DeleteWorkflowTemplate(ctx context.Context, name string, ifVersion int64) error {
	return a.c.DeleteWorkflowTemplate(ctx, name, ifVersion)
}

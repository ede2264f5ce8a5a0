package client

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// CreateDefinition stores a new job definition (its version and times are
// ignored) and returns it as stored; CodeAlreadyExists when the kind has
// one.
func (a *Admin) CreateDefinition(ctx context.Context, d *jobkitv1.Definition) (*jobkitv1.Definition, error) {
	c := a.c
	op := fmt.Sprintf("create definition %q", d.GetKind())
	res, err := c.defs.CreateDefinition(ctx, connect.NewRequest(&jobkitv1.CreateDefinitionRequest{Definition: d}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetDefinition(), nil
}

// GetDefinition returns the stored definition of kind; CodeNotFound when
// there is none.
func (a *Admin) GetDefinition(ctx context.Context, kind string) (*jobkitv1.Definition, error) {
	c := a.c
	op := fmt.Sprintf("get definition %q", kind)
	res, err := c.defs.GetDefinition(ctx, connect.NewRequest(&jobkitv1.GetDefinitionRequest{Kind: kind}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetDefinition(), nil
}

// ListDefinitions returns one page of definitions sorted by kind (pageSize 0:
// 100), with the next page's token in Next ("" after the last).
func (a *Admin) ListDefinitions(ctx context.Context, pageSize int, pageToken string) (*job.Page[*jobkitv1.Definition], error) {
	c := a.c
	res, err := c.defs.ListDefinitions(ctx, connect.NewRequest(&jobkitv1.ListDefinitionsRequest{
		PageSize: int32(pageSize), PageToken: pageToken,
	}))
	if err != nil {
		return nil, wrap("list definitions", err)
	}
	return &job.Page[*jobkitv1.Definition]{Items: res.Msg.GetDefinitions(), Next: res.Msg.GetNextPageToken()}, nil
}

// UpdateDefinition replaces the stored definition of d's kind if its
// version is still ifVersion (0: whatever is stored); CodeNotFound when
// there is none, CodeFailedPrecondition when the version changed.
func (a *Admin) UpdateDefinition(ctx context.Context, d *jobkitv1.Definition, ifVersion int64) (*jobkitv1.Definition, error) {
	c := a.c
	op := fmt.Sprintf("update definition %q", d.GetKind())
	res, err := c.defs.UpdateDefinition(ctx, connect.NewRequest(&jobkitv1.UpdateDefinitionRequest{Definition: d, IfVersion: ifVersion}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetDefinition(), nil
}

// DeleteDefinition deletes the definition of kind if its version is still
// ifVersion (0: whatever is stored).
func (a *Admin) DeleteDefinition(ctx context.Context, kind string, ifVersion int64) error {
	c := a.c
	op := fmt.Sprintf("delete definition %q", kind)
	_, err := c.defs.DeleteDefinition(ctx, connect.NewRequest(&jobkitv1.DeleteDefinitionRequest{Kind: kind, IfVersion: ifVersion}))
	return wrap(op, err)
}

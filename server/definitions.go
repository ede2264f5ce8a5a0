package server

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// definitionService implements jobkitv1connect.DefinitionServiceHandler
// on the namespace's manager.
type definitionService struct {
	modules func(*job.Manager) ModuleStore // nil: no module uploads (see Config.WasmModules)
}

// CreateDefinition implements DefinitionService.CreateDefinition: a kind
// that has a definition already is AlreadyExists.
func (s definitionService) CreateDefinition(ctx context.Context, req *connect.Request[pb.CreateDefinitionRequest]) (*connect.Response[pb.CreateDefinitionResponse], error) {
	d, err := definitionFromProto(req.Msg.GetDefinition())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := s.attachModule(ctx, &d, req.Msg.GetWasmModule(), req.Msg.GetValidateOnly()); err != nil {
		return nil, err
	}
	if req.Msg.GetValidateOnly() {
		p, err := validateDefinition(ctx, d)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&pb.CreateDefinitionResponse{Definition: p}), nil
	}
	got, err := managerOf(ctx).Admin().PutDefinition(ctx, d, 0)
	if errors.Is(err, store.ErrConflict) {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%v; update it with UpdateDefinition, or delete it first", err))
	}
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.CreateDefinitionResponse{Definition: definitionToProto(got)}), nil
}

// GetDefinition implements DefinitionService.GetDefinition.
func (definitionService) GetDefinition(ctx context.Context, req *connect.Request[pb.GetDefinitionRequest]) (*connect.Response[pb.GetDefinitionResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.GetDefinitionResponse, error) {
		if err := required(req.Msg.GetKind(), "kind", "the kind whose definition to read"); err != nil {
			return nil, err
		}
		d, err := a.GetDefinition(ctx, req.Msg.GetKind())
		if err != nil {
			return nil, err
		}
		return &pb.GetDefinitionResponse{Definition: definitionToProto(d)}, nil
	})
}

// ListDefinitions implements DefinitionService.ListDefinitions. The page
// token is the last kind of the previous page.
func (definitionService) ListDefinitions(ctx context.Context, req *connect.Request[pb.ListDefinitionsRequest]) (*connect.Response[pb.ListDefinitionsResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.ListDefinitionsResponse, error) {
		size, err := pageSize(req.Msg.GetPageSize())
		if err != nil {
			return nil, err
		}
		page, err := a.ListDefinitions(ctx, req.Msg.GetPageToken(), min(size, store.MaxDefinitionsPage))
		if err != nil {
			return nil, err
		}
		out := &pb.ListDefinitionsResponse{Definitions: make([]*pb.Definition, len(page.Items)), NextPageToken: page.Next}
		for i, d := range page.Items {
			out.Definitions[i] = definitionToProto(d)
		}
		return out, nil
	})
}

// UpdateDefinition implements DefinitionService.UpdateDefinition: NotFound
// when the kind has no definition, FailedPrecondition when if_version is
// set and the stored version differs.
func (s definitionService) UpdateDefinition(ctx context.Context, req *connect.Request[pb.UpdateDefinitionRequest]) (*connect.Response[pb.UpdateDefinitionResponse], error) {
	d, err := definitionFromProto(req.Msg.GetDefinition())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := s.attachModule(ctx, &d, req.Msg.GetWasmModule(), req.Msg.GetValidateOnly()); err != nil {
		return nil, err
	}
	if req.Msg.GetIfVersion() < 0 {
		return nil, invalid(fmt.Sprintf("if_version %d is negative; send the version read, or 0 to replace whatever is stored", req.Msg.GetIfVersion()))
	}
	if req.Msg.GetValidateOnly() {
		p, err := validateDefinition(ctx, d)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&pb.UpdateDefinitionResponse{Definition: p}), nil
	}
	m := managerOf(ctx)
	if v := req.Msg.GetIfVersion(); v != 0 {
		got, err := m.Admin().PutDefinition(ctx, d, v)
		if err != nil {
			return nil, toConnect(err)
		}
		return connect.NewResponse(&pb.UpdateDefinitionResponse{Definition: definitionToProto(got)}), nil
	}
	// Replace what is stored, but only what is stored (an update never
	// creates): a compare-and-set on the version read, again when another
	// writer came in between.
	var got *store.Definition
	for try := 0; ; try++ {
		cur, err := m.Admin().GetDefinition(ctx, d.Kind)
		if err != nil {
			return nil, toConnect(notFoundHint(err, "create it with CreateDefinition"))
		}
		got, err = m.Admin().PutDefinition(ctx, d, cur.Version)
		if errors.Is(err, store.ErrConflict) && try < maxUpdateTries {
			continue
		}
		if err != nil {
			return nil, toConnect(err)
		}
		break
	}
	return connect.NewResponse(&pb.UpdateDefinitionResponse{Definition: definitionToProto(got)}), nil
}

// DeleteDefinition implements DefinitionService.DeleteDefinition.
func (definitionService) DeleteDefinition(ctx context.Context, req *connect.Request[pb.DeleteDefinitionRequest]) (*connect.Response[pb.DeleteDefinitionResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.DeleteDefinitionResponse, error) {
		if err := required(req.Msg.GetKind(), "kind", "the kind whose definition to delete"); err != nil {
			return nil, err
		}
		if req.Msg.GetIfVersion() < 0 {
			return nil, invalid(fmt.Sprintf("if_version %d is negative; send the version read, or 0 to delete whatever is stored", req.Msg.GetIfVersion()))
		}
		return &pb.DeleteDefinitionResponse{}, a.DeleteDefinition(ctx, req.Msg.GetKind(), req.Msg.GetIfVersion())
	})
}

// maxUpdateTries bounds the compare-and-set rounds of an update at any
// version (if_version 0) that keeps losing to other writers.
const maxUpdateTries = 5

// notFoundHint adds a fix to an ErrNotFound error.
func notFoundHint(err error, fix string) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w; %s", err, fix)
	}
	return err
}

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/store"
)

func init() {
	maps.Copy(procedureRoles, map[string]Role{
		jobkitv1connect.WorkflowServicePutWorkflowTemplateProcedure:    RoleOperator,
		jobkitv1connect.WorkflowServiceGetWorkflowTemplateProcedure:    RoleViewer,
		jobkitv1connect.WorkflowServiceListWorkflowTemplatesProcedure:  RoleViewer,
		jobkitv1connect.WorkflowServiceDeleteWorkflowTemplateProcedure: RoleOperator,
		jobkitv1connect.WorkflowServiceRunWorkflowTemplateProcedure:    RoleOperator,
	})
}

// templateToProto converts a stored template.
func templateToProto(t *job.WorkflowTemplate) *pb.WorkflowTemplate {
	b, _ := json.Marshal(t) // decoded from JSON: encodes again
	return &pb.WorkflowTemplate{Name: t.Name, TemplateJson: string(b), Version: t.Version, CreatedAt: ts(t.CreatedAt), UpdatedAt: ts(t.UpdatedAt)}
}

// PutWorkflowTemplate implements WorkflowService.PutWorkflowTemplate.
func (workflowService) PutWorkflowTemplate(ctx context.Context, req *connect.Request[pb.PutWorkflowTemplateRequest]) (*connect.Response[pb.PutWorkflowTemplateResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.PutWorkflowTemplateResponse, error) {
		if err := required(req.Msg.GetTemplateJson(), "template_json", "the template as JSON (name, params, tasks)"); err != nil {
			return nil, err
		}
		t, err := job.ParseWorkflowTemplate([]byte(req.Msg.GetTemplateJson()))
		if err != nil {
			return nil, err
		}
		ifVersion := req.Msg.GetIfVersion()
		switch {
		case req.Msg.GetCreateOnly() && ifVersion != 0:
			return nil, invalid("create_only with if_version; send one of them")
		case req.Msg.GetCreateOnly():
			ifVersion = 0
		case ifVersion == 0:
			ifVersion = store.AnyVersion
		}
		got, err := a.PutWorkflowTemplate(ctx, t, ifVersion)
		if req.Msg.GetCreateOnly() && errors.Is(err, store.ErrConflict) {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%v; replace it without create_only, or delete it first", err))
		}
		if err != nil {
			return nil, err
		}
		return &pb.PutWorkflowTemplateResponse{Template: templateToProto(got)}, nil
	})
}

// GetWorkflowTemplate implements WorkflowService.GetWorkflowTemplate.
func (workflowService) GetWorkflowTemplate(ctx context.Context, req *connect.Request[pb.GetWorkflowTemplateRequest]) (*connect.Response[pb.GetWorkflowTemplateResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.GetWorkflowTemplateResponse, error) {
		if err := required(req.Msg.GetName(), "name", "the template's name"); err != nil {
			return nil, err
		}
		t, err := a.GetWorkflowTemplate(ctx, req.Msg.GetName())
		if err != nil {
			return nil, err
		}
		return &pb.GetWorkflowTemplateResponse{Template: templateToProto(t)}, nil
	})
}

// ListWorkflowTemplates implements WorkflowService.ListWorkflowTemplates.
// The page token is the last name of the previous page.
func (workflowService) ListWorkflowTemplates(ctx context.Context, req *connect.Request[pb.ListWorkflowTemplatesRequest]) (*connect.Response[pb.ListWorkflowTemplatesResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.ListWorkflowTemplatesResponse, error) {
		size := int(req.Msg.GetPageSize())
		if size < 0 || size > store.MaxDocumentPage {
			return nil, invalid(fmt.Sprintf("page_size %d; send 0 (for %d) up to %d", size, store.DefaultDocumentPage, store.MaxDocumentPage))
		}
		page, err := a.ListWorkflowTemplates(ctx, req.Msg.GetPageToken(), size)
		if err != nil {
			return nil, err
		}
		out := &pb.ListWorkflowTemplatesResponse{Templates: make([]*pb.WorkflowTemplate, len(page.Items)), NextPageToken: page.Next}
		for i, t := range page.Items {
			out.Templates[i] = templateToProto(t)
		}
		return out, nil
	})
}

// DeleteWorkflowTemplate implements WorkflowService.DeleteWorkflowTemplate.
func (workflowService) DeleteWorkflowTemplate(ctx context.Context, req *connect.Request[pb.DeleteWorkflowTemplateRequest]) (*connect.Response[pb.DeleteWorkflowTemplateResponse], error) {
	return adminCall(ctx, func(a *job.Admin) (*pb.DeleteWorkflowTemplateResponse, error) {
		if err := required(req.Msg.GetName(), "name", "the template's name"); err != nil {
			return nil, err
		}
		if err := a.DeleteWorkflowTemplate(ctx, req.Msg.GetName(), req.Msg.GetIfVersion()); err != nil {
			return nil, err
		}
		return &pb.DeleteWorkflowTemplateResponse{}, nil
	})
}

// RunWorkflowTemplate implements WorkflowService.RunWorkflowTemplate.
func (workflowService) RunWorkflowTemplate(ctx context.Context, req *connect.Request[pb.RunWorkflowTemplateRequest]) (*connect.Response[pb.RunWorkflowTemplateResponse], error) {
	if err := required(req.Msg.GetName(), "name", "the template's name"); err != nil {
		return nil, err
	}
	var params map[string]any
	if p := bytes.TrimSpace([]byte(req.Msg.GetParamsJson())); len(p) > 0 {
		dec := json.NewDecoder(bytes.NewReader(p))
		dec.UseNumber() // numbers passed on as written
		if err := dec.Decode(&params); err != nil || dec.More() {
			return nil, invalid(fmt.Sprintf("params_json %s is not a JSON object; send the parameters as one, e.g. {\"url\": \"https://...\", \"width\": 64}", snippet(p)))
		}
	}
	var opts []job.WorkflowOption
	if id := req.Msg.GetId(); id != "" {
		opts = append(opts, job.WithWorkflowID(id))
	}
	info, err := managerOf(ctx).ScheduleWorkflowTemplate(ctx, req.Msg.GetName(), params, opts...)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.RunWorkflowTemplateResponse{Workflow: workflowToProto(info, true)}), nil
}

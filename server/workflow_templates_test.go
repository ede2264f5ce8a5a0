package server

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

const apiTemplate = `{"name": "sums", "params": [{"name": "a"}, {"name": "who", "default": "world"}],
  "tasks": [
    {"name": "sum", "kind": "add", "args": ["${a}", 2]},
    {"name": "hello", "kind": "greet", "args": ["${who} #${a}"], "after": ["sum"]}
  ]}`

// TestWorkflowTemplatesOverTheAPI stores a template, runs it with
// parameters (and repeats the run by ID), reads, lists and deletes it,
// walks the bad input, and checks the roles.
func TestWorkflowTemplatesOverTheAPI(t *testing.T) {
	e := newEnv(t, backends[0], Config{Tokens: []Token{
		{Name: "viewer", SHA256: HashToken("v-secret"), Role: RoleViewer, Namespaces: []string{"*"}},
		{Name: "operator", SHA256: HashToken("o-secret"), Role: RoleOperator, Namespaces: []string{"*"}},
	}})
	ctx := context.Background()
	wfs := jobkitv1connect.NewWorkflowServiceClient(httpClient(t, false, "o-secret", ""), e.url, connectJSON.opts...)
	view := jobkitv1connect.NewWorkflowServiceClient(httpClient(t, true, "v-secret", ""), e.url, connect.WithGRPC())

	put, err := wfs.PutWorkflowTemplate(ctx, connect.NewRequest(&pb.PutWorkflowTemplateRequest{TemplateJson: apiTemplate, CreateOnly: true}))
	if err != nil {
		t.Fatal(err)
	}
	if tp := put.Msg.GetTemplate(); tp.GetName() != "sums" || tp.GetVersion() != 1 || !strings.Contains(tp.GetTemplateJson(), `"${who} #${a}"`) {
		t.Fatalf("stored: %v", tp)
	}
	_, err = wfs.PutWorkflowTemplate(ctx, connect.NewRequest(&pb.PutWorkflowTemplateRequest{TemplateJson: apiTemplate, CreateOnly: true}))
	wantCode(t, err, connect.CodeAlreadyExists, "sums", "without create_only")
	_, err = wfs.PutWorkflowTemplate(ctx, connect.NewRequest(&pb.PutWorkflowTemplateRequest{TemplateJson: apiTemplate, IfVersion: 7}))
	wantCode(t, err, connect.CodeFailedPrecondition)

	run, err := wfs.RunWorkflowTemplate(ctx, connect.NewRequest(&pb.RunWorkflowTemplateRequest{Name: "sums", ParamsJson: `{"a": 40}`, Id: "sums-1"}))
	if err != nil {
		t.Fatal(err)
	}
	done := waitWorkflowState(t, wfs, run.Msg.GetWorkflow().GetId(), pb.WorkflowState_WORKFLOW_STATE_COMPLETED)
	if done.GetId() != "sums-1" || done.GetName() != "sums" || wfTask(t, done, "sum").GetResultJson() != "[42]" || wfTask(t, done, "hello").GetResultJson() != `["hi world #40"]` {
		t.Fatalf("run: %v", done)
	}
	again, err := wfs.RunWorkflowTemplate(ctx, connect.NewRequest(&pb.RunWorkflowTemplateRequest{Name: "sums", ParamsJson: `{"a": 40}`, Id: "sums-1"}))
	if err != nil || again.Msg.GetWorkflow().GetState() != pb.WorkflowState_WORKFLOW_STATE_COMPLETED {
		t.Fatalf("repeated run: %v, %v", again, err)
	}

	// Viewers read, and may not put, run or delete.
	if _, err := view.GetWorkflowTemplate(ctx, connect.NewRequest(&pb.GetWorkflowTemplateRequest{Name: "sums"})); err != nil {
		t.Fatalf("viewer GetWorkflowTemplate: %v", err)
	}
	lr, err := view.ListWorkflowTemplates(ctx, connect.NewRequest(&pb.ListWorkflowTemplatesRequest{}))
	if err != nil || len(lr.Msg.GetTemplates()) != 1 {
		t.Fatalf("viewer ListWorkflowTemplates: %v, %v", lr, err)
	}
	_, err = view.RunWorkflowTemplate(ctx, connect.NewRequest(&pb.RunWorkflowTemplateRequest{Name: "sums", ParamsJson: `{"a": 1}`}))
	wantCode(t, err, connect.CodePermissionDenied, "needs role operator")
	_, err = view.PutWorkflowTemplate(ctx, connect.NewRequest(&pb.PutWorkflowTemplateRequest{TemplateJson: apiTemplate}))
	wantCode(t, err, connect.CodePermissionDenied, "needs role operator")

	// Bad input, nothing stored.
	before := count(t, e.mgrs["default"])
	_, err = wfs.RunWorkflowTemplate(ctx, connect.NewRequest(&pb.RunWorkflowTemplateRequest{Name: "sums"}))
	wantCode(t, err, connect.CodeInvalidArgument, `parameter "a" is required`)
	_, err = wfs.RunWorkflowTemplate(ctx, connect.NewRequest(&pb.RunWorkflowTemplateRequest{Name: "sums", ParamsJson: `{"a": 1, "b": 2}`}))
	wantCode(t, err, connect.CodeInvalidArgument, `no parameter "b"`, "it takes a, who")
	_, err = wfs.RunWorkflowTemplate(ctx, connect.NewRequest(&pb.RunWorkflowTemplateRequest{Name: "sums", ParamsJson: `[1]`}))
	wantCode(t, err, connect.CodeInvalidArgument, "params_json", "JSON object")
	_, err = wfs.RunWorkflowTemplate(ctx, connect.NewRequest(&pb.RunWorkflowTemplateRequest{Name: "sums", ParamsJson: `{"a": "x"}`}))
	wantCode(t, err, connect.CodeInvalidArgument, `"sum"`)
	_, err = wfs.RunWorkflowTemplate(ctx, connect.NewRequest(&pb.RunWorkflowTemplateRequest{Name: "nope"}))
	wantCode(t, err, connect.CodeNotFound, `"nope"`, "PutWorkflowTemplate")
	_, err = wfs.PutWorkflowTemplate(ctx, connect.NewRequest(&pb.PutWorkflowTemplateRequest{TemplateJson: `{"name": "c", "tasks": [{"name": "a", "kind": "add", "after": ["b"]}, {"name": "b", "kind": "add", "after": ["a"]}]}`}))
	wantCode(t, err, connect.CodeInvalidArgument, "cycle", "a -> b -> a")
	_, err = wfs.PutWorkflowTemplate(ctx, connect.NewRequest(&pb.PutWorkflowTemplateRequest{TemplateJson: `{"name": "c", "tasks": [{"name": "a", "kind": "add", "args": ["${x}"]}]}`}))
	wantCode(t, err, connect.CodeInvalidArgument, `task "a"`, "add it to params")
	_, err = wfs.PutWorkflowTemplate(ctx, connect.NewRequest(&pb.PutWorkflowTemplateRequest{}))
	wantCode(t, err, connect.CodeInvalidArgument, "template_json is required")
	if n := count(t, e.mgrs["default"]); n != before {
		t.Fatalf("bad runs stored %d instances", n-before)
	}
	if _, err := wfs.GetWorkflowTemplate(ctx, connect.NewRequest(&pb.GetWorkflowTemplateRequest{Name: "c"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a refused template was stored: %v", err)
	}

	if _, err := wfs.DeleteWorkflowTemplate(ctx, connect.NewRequest(&pb.DeleteWorkflowTemplateRequest{Name: "sums"})); err != nil {
		t.Fatal(err)
	}
	_, err = wfs.DeleteWorkflowTemplate(ctx, connect.NewRequest(&pb.DeleteWorkflowTemplateRequest{Name: "sums"}))
	wantCode(t, err, connect.CodeNotFound, "sums")
}

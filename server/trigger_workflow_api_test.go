package server

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// TestTriggerOfWorkflowTemplateOverTheAPI: a trigger created over the API
// with workflow_template and params_json runs the template at its ticks
// (the workflows show in ListWorkflows, their tasks given the
// parameter), reads back as created, RunTrigger runs it once more
// (answering the workflow's end), and a trigger naming both a kind and a
// template, or a template not stored, is refused.
func TestTriggerOfWorkflowTemplateOverTheAPI(t *testing.T) {
	e := newEnv(t, backends[0], Config{})
	ctx := context.Background()
	p := protocols[0]
	wfs := jobkitv1connect.NewWorkflowServiceClient(httpClient(t, p.h2, "", ""), e.url, p.opts...)
	c := e.dial(t, p, "", "")
	tmpl := `{"name": "greeting", "params": [{"name": "who"}], "tasks": [{"name": "hello", "kind": "greet", "args": ["${who}"]}]}`
	if _, err := wfs.PutWorkflowTemplate(ctx, connect.NewRequest(&pb.PutWorkflowTemplateRequest{TemplateJson: tmpl})); err != nil {
		t.Fatal(err)
	}
	tr := &pb.Trigger{Name: "greetings", WorkflowTemplate: "greeting", ParamsJson: `{"who": "ada"}`, Interval: durationpb.New(time.Second)}
	cr, err := c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: tr}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.Msg.GetTrigger(); got.GetWorkflowTemplate() != "greeting" || got.GetParamsJson() != `{"who": "ada"}` || got.GetKind() != "" {
		t.Fatalf("created trigger: template %q, params %q, kind %q", got.GetWorkflowTemplate(), got.GetParamsJson(), got.GetKind())
	}
	var ended []*pb.Workflow
	waitFor(t, "two workflows of the trigger completed", func() bool {
		res, err := wfs.ListWorkflows(ctx, connect.NewRequest(&pb.ListWorkflowsRequest{Name: "greeting", States: []pb.WorkflowState{pb.WorkflowState_WORKFLOW_STATE_COMPLETED}}))
		if err != nil {
			t.Fatal(err)
		}
		ended = res.Msg.GetWorkflows()
		return len(ended) >= 2
	})
	gw, err := wfs.GetWorkflow(ctx, connect.NewRequest(&pb.GetWorkflowRequest{Id: ended[0].GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	if r := wfTask(t, gw.Msg.GetWorkflow(), "hello").GetResultJson(); r != `["hi ada"]` {
		t.Fatalf("the workflow's task returned %s, want [\"hi ada\"] (the trigger's parameter)", r)
	}
	gt, err := c.trigs.GetTrigger(ctx, connect.NewRequest(&pb.GetTriggerRequest{Name: "greetings"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wfs.GetWorkflow(ctx, connect.NewRequest(&pb.GetWorkflowRequest{Id: gt.Msg.GetTrigger().GetLastInstanceId()})); err != nil {
		t.Fatalf("the trigger's last run %q is no workflow: %v", gt.Msg.GetTrigger().GetLastInstanceId(), err)
	}
	if _, err := c.trigs.PauseTrigger(ctx, connect.NewRequest(&pb.PauseTriggerRequest{Name: "greetings"})); err != nil {
		t.Fatal(err)
	}
	rr, err := c.trigs.RunTrigger(ctx, connect.NewRequest(&pb.RunTriggerRequest{Name: "greetings"}))
	if err != nil {
		t.Fatal(err)
	}
	waitWorkflowState(t, wfs, rr.Msg.GetInstance().GetId(), pb.WorkflowState_WORKFLOW_STATE_COMPLETED)

	_, err = c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{Name: "both", Kind: "greet", WorkflowTemplate: "greeting", ParamsJson: `{"who": "x"}`, Interval: durationpb.New(time.Second)}}))
	wantCode(t, err, connect.CodeInvalidArgument, "set one")
	_, err = c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{Name: "none", WorkflowTemplate: "nope", Interval: durationpb.New(time.Second)}}))
	wantCode(t, err, connect.CodeNotFound, "nope")
	_, err = c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{Name: "noparam", WorkflowTemplate: "greeting", Interval: durationpb.New(time.Second)}}))
	wantCode(t, err, connect.CodeInvalidArgument, "who")
}

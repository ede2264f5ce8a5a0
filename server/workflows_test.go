package server

import (
	"context"
	"slices"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// waitWorkflowState waits until the workflow is in state want.
func waitWorkflowState(t *testing.T, wfs jobkitv1connect.WorkflowServiceClient, id string, want pb.WorkflowState) *pb.Workflow {
	t.Helper()
	var last *pb.Workflow
	waitFor(t, "workflow "+id+" "+want.String(), func() bool {
		res, err := wfs.GetWorkflow(context.Background(), connect.NewRequest(&pb.GetWorkflowRequest{Id: id}))
		if err != nil {
			t.Fatalf("GetWorkflow(%s): %v", id, err)
		}
		last = res.Msg.GetWorkflow()
		return last.GetState() == want
	})
	return last
}

// wfTask returns the task named name of w, failing when it has none.
func wfTask(t *testing.T, w *pb.Workflow, name string) *pb.Instance {
	t.Helper()
	for _, in := range w.GetTasks() {
		if in.GetTask() == name {
			return in
		}
	}
	t.Fatalf("workflow %s has no task %q: %v", w.GetId(), name, w.GetTasks())
	return nil
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func spec(name, kind, args string, deps ...string) *pb.WorkflowTaskSpec {
	return &pb.WorkflowTaskSpec{Name: name, Job: &pb.ScheduleRequest{Kind: kind, ArgsJson: args}, DependsOn: deps}
}

// TestWorkflowsOverTheAPI creates, reads, lists, retries and cancels
// workflows over gRPC, gRPC-Web and Connect JSON, on every backend, and
// walks the bad input.
func TestWorkflowsOverTheAPI(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		ctx := context.Background()
		for _, p := range []protocol{protocols[0], protocols[1], connectJSON} {
			t.Run(p.name, func(t *testing.T) {
				wfs := jobkitv1connect.NewWorkflowServiceClient(httpClient(t, p.h2, "", ""), e.url, p.opts...)
				c := e.dial(t, p, "", "")

				// A diamond that completes, results flowing through.
				res, err := wfs.CreateWorkflow(ctx, connect.NewRequest(&pb.CreateWorkflowRequest{Name: "diamond", Tasks: []*pb.WorkflowTaskSpec{
					spec("a", "add", "[1, 2]"),
					spec("b", "greet", `["b"]`, "a"),
					spec("c", "add", "[3, 4]", "a"),
					spec("d", "greet", `["d"]`, "b", "c"),
				}}))
				if err != nil {
					t.Fatal(err)
				}
				created := res.Msg.GetWorkflow()
				if created.GetName() != "diamond" || len(created.GetTasks()) != 4 || created.GetState() != pb.WorkflowState_WORKFLOW_STATE_PENDING {
					t.Fatalf("created: %v", created)
				}
				bc := []string{wfTask(t, created, "b").GetId(), wfTask(t, created, "c").GetId()}
				if d := wfTask(t, created, "d"); !sameSet(d.GetDependsOn(), bc) {
					t.Fatalf("d depends on %v, want b and c %v", d.GetDependsOn(), bc)
				}
				done := waitWorkflowState(t, wfs, created.GetId(), pb.WorkflowState_WORKFLOW_STATE_COMPLETED)
				if done.GetTaskCounts().GetCompleted() != 4 || done.GetEndedAt() == nil || wfTask(t, done, "d").GetResultJson() != `["hi d"]` {
					t.Fatalf("completed: counts %v, ended %v, d %v", done.GetTaskCounts(), done.GetEndedAt(), wfTask(t, done, "d"))
				}

				// A task canceled: its dependent is canceled, the workflow
				// fails; retrying the task re-arms the dependent; canceling
				// the workflow cancels both.
				res, err = wfs.CreateWorkflow(ctx, connect.NewRequest(&pb.CreateWorkflowRequest{Name: "blocked", Tasks: []*pb.WorkflowTaskSpec{
					spec("wait", "block", ""),
					spec("after", "add", "[1, 1]", "wait"),
				}}))
				if err != nil {
					t.Fatal(err)
				}
				id := res.Msg.GetWorkflow().GetId()
				wait := wfTask(t, res.Msg.GetWorkflow(), "wait")
				waitState(t, c, wait.GetId(), pb.State_STATE_PROCESSING)
				_, err = wfs.RetryWorkflowTask(ctx, connect.NewRequest(&pb.RetryWorkflowTaskRequest{WorkflowId: id, Task: "wait"}))
				wantCode(t, err, connect.CodeFailedPrecondition)
				if _, err := c.jobs.CancelInstance(ctx, connect.NewRequest(&pb.CancelInstanceRequest{Id: wait.GetId()})); err != nil {
					t.Fatal(err)
				}
				failed := waitWorkflowState(t, wfs, id, pb.WorkflowState_WORKFLOW_STATE_FAILED)
				if wfTask(t, failed, "after").GetState() != pb.State_STATE_CANCELED || failed.GetError() == "" {
					t.Fatalf("failed workflow: after %v, error %q", wfTask(t, failed, "after").GetState(), failed.GetError())
				}
				rr, err := wfs.RetryWorkflowTask(ctx, connect.NewRequest(&pb.RetryWorkflowTaskRequest{WorkflowId: id, Task: "wait", ResetAttempts: true}))
				if err != nil {
					t.Fatal(err)
				}
				// Re-armed: waiting, or being looked at by its gate.
				if st := wfTask(t, rr.Msg.GetWorkflow(), "after").GetState(); st != pb.State_STATE_SCHEDULED && st != pb.State_STATE_PROCESSING {
					t.Fatalf("after the retry, the dependent is %v; want it re-armed (scheduled)", st)
				}
				waitWorkflowState(t, wfs, id, pb.WorkflowState_WORKFLOW_STATE_RUNNING)
				cr, err := wfs.CancelWorkflow(ctx, connect.NewRequest(&pb.CancelWorkflowRequest{Id: id}))
				if err != nil {
					t.Fatal(err)
				}
				if cr.Msg.GetWorkflow().GetState() != pb.WorkflowState_WORKFLOW_STATE_CANCELED {
					t.Fatalf("canceled: %v", cr.Msg.GetWorkflow().GetState())
				}
				waitState(t, c, wait.GetId(), pb.State_STATE_CANCELED)

				// Listing: both, newest first, with counts and no tasks;
				// filtered by name and state.
				lr, err := wfs.ListWorkflows(ctx, connect.NewRequest(&pb.ListWorkflowsRequest{Name: "blocked", States: []pb.WorkflowState{pb.WorkflowState_WORKFLOW_STATE_CANCELED}}))
				if err != nil {
					t.Fatal(err)
				}
				if ws := lr.Msg.GetWorkflows(); len(ws) == 0 || ws[0].GetId() != id || len(ws[0].GetTasks()) != 0 || ws[0].GetTaskCounts().GetCanceled() != 2 {
					t.Fatalf("list blocked/canceled: %v", ws)
				}
				lr, err = wfs.ListWorkflows(ctx, connect.NewRequest(&pb.ListWorkflowsRequest{PageSize: 1}))
				if err != nil || len(lr.Msg.GetWorkflows()) != 1 || lr.Msg.GetNextPageToken() == "" {
					t.Fatalf("list, page of 1: %v, %v", lr, err)
				}
				next, err := wfs.ListWorkflows(ctx, connect.NewRequest(&pb.ListWorkflowsRequest{PageSize: 1, PageToken: lr.Msg.GetNextPageToken()}))
				if err != nil || len(next.Msg.GetWorkflows()) != 1 || next.Msg.GetWorkflows()[0].GetId() == lr.Msg.GetWorkflows()[0].GetId() {
					t.Fatalf("list, second page of 1: %v, %v", next, err)
				}

				// Bad input, nothing stored.
				before := count(t, e.mgrs["default"])
				bad := func(req *pb.CreateWorkflowRequest, code connect.Code, words ...string) {
					t.Helper()
					_, err := wfs.CreateWorkflow(ctx, connect.NewRequest(req))
					wantCode(t, err, code, words...)
				}
				bad(&pb.CreateWorkflowRequest{Name: "x"}, connect.CodeInvalidArgument, "no tasks")
				bad(&pb.CreateWorkflowRequest{Tasks: []*pb.WorkflowTaskSpec{spec("a", "add", "[1,2]")}}, connect.CodeInvalidArgument, "name is required")
				bad(&pb.CreateWorkflowRequest{Name: "x", Tasks: []*pb.WorkflowTaskSpec{spec("a", "add", "[1,2]", "c"), spec("b", "add", "[1,2]", "a"), spec("c", "add", "[1,2]", "b")}},
					connect.CodeInvalidArgument, "cycle", "->")
				bad(&pb.CreateWorkflowRequest{Name: "x", Tasks: []*pb.WorkflowTaskSpec{spec("a", "add", "[1,2]", "nope")}}, connect.CodeInvalidArgument, `"nope"`)
				bad(&pb.CreateWorkflowRequest{Name: "x", Tasks: []*pb.WorkflowTaskSpec{spec("a", "add", "[1,2]"), spec("a", "add", "[1,2]")}}, connect.CodeInvalidArgument, `"a"`)
				bad(&pb.CreateWorkflowRequest{Name: "x", Tasks: []*pb.WorkflowTaskSpec{spec("a", "nosuchkind", "")}}, connect.CodeNotFound, "nosuchkind", "CreateDefinition")
				bad(&pb.CreateWorkflowRequest{Name: "x", Tasks: []*pb.WorkflowTaskSpec{{Name: "a"}}}, connect.CodeInvalidArgument, "tasks[0]", "kind")
				bad(&pb.CreateWorkflowRequest{Name: "x", Tasks: []*pb.WorkflowTaskSpec{spec("a", "add", `["x"]`)}}, connect.CodeInvalidArgument, `"a"`)
				bad(&pb.CreateWorkflowRequest{Name: "x", Tasks: []*pb.WorkflowTaskSpec{{Name: "a", Job: &pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,2]", Shards: 3}}}}, connect.CodeInvalidArgument, "WithShards")
				bad(&pb.CreateWorkflowRequest{Name: "x", OnDependencyFailure: 9, Tasks: []*pb.WorkflowTaskSpec{spec("a", "add", "[1,2]")}}, connect.CodeInvalidArgument, "on_dependency_failure")
				if n := count(t, e.mgrs["default"]); n != before {
					t.Fatalf("bad workflows stored %d instances", n-before)
				}
				_, err = wfs.GetWorkflow(ctx, connect.NewRequest(&pb.GetWorkflowRequest{Id: "no-such-workflow"}))
				wantCode(t, err, connect.CodeNotFound, "no-such-workflow")
				_, err = wfs.GetWorkflow(ctx, connect.NewRequest(&pb.GetWorkflowRequest{}))
				wantCode(t, err, connect.CodeInvalidArgument, "id is required")
				_, err = wfs.RetryWorkflowTask(ctx, connect.NewRequest(&pb.RetryWorkflowTaskRequest{WorkflowId: id, Task: "nope"}))
				wantCode(t, err, connect.CodeNotFound, `"wait"`)
				_, err = wfs.ListWorkflows(ctx, connect.NewRequest(&pb.ListWorkflowsRequest{PageSize: 101}))
				wantCode(t, err, connect.CodeInvalidArgument, "at most 100")
				_, err = wfs.ListWorkflows(ctx, connect.NewRequest(&pb.ListWorkflowsRequest{PageToken: "garbage"}))
				wantCode(t, err, connect.CodeInvalidArgument, "without a cursor")
			})
		}
	})
}

// TestWorkflowRoles: a viewer reads workflows and may not create, cancel
// or retry them.
func TestWorkflowRoles(t *testing.T) {
	e := newEnv(t, backends[0], Config{Tokens: []Token{
		{Name: "viewer", SHA256: HashToken("v-secret"), Role: RoleViewer, Namespaces: []string{"*"}},
		{Name: "operator", SHA256: HashToken("o-secret"), Role: RoleOperator, Namespaces: []string{"*"}},
	}})
	ctx := context.Background()
	op := jobkitv1connect.NewWorkflowServiceClient(httpClient(t, true, "o-secret", ""), e.url, connect.WithGRPC())
	view := jobkitv1connect.NewWorkflowServiceClient(httpClient(t, true, "v-secret", ""), e.url, connect.WithGRPC())
	req := &pb.CreateWorkflowRequest{Name: "r", Tasks: []*pb.WorkflowTaskSpec{spec("a", "add", "[1,2]")}}
	_, err := view.CreateWorkflow(ctx, connect.NewRequest(req))
	wantCode(t, err, connect.CodePermissionDenied, "needs role operator")
	res, err := op.CreateWorkflow(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := view.GetWorkflow(ctx, connect.NewRequest(&pb.GetWorkflowRequest{Id: res.Msg.GetWorkflow().GetId()})); err != nil {
		t.Fatalf("viewer GetWorkflow: %v", err)
	}
	_, err = view.CancelWorkflow(ctx, connect.NewRequest(&pb.CancelWorkflowRequest{Id: res.Msg.GetWorkflow().GetId()}))
	wantCode(t, err, connect.CodePermissionDenied, "needs role operator")
}

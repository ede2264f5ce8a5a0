package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// TestWideJoinDependsOnOverTheAPI: a task with more than 100
// dependencies waits through fan-in gates, yet the API's depends_on of
// it (GetInstance, ListInstances, CancelInstance, RetryInstance, as
// GetWorkflow's) names its own dependencies, never a "$fanin:" gate.
func TestWideJoinDependsOnOverTheAPI(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		ctx := context.Background()
		p := protocols[0]
		wfs := jobkitv1connect.NewWorkflowServiceClient(httpClient(t, p.h2, "", ""), e.url, p.opts...)
		c := e.dial(t, p, "", "")

		const width = 150
		var tasks []*pb.WorkflowTaskSpec
		var names []string
		for i := range width {
			name := fmt.Sprintf("p%d", i)
			names = append(names, name)
			tasks = append(tasks, spec(name, "add", "[1, 1]"))
		}
		// The join blocks, so it can be canceled and retried.
		tasks = append(tasks, spec("join", "block", "", names...))
		res, err := wfs.CreateWorkflow(ctx, connect.NewRequest(&pb.CreateWorkflowRequest{Name: "wide", Tasks: tasks}))
		if err != nil {
			t.Fatal(err)
		}
		created := res.Msg.GetWorkflow()
		var want []string
		for _, n := range names {
			want = append(want, wfTask(t, created, n).GetId())
		}
		join := wfTask(t, created, "join")
		check := func(how string, in *pb.Instance) {
			t.Helper()
			for _, d := range in.GetDependsOn() {
				if d == "" || strings.Contains(d, "$") {
					t.Fatalf("%s: depends_on holds %q", how, d)
				}
			}
			if !sameSet(in.GetDependsOn(), want) {
				t.Fatalf("%s: the join's depends_on holds %d IDs (%.3v...), want its %d dependencies", how, len(in.GetDependsOn()), in.GetDependsOn(), width)
			}
		}
		check("CreateWorkflow", join)

		gi, err := c.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{Id: join.GetId()}))
		if err != nil {
			t.Fatal(err)
		}
		check("GetInstance", gi.Msg.GetInstance())

		li, err := c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: &pb.InstanceFilter{Kind: "block"}}))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, in := range li.Msg.GetInstances() {
			if in.GetId() == join.GetId() {
				found = true
				check("ListInstances", in)
			}
		}
		if !found {
			t.Fatalf("ListInstances of kind block does not hold the join: %v", li.Msg.GetInstances())
		}

		waitState(t, c, join.GetId(), pb.State_STATE_PROCESSING)
		ci, err := c.jobs.CancelInstance(ctx, connect.NewRequest(&pb.CancelInstanceRequest{Id: join.GetId()}))
		if err != nil {
			t.Fatal(err)
		}
		check("CancelInstance", ci.Msg.GetInstance())
		waitState(t, c, join.GetId(), pb.State_STATE_CANCELED)
		ri, err := c.jobs.RetryInstance(ctx, connect.NewRequest(&pb.RetryInstanceRequest{Id: join.GetId()}))
		if err != nil {
			t.Fatal(err)
		}
		check("RetryInstance", ri.Msg.GetInstance())
		gw, err := wfs.GetWorkflow(ctx, connect.NewRequest(&pb.GetWorkflowRequest{Id: created.GetId()}))
		if err != nil {
			t.Fatal(err)
		}
		check("GetWorkflow", wfTask(t, gw.Msg.GetWorkflow(), "join"))
		if _, err := wfs.CancelWorkflow(ctx, connect.NewRequest(&pb.CancelWorkflowRequest{Id: created.GetId()})); err != nil {
			t.Fatal(err)
		}
	})
}

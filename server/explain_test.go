package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestGetInstanceWaiting: GetInstance of a scheduled instance that no node
// may run says why (its label requirements, the node that fails them);
// a finished one carries no explanation.
func TestGetInstanceWaiting(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, connectJSON, "", "")
		ctx := context.Background()
		tagged, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "tagged"}))
		if err != nil {
			t.Fatal(err)
		}
		id := tagged.Msg.GetInstance().GetId()
		var w *pb.WaitExplanation
		waitFor(t, "the node listed live, failing gpu", func() bool {
			res, err := c.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{Id: id}))
			if err != nil {
				t.Fatal(err)
			}
			w = res.Msg.GetWaiting()
			return w.GetReason() == "no_node_with_labels"
		})
		node := e.mgrs["default"].NodeID()
		if u := w.GetUnmatchedNodes(); len(u) != 1 || u[0].GetNode() != node || !slices.Equal(u[0].GetUnmet(), []string{"gpu"}) ||
			!strings.Contains(w.GetMessage(), "[gpu]") || len(w.GetMatchingNodes()) != 0 {
			t.Fatalf("waiting = %v; want node %s unmatched, failing [gpu]", w, node)
		}
		add, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1, 2]"}))
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, c, add.Msg.GetInstance().GetId(), pb.State_STATE_COMPLETED)
		res, err := c.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{Id: add.Msg.GetInstance().GetId()}))
		if err != nil {
			t.Fatal(err)
		}
		if res.Msg.GetWaiting() != nil {
			t.Fatalf("a completed instance has waiting = %v; want none", res.Msg.GetWaiting())
		}
	})
}

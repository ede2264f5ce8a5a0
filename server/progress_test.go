package server

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestInstanceProgress: the progress a running attempt reports reaches
// GetInstance and ListInstances while it runs, and stays after it ends.
func TestInstanceProgress(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, protocols[0], "", "")
		ctx := context.Background()
		res, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "step", ArgsJson: `["progress"]`}))
		if err != nil {
			t.Fatal(err)
		}
		id := res.Msg.GetInstance().GetId()
		if p := res.Msg.GetInstance(); p.GetProgress() != 0 || p.GetProgressMessage() != "" || p.GetProgressAt() != nil {
			t.Fatalf("a scheduled instance has progress %v %q %v", p.GetProgress(), p.GetProgressMessage(), p.GetProgressAt())
		}
		get := func() *pb.Instance {
			r, err := c.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{Id: id}))
			if err != nil {
				t.Fatal(err)
			}
			return r.Msg.GetInstance()
		}
		waitFor(t, "progress reported", func() bool { return get().GetProgress() == 0.5 })
		in := get()
		if in.GetProgressMessage() != "step 1 of 2" || in.GetProgressAt() == nil || in.GetState() != pb.State_STATE_PROCESSING {
			t.Fatalf("running instance: progress %v %q at %v, state %v", in.GetProgress(), in.GetProgressMessage(), in.GetProgressAt(), in.GetState())
		}
		list, err := c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: &pb.InstanceFilter{Kind: "step"}}))
		if err != nil {
			t.Fatal(err)
		}
		if l := list.Msg.GetInstances(); len(l) != 1 || l[0].GetProgress() != 0.5 || l[0].GetProgressMessage() != "step 1 of 2" {
			t.Fatalf("ListInstances: %v", l)
		}
		close(e.gate.get("progress"))
		done := waitState(t, c, id, pb.State_STATE_COMPLETED)
		if done.GetProgress() != 0.5 || done.GetProgressMessage() != "step 1 of 2" {
			t.Fatalf("completed instance: progress %v %q, want the last report kept", done.GetProgress(), done.GetProgressMessage())
		}
	})
}

package server

import (
	"context"
	"encoding/json"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestScheduleConvertsArguments: what `jobctl schedule add-converting
// --args '["1","2"]'` sends reaches a job with WithArgumentConversion as
// numbers; a strict job refuses it with InvalidArgument naming the option,
// and a value that does not convert is refused before anything is stored.
// A definition's convert_arguments goes through the API both ways.
func TestScheduleConvertsArguments(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, connectJSON, "", "")
		ctx := context.Background()
		res, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add-converting", ArgsJson: `["1", "2"]`}))
		if err != nil {
			t.Fatal(err)
		}
		in := waitState(t, c, res.Msg.GetInstance().GetId(), pb.State_STATE_COMPLETED)
		var args, results []any
		if err := json.Unmarshal([]byte(in.GetArgsJson()), &args); err != nil || len(args) != 2 || args[0] != float64(1) {
			t.Errorf("stored args %s (%v); want the numbers [1,2]", in.GetArgsJson(), err)
		}
		if err := json.Unmarshal([]byte(in.GetResultJson()), &results); err != nil || len(results) != 1 || results[0] != float64(3) {
			t.Errorf("result %s (%v), want [3]", in.GetResultJson(), err)
		}
		before := count(t, e.mgrs["default"])
		_, err = c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: `["1", "2"]`}))
		wantCode(t, err, connect.CodeInvalidArgument, "argument 1", "job.WithArgumentConversion()")
		_, err = c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add-converting", ArgsJson: `["x", "2"]`}))
		wantCode(t, err, connect.CodeInvalidArgument, "argument 1", "does not convert", "int")
		if n := count(t, e.mgrs["default"]); n != before {
			t.Errorf("%d instances after two refused schedules, want %d", n, before)
		}

		def := &pb.Definition{Kind: "conv-def", Queue: "default", ConvertArguments: true}
		cr, err := c.defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: def}))
		if err != nil {
			t.Fatal(err)
		}
		if !cr.Msg.GetDefinition().GetConvertArguments() {
			t.Errorf("created definition %v, want convert_arguments", cr.Msg.GetDefinition())
		}
		gr, err := c.defs.GetDefinition(ctx, connect.NewRequest(&pb.GetDefinitionRequest{Kind: "conv-def"}))
		if err != nil || !gr.Msg.GetDefinition().GetConvertArguments() {
			t.Errorf("read back: %v, %v; want convert_arguments", gr.Msg.GetDefinition(), err)
		}
	})
}

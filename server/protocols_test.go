package server

import (
	"context"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// TestEveryProtocolSchedulesAndReads schedules an instance with each
// protocol (gRPC, gRPC-Web, Connect JSON, Connect proto over h2c, Connect
// GET for reads), lets a real executor run it and reads it back in full.
func TestEveryProtocolSchedulesAndReads(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		for _, p := range protocols {
			t.Run(p.name, func(t *testing.T) {
				ctx := context.Background()
				c := e.dial(t, p, "", "")
				res, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[2, 3]"}))
				if err != nil {
					t.Fatalf("Schedule: %v", err)
				}
				in := res.Msg.GetInstance()
				if in.GetId() == "" || in.GetKind() != "add" || in.GetQueue() != "default" || in.GetArgsJson() != "[2,3]" ||
					in.GetSeq() == 0 || in.GetCreatedAt() == nil || in.GetRunAt() == nil || in.GetMaxRetries() != 3 {
					t.Fatalf("scheduled instance not filled in: %v", in)
				}
				done := waitState(t, c, in.GetId(), pb.State_STATE_COMPLETED)
				if done.GetResultJson() != "[5]" || done.GetAttempt() != 1 || done.GetFinishedAt() == nil || done.GetUpdatedAt() == nil {
					t.Fatalf("completed instance: %v", done)
				}
				hist, err := c.jobs.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{InstanceId: in.GetId()}))
				if err != nil {
					t.Fatalf("ListHistory: %v", err)
				}
				var states []pb.State
				for _, h := range hist.Msg.GetChanges() {
					states = append(states, h.GetState())
				}
				if len(states) < 3 || states[len(states)-1] != pb.State_STATE_COMPLETED {
					t.Fatalf("history states %v, want ... PROCESSING, COMPLETED", states)
				}
				gets := func() int64 {
					n, ok := e.gets.Load(jobkitv1connect.JobServiceGetInstanceProcedure)
					if !ok {
						return 0
					}
					return n.(*atomic.Int64).Load()
				}
				before := gets()
				if _, err := c.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{Id: in.GetId()})); err != nil {
					t.Fatal(err)
				}
				if usesGet := p.name == "connect-json-get"; (gets() > before) != usesGet {
					t.Fatalf("GET requests of GetInstance went from %d to %d", before, gets())
				}
			})
		}
	})
}

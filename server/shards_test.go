package server

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestShardedTask: Schedule with shards returns the task's parent, which
// completes with one result per shard in shard order; ListInstances with
// parent_id lists the shards with their index and count. Bad shard counts
// and shards in a batch are InvalidArgument.
func TestShardedTask(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, connectJSON, "", "")
		ctx := context.Background()
		res, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1, 2]", Shards: 3}))
		if err != nil {
			t.Fatal(err)
		}
		p := res.Msg.GetInstance()
		if p.GetShardCount() != 3 || p.GetParentId() != "" || p.GetShardIndex() != 0 {
			t.Fatalf("parent: shard_count %d, parent_id %q, shard_index %d; want 3, none, 0", p.GetShardCount(), p.GetParentId(), p.GetShardIndex())
		}
		done := waitState(t, c, p.GetId(), pb.State_STATE_COMPLETED)
		if got := done.GetResultJson(); got != "[[3],[3],[3]]" {
			t.Errorf("parent result_json %s, want [[3],[3],[3]]", got)
		}
		list, err := c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: &pb.InstanceFilter{ParentId: p.GetId()}}))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int32]bool{}
		for _, s := range list.Msg.GetInstances() {
			if s.GetParentId() != p.GetId() || s.GetShardCount() != 3 || s.GetState() != pb.State_STATE_COMPLETED {
				t.Errorf("shard %s: parent_id %q, shard_count %d, %v; want %s, 3, completed", s.GetId(), s.GetParentId(), s.GetShardCount(), s.GetState(), p.GetId())
			}
			seen[s.GetShardIndex()] = true
		}
		if len(list.Msg.GetInstances()) != 3 || !seen[0] || !seen[1] || !seen[2] {
			t.Fatalf("ListInstances(parent_id) returned %d instances with indexes %v, want shards 0, 1, 2", len(list.Msg.GetInstances()), seen)
		}
		_, err = c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1, 2]", Shards: -1}))
		wantCode(t, err, connect.CodeInvalidArgument, "MaxShards")
		_, err = c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1, 2]", Shards: 1001}))
		wantCode(t, err, connect.CodeInvalidArgument, "MaxShards")
		batch, err := c.jobs.ScheduleBatch(ctx, connect.NewRequest(&pb.ScheduleBatchRequest{Items: []*pb.ScheduleRequest{{Kind: "add", ArgsJson: "[1, 2]", Shards: 2}}}))
		if err != nil {
			t.Fatal(err)
		}
		if r := batch.Msg.GetResults(); len(r) != 1 || r[0].GetError() == nil || r[0].GetInstance() != nil {
			t.Fatalf("ScheduleBatch with shards: %v, want the item refused", r)
		}
	})
}

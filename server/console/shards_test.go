package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestShardedTaskPage: the page of a sharded task's parent lists its
// shards in shard order, each linking to its own page, which links back.
func TestShardedTaskPage(t *testing.T) {
	e := newEnv(t)
	res, err := e.jobs(adminToken, "default").Schedule(context.Background(), connect.NewRequest(&pb.ScheduleRequest{Kind: "greet", ArgsJson: `["ann"]`, Shards: 3}))
	if err != nil {
		t.Fatal(err)
	}
	p := res.Msg.GetInstance()
	e.waitState(t, p.GetId(), pb.State_STATE_COMPLETED)
	list, err := e.jobs(adminToken, "default").ListInstances(context.Background(), connect.NewRequest(&pb.ListInstancesRequest{Filter: &pb.InstanceFilter{ParentId: p.GetId()}}))
	if err != nil || len(list.Msg.GetInstances()) != 3 {
		t.Fatalf("shards: %v, %v", list, err)
	}
	byIndex := make([]string, 3)
	for _, s := range list.Msg.GetInstances() {
		byIndex[s.GetShardIndex()] = s.GetId()
	}
	c := browserless(t)
	signIn(t, e, c, viewerToken)
	page := get(t, c, e.console+"/instances/"+p.GetId())
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="shards"`) {
		t.Fatalf("parent page: status %d, no shards table:\n%s", page.status, page.body)
	}
	last := -1
	for i, id := range byIndex {
		at := strings.Index(page.body, `href="/console/instances/`+id+`"`)
		if at < 0 || at < last {
			t.Fatalf("parent page lacks a link to shard %d (%s) after shard %d's", i, id, i-1)
		}
		last = at
	}
	shard := get(t, c, e.console+"/instances/"+byIndex[1])
	if shard.status != http.StatusOK || !strings.Contains(shard.body, `id="shard"`) || !strings.Contains(shard.body, "1 of 3") ||
		!strings.Contains(shard.body, `href="/console/instances/`+p.GetId()+`"`) {
		t.Fatalf("shard page does not name its index and link its parent:\n%s", shard.body)
	}
}

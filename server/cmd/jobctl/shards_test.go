package main

import (
	"strings"
	"testing"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestShardedTask: jobctl schedule --shards prints the task's parent;
// instance get shows it with a table of its shards, and instances list
// --parent lists them.
func TestShardedTask(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	var sr jobkitv1.ScheduleResponse
	s.okJSON(t, &sr, "schedule", "sum", "--args", "[2,3]", "--shards", "3")
	p := sr.GetInstance()
	if p.GetShardCount() != 3 || p.GetParentId() != "" {
		t.Fatalf("scheduled %v, want the parent of 3 shards", p)
	}
	var got jobkitv1.GetInstanceResponse
	waitFor(t, "the task to complete", func() bool {
		s.okJSON(t, &got, "instance", "get", p.GetId())
		return got.GetInstance().GetState() == jobkitv1.State_STATE_COMPLETED
	})
	if r := got.GetInstance().GetResultJson(); r != "[[5],[5],[5]]" {
		t.Errorf("parent result %s, want [[5],[5],[5]]", r)
	}
	table := s.ok(t, "instance", "get", p.GetId())
	for _, want := range []string{"shards", "SHARD", "RUNNING ON"} {
		if !strings.Contains(table, want) {
			t.Errorf("instance get of the parent lacks %q:\n%s", want, table)
		}
	}
	var lr jobkitv1.ListInstancesResponse
	s.okJSON(t, &lr, "instances", "list", "--parent", p.GetId())
	if len(lr.GetInstances()) != 3 {
		t.Fatalf("instances list --parent: %d instances, want 3", len(lr.GetInstances()))
	}
	for _, sh := range lr.GetInstances() {
		if !strings.Contains(table, sh.GetId()) {
			t.Errorf("instance get of the parent does not list shard %s:\n%s", sh.GetId(), table)
		}
		if sh.GetParentId() != p.GetId() {
			t.Errorf("shard %s has parent %q, want %s", sh.GetId(), sh.GetParentId(), p.GetId())
		}
	}
	shard := s.ok(t, "instance", "get", lr.GetInstances()[0].GetId())
	if !strings.Contains(shard, "parent") || !strings.Contains(shard, p.GetId()) || !strings.Contains(shard, " of 3") {
		t.Errorf("instance get of a shard lacks its parent and index:\n%s", shard)
	}
	if r := s.jobctl(t, "schedule", "sum", "--args", "[2,3]", "--shards", "0"); r.code == 0 || !strings.Contains(r.stderr, "1 to 1000") {
		t.Errorf("--shards 0: exit %d, stderr %q; want a usage error naming the range", r.code, r.stderr)
	}
}

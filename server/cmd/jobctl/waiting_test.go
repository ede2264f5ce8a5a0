package main

import (
	"strings"
	"testing"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestInstanceGetWaiting: `instance get` of an instance no node may run
// says why, in the table and in JSON.
func TestInstanceGetWaiting(t *testing.T) {
	t.Parallel()
	s := newTestServerOn(t, false, memdb)
	var sr jobkitv1.ScheduleResponse
	s.okJSON(t, &sr, "schedule", "needs-gpu")
	id := sr.GetInstance().GetId()
	var got jobkitv1.GetInstanceResponse
	waitFor(t, "the node listed live, failing gpu", func() bool {
		s.okJSON(t, &got, "instance", "get", id)
		return got.GetWaiting().GetReason() == "no_node_with_labels"
	})
	if u := got.GetWaiting().GetUnmatchedNodes(); len(u) != 1 || strings.Join(u[0].GetUnmet(), ",") != "gpu" {
		t.Fatalf("waiting %v; want one node failing gpu", got.GetWaiting())
	}
	table := s.ok(t, "instance", "get", id)
	for _, want := range []string{"labels", "gpu", "waiting", "no_node_with_labels", "fails [gpu]"} {
		if !strings.Contains(table, want) {
			t.Errorf("instance get table lacks %q:\n%s", want, table)
		}
	}
}

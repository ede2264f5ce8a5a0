package main

import (
	"strings"
	"testing"
	"time"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestLimits sets a concurrency limit through jobctl against a real
// server, lists it with what runs and waits for it (table and JSON),
// deletes it, and walks the bad input.
func TestLimits(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, sk storeKind) { limits(t, newTestServerOn(t, false, sk)) })
}

func limits(t *testing.T, s *testServer) {
	if out := s.ok(t, "limits", "set", "--kind", "block", "--max", "1"); !strings.Contains(out, "set the concurrency limit of kind block (at most 1 running)") {
		t.Fatalf("set printed %q", out)
	}
	s.ok(t, "schedule", "block")
	s.ok(t, "schedule", "block")
	deadline := time.Now().Add(15 * time.Second)
	for {
		var res jobkitv1.ListLimitsResponse
		s.okJSON(t, &res, "limits", "list")
		if u := res.GetConcurrencyLimits(); len(u) == 1 && u[0].GetLimit().GetKind() == "block" && u[0].GetLimit().GetMax() == 1 &&
			u[0].GetRunning() == 1 && u[0].GetWaiting() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("limits list -o json: %v; want kind block, max 1, 1 running and 1 waiting", res.GetConcurrencyLimits())
		}
		time.Sleep(20 * time.Millisecond) // polling a CLI: each call is a process-like run
	}
	out := s.ok(t, "limits", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "KIND QUEUE MAX RUNNING WAITING" ||
		strings.Join(strings.Fields(lines[1]), " ") != "block * 1 1 1" {
		t.Fatalf("limits list:\n%s", out)
	}
	if out := s.ok(t, "limits", "delete", "--kind", "block"); !strings.Contains(out, "deleted the concurrency limit of kind block") {
		t.Fatalf("delete printed %q", out)
	}
	if out := s.ok(t, "limits", "list"); strings.TrimSpace(out) != strings.Join(strings.Fields("KIND  QUEUE  MAX  RUNNING  WAITING"), "  ") {
		t.Fatalf("limits list after the delete:\n%s", out)
	}
	if r := s.jobctl(t, "limits", "delete", "--kind", "block"); r.code != exitNotFound {
		t.Errorf("delete of an unknown limit: exit %d, want %d\n%s", r.code, exitNotFound, r.stderr)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"limits", "set", "--kind", "block"}, "--max is required"},
		{[]string{"limits", "set", "--max", "-2"}, "--max -2 is negative"},
		{[]string{"limits", "list", "extra"}, ""},
	} {
		if r := s.jobctl(t, c.args...); r.code != exitUsage || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%v: exit %d (want %d), stderr lacks %q:\n%s", c.args, r.code, exitUsage, c.says, r.stderr)
		}
	}
}

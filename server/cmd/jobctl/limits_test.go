package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestLimits sets a concurrency limit through jobctl against a real
// server, lists it with what runs and waits for it (table and JSON),
// deletes it, and walks the bad input.
func TestLimits(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, sk storeKind) {
		s := newTestServerOn(t, false, sk)
		limits(t, s)
		perKeyLimits(t, s, sk.name)
		rateLimits(t, s)
	})
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

// perKeyLimits sets a per-key limit through jobctl: listed as "1/key" on
// memdb, refused naming the stores that can on Redis.
func perKeyLimits(t *testing.T, s *testServer, store string) {
	if store != "memdb" {
		r := s.jobctl(t, "limits", "set", "--kind", "charge", "--max", "1", "--per-key")
		if r.code == exitOK || !strings.Contains(r.stderr, "per-key concurrency limits") {
			t.Fatalf("per-key limit on %s: exit %d, stderr %q; want refused naming per-key concurrency limits", store, r.code, r.stderr)
		}
		return
	}
	if out := s.ok(t, "limits", "set", "--kind", "charge", "--max", "1", "--per-key"); !strings.Contains(out, "set the concurrency limit of kind charge") {
		t.Fatalf("set --per-key printed %q", out)
	}
	var res jobkitv1.ListLimitsResponse
	s.okJSON(t, &res, "limits", "list")
	if u := res.GetConcurrencyLimits(); len(u) != 1 || !u[0].GetLimit().GetPerKey() || u[0].GetLimit().GetMax() != 1 {
		t.Fatalf("limits list -o json: %v; want the per-key limit of kind charge, max 1", u)
	}
	lines := strings.Split(strings.TrimSpace(s.ok(t, "limits", "list")), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[1]), " ") != "charge * 1/key 0 0" {
		t.Fatalf("limits list:\n%s", strings.Join(lines, "\n"))
	}
	s.ok(t, "limits", "delete", "--kind", "charge")
}

// rateLimits sets, changes, lists and deletes a rate limit through
// jobctl, and walks the bad input.
func rateLimits(t *testing.T, s *testServer) {
	if out := s.ok(t, "limits", "rate", "set", "--kind", "email", "--rate", "100", "--period", "1s", "--burst", "10"); !strings.Contains(out, "set the rate limit of kind email (at most 100 starts per 1s, burst 10)") {
		t.Fatalf("rate set printed %q", out)
	}
	s.ok(t, "limits", "rate", "set", "--queue", "reports", "--rate", "5", "--period", "1m")
	var res jobkitv1.ListLimitsResponse
	s.okJSON(t, &res, "limits", "list")
	r := res.GetRateLimits()
	if len(r) != 2 || r[0].GetLimit().GetKind() != "" || r[0].GetLimit().GetQueue() != "reports" || r[0].GetLimit().GetRate() != 5 ||
		r[0].GetLimit().GetPeriod().AsDuration() != time.Minute ||
		r[1].GetLimit().GetKind() != "email" || r[1].GetLimit().GetRate() != 100 || r[1].GetLimit().GetBurst() != 10 ||
		!proto.Equal(r[1].GetLimit().GetPeriod(), durationpb.New(time.Second)) {
		t.Fatalf("limits list -o json: %v; want queue reports 5 per 1m, then kind email 100 per 1s burst 10", r)
	}
	out := s.ok(t, "limits", "list")
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	want := []string{"KIND QUEUE MAX RUNNING WAITING", "", "KIND QUEUE RATE PERIOD BURST RUNNING WAITING", "* reports 5 1m0s 0 0 0", "email * 100 1s 10 0 0"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("limits list:\n%s\nwant the lines %q", out, want)
	}
	if out := s.ok(t, "limits", "rate", "delete", "--kind", "email"); !strings.Contains(out, "deleted the rate limit of kind email") {
		t.Fatalf("rate delete printed %q", out)
	}
	s.ok(t, "limits", "rate", "delete", "--queue", "reports")
	if rr := s.jobctl(t, "limits", "rate", "delete", "--kind", "email"); rr.code != exitNotFound {
		t.Errorf("delete of an unknown rate limit: exit %d, want %d\n%s", rr.code, exitNotFound, rr.stderr)
	}
	s.okJSON(t, &res, "limits", "list")
	if len(res.GetRateLimits()) != 0 {
		t.Fatalf("rate limits left after the deletes: %v", res.GetRateLimits())
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"limits", "rate", "set", "--period", "1s"}, exitUsage, "--rate is required"},
		{[]string{"limits", "rate", "set", "--rate", "0", "--period", "1s"}, exitUsage, "--rate 0; give 1 or more"},
		{[]string{"limits", "rate", "set", "--rate", "1"}, exitUsage, "--period is required"},
		{[]string{"limits", "rate", "set", "--rate", "1", "--period", "1s", "--burst", "-1"}, exitUsage, "--burst -1 is negative"},
		{[]string{"limits", "rate", "set", "--rate", "1", "--period", "soon"}, exitUsage, "soon"},
		{[]string{"limits", "rate", "set", "--rate", "1", "--period", "0s"}, exitUsage, "period 0s; want at least 1ms"},
		{[]string{"limits", "rate", "delete", "extra"}, exitUsage, ""},
	} {
		if r := s.jobctl(t, c.args...); r.code != c.code || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%v: exit %d (want %d), stderr lacks %q:\n%s", c.args, r.code, c.code, c.says, r.stderr)
		}
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestPauseUnknownQueue (issue 33): a typo in queues pause is refused
// (exit 3, naming the known queues and --create) instead of creating a
// paused queue nothing uses; --create pauses it anyway.
func TestPauseUnknownQueue(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	// A fresh cluster knows the queue its nodes claim from.
	var pq jobkitv1.PauseQueueResponse
	s.okJSON(t, &pq, "queues", "pause", "default")
	s.ok(t, "queues", "resume", "default")
	r := s.jobctl(t, "queues", "pause", "defualt")
	if r.code != exitNotFound || !strings.Contains(r.stderr, `queue "defualt" is unknown`) || !strings.Contains(r.stderr, "default") || !strings.Contains(r.stderr, "--create") {
		t.Fatalf("pause of an unknown queue: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if out := s.ok(t, "queues", "list"); strings.Contains(out, "defualt") {
		t.Fatalf("the refused pause created the queue:\n%s", out)
	}
	s.okJSON(t, &pq, "queues", "pause", "later", "--create")
	if !pq.GetQueue().GetPaused() || pq.GetQueue().GetName() != "later" {
		t.Fatalf("pause --create: %v", pq.GetQueue())
	}
}

// TestScheduleArgsFromFile (issue 33): --args @FILE and @- carry
// arguments too large for a command line (900 KiB here; Linux refuses
// one argument over 128 KiB).
func TestScheduleArgsFromFile(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	big := `["` + strings.Repeat("k", 900<<10) + `"]`
	file := filepath.Join(t.TempDir(), "args.json")
	if err := os.WriteFile(file, []byte(big+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var sr jobkitv1.ScheduleResponse
	s.okJSON(t, &sr, "schedule", "halves", "--args", "@"+file, "--queue", "held")
	if sr.GetInstance().GetArgsJson() != big {
		t.Fatalf("scheduled with %d bytes of arguments, want %d", len(sr.GetInstance().GetArgsJson()), len(big))
	}
	r := jobctlEnv(t, map[string]string{"JOBCTL_ADDR": s.url}, `[1, 2]`, "schedule", "sum", "--args", "@-", "-o", "json")
	var small jobkitv1.ScheduleResponse
	if r.code != 0 || protojson.Unmarshal([]byte(r.stdout), &small) != nil || small.GetInstance().GetArgsJson() != "[1,2]" {
		t.Fatalf("--args @-: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := s.jobctl(t, "schedule", "sum", "--args", "@/nonexistent/args.json"); r.code != exitUsage || !strings.Contains(r.stderr, "/nonexistent/args.json") {
		t.Fatalf("--args from a missing file: exit %d\n%s", r.code, r.stderr)
	}
}

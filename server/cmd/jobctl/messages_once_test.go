package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorsNameTheirSubjectOnce: a channel's errors name the channel
// once, a missing alert document is named as the user knows it (no store
// internals), and a batch item's error names its kind once.
func TestErrorsNameTheirSubjectOnce(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	once := func(r result, what, sub string) {
		t.Helper()
		if n := strings.Count(r.stderr, sub); n != 1 {
			t.Errorf("%s names %s %d times, want once:\n%s", what, sub, n, r.stderr)
		}
	}
	r := s.jobctl(t, "alert", "channels", "create", "bad", "--type", "webhook", "--url", "ftp://x")
	if r.code != 2 || !strings.Contains(r.stderr, `url "ftp://x"; give an http:// or https:// address`) {
		t.Fatalf("create of a bad channel: exit %d: %s", r.code, r.stderr)
	}
	once(r, "a refused channel", `"bad"`)

	s.ok(t, "alert", "channels", "create", "down", "--type", "webhook", "--url", "http://127.0.0.1:1/x")
	r = s.jobctl(t, "alert", "channels", "test", "down")
	if r.code != 6 || !strings.Contains(r.stderr, "connection refused") {
		t.Fatalf("test of a channel whose receiver is down: exit %d: %s", r.code, r.stderr)
	}
	once(r, "a failed channel test", `"down"`)

	for _, args := range [][]string{
		{"alert", "channels", "test", "nosuch"},
		{"alert", "channels", "get", "nosuch"},
		{"alert", "channels", "delete", "nosuch"},
		{"alert", "rules", "get", "nosuch"},
		{"alert", "rules", "delete", "nosuch"},
		{"alert", "silences", "delete", "nosuch"},
	} {
		r := s.jobctl(t, args...)
		what := strings.Join(args, " ")
		if r.code != 3 || !strings.Contains(r.stderr, "does not exist") {
			t.Errorf("%s: exit %d, want 3 and a message saying it does not exist: %s", what, r.code, r.stderr)
		}
		for _, internal := range []string{"document", "collection", "PutDocument", "IfVersion", "memdbstore", "instance not found"} {
			if strings.Contains(r.stderr, internal) {
				t.Errorf("%s: the message shows the store's %q:\n%s", what, internal, r.stderr)
			}
		}
		once(r, what, `"nosuch"`)
	}

	f := filepath.Join(t.TempDir(), "batch.jsonl")
	if err := os.WriteFile(f, []byte(`{"kind":"nosuch"}`+"\n"+`{"kind":"sum","argsJson":"[1,2]"}`+"\n"+`{"kind":"sum","argsJson":"[\"x\"]"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = s.jobctl(t, "schedule-batch", "-f", f)
	if r.code != 3 {
		t.Fatalf("schedule-batch with an unknown kind: exit %d: %s", r.code, r.stderr)
	}
	once(r, "a batch item of an unknown kind", `"nosuch"`)
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, "1 ") && (strings.Count(line, `"nosuch"`) != 1 || strings.Contains(line, "job: schedule")) {
			t.Errorf("the table's row of an unknown kind names it again in its error:\n%s", line)
		}
		if strings.HasPrefix(line, "3 ") && (strings.Count(line, "sum") != 1 || strings.Contains(line, "job: schedule")) {
			t.Errorf("the table's row of bad arguments names its kind again in its error:\n%s", line)
		}
	}
}

package main

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

var progressGates sync.Map // key -> chan struct{}

// progressGate is the channel the "halves" executor of key waits on.
func progressGate(key string) chan struct{} {
	c, _ := progressGates.LoadOrStore(key, make(chan struct{}))
	return c.(chan struct{})
}

// followProgress runs "jobctl instance get id --follow" with extra args in
// the background; it waits until the output holds want, then releases
// the executor and returns what jobctl printed and its exit code.
func followProgress(t *testing.T, s *testServer, key, id, want string, extra ...string) (string, int) {
	t.Helper()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		args := append([]string{"instance", "get", id, "--follow", "--interval", "20ms"}, extra...)
		done <- run(context.Background(), args, &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
			getenv: func(k string) string { return map[string]string{"JOBCTL_ADDR": s.url}[k] }})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("--follow printed no %q within 10s:\n%s\nstderr: %s", want, out.String(), errb.String())
		}
		select {
		case code := <-done:
			t.Fatalf("--follow ended (exit %d) before printing %q:\n%s\nstderr: %s", code, want, out.String(), errb.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(progressGate(key))
	select {
	case code := <-done:
		return out.String(), code
	case <-time.After(10 * time.Second):
		t.Fatalf("--follow did not end after the instance completed:\n%s", out.String())
	}
	return "", 0
}

// TestInstanceGetFollow: --follow prints the progress of a running
// instance as it changes and ends when the instance is final, in table
// and in JSON output.
func TestInstanceGetFollow(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)

	// Gate keys unique to this run, so -count reruns do not find theirs
	// released.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var sr jobkitv1.ScheduleResponse
	s.okJSON(t, &sr, "schedule", "halves", "--args", `["table`+run+`"]`)
	out, code := followProgress(t, s, "table"+run, sr.GetInstance().GetId(), "processing #1 50% half way")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || lines[len(lines)-1] != "completed #1 100% all done" {
		t.Fatalf("exit %d, output:\n%s\nwant it to end with the completed line", code, out)
	}
	for i := 1; i < len(lines); i++ {
		if lines[i] == lines[i-1] {
			t.Fatalf("line %q printed twice: --follow prints only changes\n%s", lines[i], out)
		}
	}

	s.okJSON(t, &sr, "schedule", "halves", "--args", `["json`+run+`"]`)
	out, code = followProgress(t, s, "json"+run, sr.GetInstance().GetId(), "half way", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	var last jobkitv1.GetInstanceResponse
	if err := protojson.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("last line: %v\n%s", err, out)
	}
	in := last.GetInstance()
	if in.GetState() != jobkitv1.State_STATE_COMPLETED || in.GetProgress() != 1 || in.GetProgressMessage() != "all done" || in.GetProgressAt() == nil {
		t.Fatalf("last instance %v", in)
	}

	// The detail shows the progress too.
	if table := s.ok(t, "instance", "get", in.GetId()); !strings.Contains(table, "100% all done") {
		t.Fatalf("instance get shows no progress:\n%s", table)
	}
	if r := s.jobctl(t, "instance", "get", in.GetId(), "--follow", "--interval", "0s"); r.code != 2 || !strings.Contains(r.stderr, "--interval") {
		t.Fatalf("--interval 0s: exit %d, %s", r.code, r.stderr)
	}
}

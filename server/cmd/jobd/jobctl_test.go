package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// jobctl runs the jobctl binary with env and args and returns its exit
// status and stdout.
func jobctl(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, jobctlBin(), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stdout.String() + stderr.String()
	}
	if err != nil {
		t.Fatalf("jobctl %v: %v", args, err)
	}
	return 0, stdout.String()
}

// TestJobctl: the jobctl binary against a jobd process on Redis with
// tokens: it schedules (the worker of the test process runs the
// instance), reads the instance back, and without a token exits with
// jobctl's authentication status (5).
func TestJobctl(t *testing.T) {
	t.Parallel()
	ns := uniqueNS(t)
	w := newRedisWorker(t, ns, 2, nil)
	op := newToken("ci", "operator", ns)
	p := startJobd(t, jobdBin(), nil, "--store", "redis", "--redis-addr", redisAddr(t), "--namespace", ns,
		"--tokens-file", writeTokens(t, op))
	env := []string{"JOBCTL_ADDR=" + p.api, "JOBCTL_NAMESPACE=" + ns, "JOBCTL_TOKEN=" + op.secret}

	code, out := jobctl(t, env, "schedule", kindAdd, "--args", "[4, 5]", "-o", "json")
	var sr struct {
		Instance instanceJSON `json:"instance"`
	}
	if err := json.Unmarshal([]byte(out), &sr); code != 0 || err != nil || sr.Instance.ID == "" {
		t.Fatalf("jobctl schedule: exit %d, %q (%v); want 0 and the instance as JSON", code, out, err)
	}
	select {
	case <-w.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not start the instance jobctl scheduled within 20 s")
	}
	waitFor(t, 20*time.Second, "jobctl instance get to show it completed", func() (bool, string) {
		code, out := jobctl(t, env, "instance", "get", sr.Instance.ID, "-o", "json")
		var gr struct {
			Instance instanceJSON `json:"instance"`
		}
		_ = json.Unmarshal([]byte(out), &gr)
		return code == 0 && gr.Instance.State == "STATE_COMPLETED" && gr.Instance.ResultJSON == "[9]", out
	})
	if code, out := jobctl(t, []string{"JOBCTL_ADDR=" + p.api, "JOBCTL_NAMESPACE=" + ns, "JOBCTL_TOKEN="}, "schedule", kindAdd, "--args", "[1, 1]"); code != 5 {
		t.Errorf("jobctl schedule without a token: exit %d, %q; want 5 (authentication)", code, out)
	}
}

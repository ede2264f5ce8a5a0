package command_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/command"
	"github.com/jobkit/job/executors/internal/xtest"
	"github.com/jobkit/job/store"
)

func TestParseProgress(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		line string
		f    float64
		msg  string
		ok   bool
	}{
		{"::progress 40/100\n", 0.4, "", true},
		{"::progress 3/4 copying files\r\n", 0.75, "copying files", true},
		{"::progress 62.5% compressing", 0.625, "compressing", true},
		{"::progress 0%", 0, "", true},
		{"::progress 7/5 over", 1, "over", true}, // clamped
		{"::progress 5/0", 0, "", false},
		{"::progress 101%", 0, "", false},
		{"::progress -1%", 0, "", false},
		{"::progress -1/4", 0, "", false},
		{"::progress half", 0, "", false},
		{"::progress", 0, "", false},
		{"progress 1/2", 0, "", false},
		{" ::progress 1/2", 0, "", false},
	} {
		f, msg, ok := command.ParseProgress(c.line)
		if f != c.f || msg != c.msg || ok != c.ok {
			t.Errorf("ParseProgress(%q) = %v, %q, %v; want %v, %q, %v", c.line, f, msg, ok, c.f, c.msg, c.ok)
		}
	}
}

// TestCommandReportsProgress runs a real shell command that reports its
// progress on stdout: the instance's stored progress follows each line
// while it runs, and the progress lines are neither logged nor in the
// result's output, while a malformed one is logged as any other line.
func TestCommandReportsProgress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gate := filepath.Join(dir, "go")
	m := xtest.Manager(t, newType())
	xtest.Define(t, m, "copy", store.ExecutorCommand, map[string]any{
		"argv": []string{`echo start; echo "::progress 1/4 first file"; echo "::progress what"; ` +
			`while [ ! -e "$1" ]; do sleep 0.02; done; echo "::progress 75% third file"; ` +
			`while [ ! -e "$1.2" ]; do sleep 0.02; done; echo done`, gate},
		"shell": true,
	}, 0, 0)
	ctx := context.Background()
	a, err := m.ScheduleJob(ctx, "copy")
	if err != nil {
		t.Fatal(err)
	}
	waitProgress := func(f float64, msg string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			p, err := m.GetProgress(ctx, a.ID)
			if err == nil && p[a.ID].Fraction == f && p[a.ID].Message == msg {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("progress %+v (%v), want %v %q", p[a.ID], err, f, msg)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitProgress(0.25, "first file")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitProgress(0.75, "third file")
	if err := os.WriteFile(gate+".2", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	inst := xtest.Wait(t, m, a.ID, job.Completed, job.Terminated, job.TimedOut, job.Canceled)
	var res command.Result
	if inst.State != job.Completed || inst.ResultsInto(&res) != nil || res.Output != "start\n::progress what\ndone\n" {
		t.Fatalf("state %v error %v output %q; want the output without the progress lines", inst.State, inst.Error, res.Output)
	}
	logs := xtest.Logs(t, m, a.ID)
	if strings.Contains(logs, "first file") || strings.Contains(logs, "third file") || !strings.Contains(logs, "::progress what") || !strings.Contains(logs, "done") {
		t.Fatalf("logs %q: want the malformed progress line logged, the others not", logs)
	}
}

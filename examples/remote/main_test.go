package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestExample builds the example and runs it as a user would: it must
// start jobd and two workers, run every frame, and run the gpu frames on
// the gpu worker only.
func TestExample(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "remote")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin).CombinedOutput()
	if err != nil {
		t.Fatalf("the example failed: %v\n%s", err, out)
	}
	text := string(out)
	frame := regexp.MustCompile(`(?m)^frame (\d+): (render(?:-gpu)?) \(needs (.+)\) ran on (worker-\w+): \["rendered frame (\d+)"\]$`)
	lines := frame.FindAllStringSubmatch(text, -1)
	if len(lines) != 8 {
		t.Fatalf("%d frame lines, want 8:\n%s", len(lines), text)
	}
	for _, l := range lines {
		if l[1] != l[5] {
			t.Errorf("frame %s reports the result of frame %s", l[1], l[5])
		}
		if l[2] == "render-gpu" && l[4] != "worker-gpu" {
			t.Errorf("gpu frame %s ran on %s", l[1], l[4])
		}
	}
	for _, want := range []string{"jobd listening on http://127.0.0.1:", "worker-gpu connected with labels [gpu]", "worker-cpu connected with labels [cpu]"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "level=ERROR") {
		t.Errorf("the example logged errors:\n%s", text)
	}
}

package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestExample builds the example and runs it as a user would: it must
// start jobd and two workers, run every frame, run the gpu frames on the
// gpu worker only, and run the sharded task's four shards over both
// workers, gathering their results in shard order.
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
	// The sharded task: four shards, in order, each with its part, spread
	// over both workers, and the parent's results gathered in shard order.
	shard := regexp.MustCompile(`(?m)^shard (\d+) of 4 ran on (worker-\w+): \["seconds (\d+)-(\d+) encoded"\]$`)
	shardLines := shard.FindAllStringSubmatch(text, -1)
	if len(shardLines) != 4 {
		t.Fatalf("%d shard lines, want 4:\n%s", len(shardLines), text)
	}
	on := map[string]int{}
	for i, l := range shardLines {
		if want := []string{strconv.Itoa(i), strconv.Itoa(i * 15), strconv.Itoa((i + 1) * 15)}; l[1] != want[0] || l[3] != want[1] || l[4] != want[2] {
			t.Errorf("line %d: shard %s with seconds %s-%s, want shard %s with %s-%s", i, l[1], l[3], l[4], want[0], want[1], want[2])
		}
		on[l[2]]++
	}
	if on["worker-gpu"] == 0 || on["worker-cpu"] == 0 {
		t.Errorf("the shards ran on %v; want them spread over both workers", on)
	}
	if want := "encode (4 shards) gathered in shard order: [[seconds 0-15 encoded] [seconds 15-30 encoded] [seconds 30-45 encoded] [seconds 45-60 encoded]]"; !strings.Contains(text, want) {
		t.Errorf("output lacks %q:\n%s", want, text)
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

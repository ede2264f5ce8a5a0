package benchkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteBetweenMarkers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "b.md")
	if err := WriteBetweenMarkers(path, "Benchmarks", "table 1\n"); err != nil {
		t.Fatal(err)
	}
	hand := "# Benchmarks\n\nBy hand before.\n\n" + BeginMarker + "\nold\n" + EndMarker + "\n\nBy hand after.\n"
	if err := os.WriteFile(path, []byte(hand), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteBetweenMarkers(path, "Benchmarks", "table 2"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "# Benchmarks\n\nBy hand before.\n\n" + BeginMarker + "\ntable 2\n" + EndMarker + "\n\nBy hand after.\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	broken := filepath.Join(t.TempDir(), "c.md")
	os.WriteFile(broken, []byte(EndMarker+"\n"+BeginMarker+"\n"), 0o644)
	if err := WriteBetweenMarkers(broken, "B", "x"); err == nil {
		t.Error("broken markers: no error")
	}
}

func TestPercentileMedian(t *testing.T) {
	t.Parallel()
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if got := Percentile(v, .5); got != 5 {
		t.Errorf("p50 = %v, want 5", got)
	}
	if got := Percentile(v, .99); got != 10 {
		t.Errorf("p99 = %v, want 10", got)
	}
	if got := Median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median = %v, want 2", got)
	}
	r := Repeat(3, func() (Sample, error) { return Sample{"x": 1}, fmt.Errorf("slow: %w", ErrCutShort) })
	if !r.Cut || r.Runs != 1 || r.Sample["x"] != 1 {
		t.Errorf("Repeat of cut runs = %+v", r)
	}
	r = Repeat(3, func() (Sample, error) { return nil, errors.New("boom") })
	if r.Err == nil {
		t.Error("Repeat of a failing run: no error")
	}
}

// TestWorkloadsOnMemdb runs every workload, tiny, on the embedded store.
func TestWorkloadsOnMemdb(t *testing.T) {
	t.Parallel()
	sys, err := NewJobkit(JobkitConfig{Store: "memdb"})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	ctx := context.Background()
	const limit = 30 * time.Second
	check := func(name string, s Sample, err error, keys ...string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, k := range keys {
			if _, ok := s[k]; !ok {
				t.Errorf("%s: no %q in %v", name, k, s)
			}
		}
	}
	s, err := Burndown(ctx, sys, 500, 4, limit)
	check("burndown", s, err, "jobs/s")
	s, err = Steady(ctx, sys, 200, 200*time.Millisecond, 4, limit)
	check("steady", s, err, "p50 ms", "p99 ms", "p999 ms")
	s, err = Idle(ctx, sys, 5, limit)
	check("idle", s, err, "p50 ms", "p99 ms")
	s, err = Rest(ctx, sys, 4, 100*time.Millisecond)
	check("rest", s, err, "s")
	if s["s"] < 0.1 {
		t.Errorf("rest: rested %v s, want at least 0.1", s["s"])
	}
	s, err = Scheduled(ctx, sys, 10, 200*time.Millisecond, 100*time.Millisecond, limit)
	check("scheduled", s, err, "p50 ms", "early %")
	s, err = MemoryPerPending(ctx, sys, 1000, limit)
	check("memory", s, err, "heap B/job", "total B/job")
	s, err = DepthCost(ctx, sys, []int{100, 500}, 20, limit)
	check("depth", s, err, "µs/job @100", "µs/job @500")
	s, err = ClaimCost(ctx, sys, 200, 50, 3, limit)
	check("claim", s, err, "µs")
	s, err = ScheduleAndRun(ctx, sys, 200, 2, 4, limit)
	check("schedule and run", s, err, "jobs/s")
	// A limit too short to finish is reported as cut short.
	if _, err := Burndown(ctx, sys, 50_000, 1, time.Millisecond); !errors.Is(err, ErrCutShort) {
		t.Errorf("burn-down over its limit: err = %v, want ErrCutShort", err)
	}
	if !strings.Contains(Machine(), "CPUs") {
		t.Errorf("Machine() = %q", Machine())
	}
}

package benchkit

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestAPIWorkloads runs the API workloads, tiny, against a jobd built from
// this repository on the test Redis, and checks that every job they count
// was stored.
func TestAPIWorkloads(t *testing.T) {
	t.Parallel()
	addr := os.Getenv("JOBKIT_REDIS_ADDR")
	if addr == "" {
		t.Fatal("JOBKIT_REDIS_ADDR is not set: run scripts/test.sh (it starts redis-server), or start one and export JOBKIT_REDIS_ADDR=127.0.0.1:PORT")
	}
	bin, err := BuildJobd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := NewAPIEnv(ctx, bin, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const limit = 30 * time.Second
	check := func(name string, s Sample, err error, keys ...string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, k := range keys {
			if v, ok := s[k]; !ok || !(v > 0) {
				t.Errorf("%s: %q = %v in %v; want > 0", name, k, v, s)
			}
		}
	}
	s, err := APISchedule(ctx, e, 2, 40, limit)
	check("single calls", s, err, "calls/s", "jobs/s", "p50 ms", "p99 ms")
	s, err = APIScheduleBatch(ctx, e, 2, 3, 10, limit)
	check("batches", s, err, "calls/s", "jobs/s", "p50 ms")
	if s["jobs/s"] != 10*s["calls/s"] {
		t.Errorf("batches: %v jobs/s for %v calls/s of 10 jobs", s["jobs/s"], s["calls/s"])
	}
	s, err = InProcessSchedule(ctx, e, 2, 20, limit)
	check("in process", s, err, "calls/s", "p50 ms")
	s, err = APIScheduleToStart(ctx, e, 5, limit)
	check("schedule to start", s, err, "p50 ms", "p99 ms")

	counts, err := e.Producer.Admin().CountInstances(ctx, "", APIKind)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range counts {
		n += c.Total()
	}
	if want := int64(40 + 3*10 + 20); n != want {
		t.Errorf("%d instances of %s stored; want %d (every call the workloads counted)", n, APIKind, want)
	}
}

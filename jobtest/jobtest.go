// Package jobtest is the manager-level conformance suite: end-to-end
// scenarios (schedule, run, retry, cancel, rescue after a crash, recurring
// ticks across a cluster, shutdown hand-back, ...) that every store must
// pass under a real job.Manager. Store plugins call Run from their tests,
// next to storetest.Run, which checks the store contract itself.
package jobtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// Harness opens store handles. Handles opened with the same ns share data,
// as several processes on one server do; different ns are isolated.
type Harness struct {
	Open func(t testing.TB, ns string) store.Store
	// PartitionOf, when set, says the store keeps claim order within
	// each partition of a namespace only (a partitioned Redis namespace)
	// and names the partition instance id of namespace ns lives in: the
	// order scenarios then check the order among the instances of each
	// partition.
	PartitionOf func(t testing.TB, ns, id string) int
}

// Run runs every scenario as a sub-test, each in a namespace of its own.
func Run(t *testing.T, h Harness) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, &env{h: h, ns: namespace(t)})
		})
	}
}

type scenario struct {
	name string
	run  func(t *testing.T, e *env)
}

var scenarios []scenario

func register(name string, run func(t *testing.T, e *env)) {
	scenarios = append(scenarios, scenario{name, run})
}

// env is one scenario's namespace.
type env struct {
	h  Harness
	ns string
}

// store opens a new handle on the scenario's namespace.
func (e *env) store(t *testing.T) store.Store { return e.h.Open(t, e.ns) }

// manager starts a manager on a new handle with fast maintenance
// intervals, registers jobs, and stops it when the test ends.
func (e *env) manager(t *testing.T, jobs []*job.Job, opts ...job.ManagerOption) *job.Manager {
	t.Helper()
	base := []job.ManagerOption{
		job.WithStore(e.store(t)),
		job.WithLogger(testLogger(t)),
		job.WithPollInterval(200 * time.Millisecond),
		job.WithRescueInterval(50 * time.Millisecond),
	}
	m, err := job.NewManager(append(base, opts...)...)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	for _, j := range jobs {
		if err := m.RegisterJob(j); err != nil {
			t.Fatalf("RegisterJob(%s): %v", j.Kind(), err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Stop(ctx); err != nil && err != job.ErrNotRunning {
			t.Errorf("Stop: %v", err)
		}
	})
	return m
}

func start(t *testing.T, m *job.Manager) {
	t.Helper()
	if err := m.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

func mustJob(t *testing.T, opts ...job.JobOption) *job.Job {
	t.Helper()
	j, err := job.NewJob(opts...)
	if err != nil {
		t.Fatalf("NewJob: %v", err)
	}
	return j
}

func schedule(t *testing.T, m *job.Manager, kind string, opts ...job.ScheduleOption) *job.InstanceInfo {
	t.Helper()
	ji, err := m.ScheduleJob(context.Background(), kind, opts...)
	if err != nil {
		t.Fatalf("ScheduleJob(%s): %v", kind, err)
	}
	return ji
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitState waits until the instance reaches state and returns it.
func waitState(t *testing.T, m *job.Manager, id string, state job.State, timeout time.Duration) *job.InstanceInfo {
	t.Helper()
	var got *job.InstanceInfo
	waitFor(t, timeout, fmt.Sprintf("instance %s to be %v", id, state), func() bool {
		ji, err := m.GetInstance(context.Background(), id)
		if err != nil {
			t.Fatalf("GetInstance(%s): %v", id, err)
		}
		got = ji
		return ji.State == state
	})
	return got
}

func waitIdle(t *testing.T, m *job.Manager, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := m.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

func states(t *testing.T, m *job.Manager, id string) []job.State {
	t.Helper()
	hist, err := m.LookupInstanceHistory(context.Background(), job.NewQuery(job.WithQueryInstanceID(id)))
	if err != nil {
		t.Fatalf("LookupInstanceHistory: %v", err)
	}
	out := make([]job.State, len(hist))
	for i, h := range hist {
		out[i] = h.State
	}
	return out
}

func namespace(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return "jt_" + name + "_" + hex.EncodeToString(b[:])
}

// testLogger sends the manager's own log to the test log at warn level and
// above (set JOBKIT_TEST_DEBUG=1 for everything).
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("JOBKIT_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// resultsJSON returns ji's results as JSON, or "" when it has none.
func resultsJSON(t *testing.T, ji *job.InstanceInfo) string {
	t.Helper()
	res := ji.Results()
	if len(res) == 0 {
		return ""
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatalf("encode results %v: %v", res, err)
	}
	return string(b)
}

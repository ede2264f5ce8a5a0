package jobtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

func init() {
	register("DefinitionsProducerOnly", testDefinitionsProducerOnly)
	register("DefinitionsArgsCheckedWhereTheyRun", testDefinitionsArgsCheckedWhereTheyRun)
}

// A producer with zero workers and no executor schedules a kind that only
// the worker has, from the definition the worker published; the worker
// runs it, and the producer claims nothing.
func testDefinitionsProducerOnly(t *testing.T, e *env) {
	ctx := context.Background()
	sum := mustJob(t, job.WithKind("def-sum"), job.WithExecutor(func(a, b int) int { return a + b }),
		job.WithQueue("q-def"), job.WithPriority(job.HighPriority), job.WithMaxRetries(2), job.WithTimeout(time.Minute))
	worker := e.manager(t, []*job.Job{sum}, job.WithPublishDefinitions(), job.WithQueues("q-def"))
	producer := e.manager(t, nil, job.WithWorkers(0), job.WithQueues("q-def"))
	start(t, producer)

	// Nothing is published before the worker starts: a clear error, and
	// nothing stored.
	if _, err := producer.ScheduleJob(ctx, "def-sum", job.WithArguments(1, 2)); !errors.Is(err, job.ErrUnknownKind) {
		t.Fatalf("ScheduleJob of a kind with no definition: %v, want ErrUnknownKind", err)
	}
	if insts, err := producer.LookupInstances(ctx, job.NewQuery()); err != nil || len(insts) != 0 {
		t.Fatalf("after a refused schedule: %d instances, %v; want none", len(insts), err)
	}

	start(t, worker)
	ji := schedule(t, producer, "def-sum", job.WithArguments(2, 3))
	if ji.Queue != "q-def" || ji.Priority != job.HighPriority || ji.MaxRetries != 2 || ji.Timeout != time.Minute {
		t.Errorf("instance from the definition: queue %q priority %v retries %d timeout %v; want q-def, high, 2, 1m",
			ji.Queue, ji.Priority, ji.MaxRetries, ji.Timeout)
	}
	got := waitState(t, producer, ji.ID, job.Completed, deadline)
	if r := resultsJSON(t, got); r != "[5]" {
		t.Errorf("results %s, want [5]", r)
	}
	hist, err := producer.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstance(ji)))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hist {
		if h.State == store.Processing && h.Node != worker.NodeID() {
			t.Errorf("attempt %d claimed by %s, want the worker %s", h.Attempt, h.Node, worker.NodeID())
		}
	}
	if size, busy := producer.Workers(); size != 0 || busy != 0 {
		t.Errorf("producer workers %d busy %d, want 0 and 0", size, busy)
	}
}

// Arguments the producer cannot check (it has no executor) are checked by
// the worker: a mismatch ends Terminated at the first attempt, however
// many retries are left.
func testDefinitionsArgsCheckedWhereTheyRun(t *testing.T, e *env) {
	ctx := context.Background()
	producer := e.manager(t, nil, job.WithWorkers(0))
	if _, err := producer.Admin().PutDefinition(ctx, job.Definition{Kind: "def-int", MaxRetries: 5}, 0); err != nil {
		t.Fatal(err)
	}
	ran := make(chan int, 4)
	worker := e.manager(t, []*job.Job{mustJob(t, job.WithKind("def-int"), job.WithMaxRetries(5),
		job.WithExecutor(func(n int) { ran <- n }))}, job.WithWorkers(2))
	start(t, producer)
	start(t, worker)
	bad := schedule(t, producer, "def-int", job.WithArguments("seven"))
	wrongCount := schedule(t, producer, "def-int", job.WithArguments(1, 2))
	good := schedule(t, producer, "def-int", job.WithArguments(7))
	for _, ji := range []*job.InstanceInfo{bad, wrongCount} {
		got := waitState(t, producer, ji.ID, job.Terminated, deadline)
		if got.Attempt != 1 || got.Error == "" || !strings.Contains(got.Error, "invalid arguments") {
			t.Errorf("%s: attempt %d, error %v; want attempt 1 and an invalid-arguments error", ji.ID, got.Attempt, got.Error)
		}
	}
	waitState(t, producer, good.ID, job.Completed, deadline)
	if n := <-ran; n != 7 {
		t.Errorf("executor ran with %d, want 7", n)
	}
	if len(ran) != 0 {
		t.Errorf("executor ran %d more times, want only for the good instance", len(ran))
	}
}

package job_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jobkit/job"
)

// countState counts the instances of kind in state.
func countState(t *testing.T, m *job.Manager, kind string, st job.State) int {
	t.Helper()
	insts, err := m.LookupInstances(context.Background(), job.NewQuery(job.WithQueryKind(kind), job.WithQueryState(st)))
	if err != nil {
		t.Fatal(err)
	}
	return len(insts)
}

func scheduleN(t *testing.T, m *job.Manager, kind string, n int) {
	t.Helper()
	for range n {
		if _, err := m.ScheduleJob(context.Background(), kind); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHandlerPanicIsRecovered checks that a state-change handler that
// panics on Processing neither crashes the process nor keeps the instance
// or its complete handler from finishing, and that the panic is logged
// with its stack and counted.
func TestHandlerPanicIsRecovered(t *testing.T) {
	t.Parallel()
	var logs logBuf
	var completed atomic.Int32
	j := mustJob(t, job.WithKind("p"), job.WithExecutor(func() {}),
		job.WithStateChangeProcessor(func(ji job.Instance, s job.State) {
			if s == job.Processing {
				panic(fmt.Sprintf("handler of %s broke", ji.Info().ID))
			}
		}),
		job.WithCompleteProcessor(func(job.Instance, []any) { completed.Add(1) }))
	m := newManager(t, job.WithLogger(logs.logger()))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	scheduleN(t, m, "p", 3)
	waitFor(t, "3 completed instances and complete handler calls", func() bool {
		return countState(t, m, "p", job.Completed) == 3 && completed.Load() == 3
	})
	if st := m.HandlerStats(); st.Panics != 3 {
		t.Errorf("HandlerStats %+v, want 3 panics", st)
	}
	out := logs.String()
	if !strings.Contains(out, "job handler panicked") || !strings.Contains(out, "broke") || !strings.Contains(out, "handlers_test.go") {
		t.Errorf("log does not show the panic with its stack:\n%s", out)
	}
}

// TestSlowHandlerDoesNotStallEngine checks that a handler blocked on
// Processing (on the claim path) or on Completed (on the outcome path)
// delays neither the claims nor the outcomes of other work.
func TestSlowHandlerDoesNotStallEngine(t *testing.T) {
	t.Parallel()
	for _, blockOn := range []job.State{job.Processing, job.Completed} {
		t.Run(blockOn.String(), func(t *testing.T) {
			t.Parallel()
			blocked := make(chan struct{})
			release := make(chan struct{})
			defer close(release)
			var once sync.Once
			slow := mustJob(t, job.WithKind("slow"), job.WithExecutor(func() {}),
				job.WithStateChangeProcessor(func(_ job.Instance, s job.State) {
					if s == blockOn {
						once.Do(func() { close(blocked) })
						<-release
					}
				}))
			fast := mustJob(t, job.WithKind("fast"), job.WithExecutor(func() {}))
			m := newManager(t, job.WithWorkers(4))
			for _, j := range []*job.Job{slow, fast} {
				if err := m.RegisterJob(j); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			scheduleN(t, m, "slow", 1)
			waitFor(t, "the slow handler to block", func() bool {
				select {
				case <-blocked:
					return true
				default:
					return false
				}
			})
			scheduleN(t, m, "fast", 50)
			waitFor(t, "50 fast instances completed while the handler blocks", func() bool {
				return countState(t, m, "fast", job.Completed) == 50
			})
			if n := countState(t, m, "slow", job.Completed); n != 1 {
				t.Errorf("%d slow instances completed, want 1: its handler must not hold its outcome", n)
			}
		})
	}
}

// TestHandlerQueueFull checks that when handlers fall behind by more than
// the handler queue, calls are dropped and counted, and the engine goes
// on.
func TestHandlerQueueFull(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	var ran atomic.Int64
	j := mustJob(t, job.WithKind("q"), job.WithExecutor(func() {}),
		job.WithCompleteProcessor(func(job.Instance, []any) {
			ran.Add(1)
			<-release
		}))
	m := newManager(t, job.WithHandlerQueue(4), job.WithWorkers(8))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	scheduleN(t, m, "q", 40)
	waitFor(t, "40 completed instances while the handler blocks", func() bool {
		return countState(t, m, "q", job.Completed) == 40
	})
	// One call runs (blocked), four wait, the other 35 were dropped. The
	// handler goroutine counts a call once it has taken it from the
	// queue: wait until every one of the 40 is counted somewhere.
	waitFor(t, "the handler queue to fill and every call to be counted", func() bool {
		st := m.HandlerStats()
		return st.Queued == 4 && st.Calls+int64(st.Queued)+st.Dropped == 40
	})
	if st := m.HandlerStats(); st.Dropped != 35 || st.Calls != 1 {
		t.Errorf("HandlerStats %+v, want 1 call, 4 queued, 35 dropped", st)
	}
	if ran.Load() != 1 {
		t.Errorf("%d handler calls ran, want 1", ran.Load())
	}
}

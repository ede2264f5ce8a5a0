package job_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// beatCutStore fails only heartbeats while cut: the node fences itself,
// yet the store still holds its leases and takes its outcomes.
type beatCutStore struct {
	store.Store
	cut atomic.Bool
}

func (s *beatCutStore) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if s.cut.Load() {
		return nil, errCut
	}
	return s.Store.Heartbeat(ctx, p)
}

func (s *beatCutStore) Subscribe(ctx context.Context, q string) (<-chan struct{}, error) {
	return s.Store.(store.Notifier).Subscribe(ctx, q)
}

// runLog records the attempt number of every run of an executor.
type runLog struct {
	mu   sync.Mutex
	runs []int
}

func (r *runLog) add(attempt int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, attempt)
	return len(r.runs)
}

func (r *runLog) get() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// TestFencedExecutorOutcome: a node whose heartbeats fail fences itself
// and cancels its attempts, but the store still holds their leases. An
// executor that returns on its own after the fence (it ran to its end,
// whatever its context said) has its real outcome recorded: a completed
// run is not run again, a failure counts its attempt, so no attempt
// number runs twice. Only an executor stopped by the fence (it returned
// its context's error) is handed back, its attempt not counted.
func TestFencedExecutorOutcome(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, c := range []struct {
		name string
		// first is what the first run returns once the fence canceled it.
		first       func(ctx context.Context) (string, error)
		maxRetries  int
		wantRuns    []int // the attempt number of each run
		wantState   job.State
		wantAttempt int
		wantResult  string
	}{
		{"completed", func(context.Context) (string, error) { return "first", nil }, 3, []int{1}, job.Completed, 1, `["first"]`},
		{"failed with retries left", func(context.Context) (string, error) { return "", boom }, 3, []int{1, 2}, job.Completed, 2, `["again"]`},
		{"failed for good", func(context.Context) (string, error) { return "", job.Permanent(boom) }, 3, []int{1}, job.Terminated, 1, ""},
		{"failed, no retries left", func(context.Context) (string, error) { return "", boom }, 0, []int{1}, job.Terminated, 1, ""},
		{"stopped by the fence", func(ctx context.Context) (string, error) { return "", ctx.Err() }, 3, []int{1, 1}, job.Completed, 1, `["again"]`},
		{"stopped, returning the cause", func(ctx context.Context) (string, error) { return "", context.Cause(ctx) }, 3, []int{1, 1}, job.Completed, 1, `["again"]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				cs := &beatCutStore{Store: newMemdb(t)}
				var runs runLog
				causes := make(chan error, 1)
				j := mustJob(t, job.WithKind("k"), job.WithMaxRetries(c.maxRetries), job.WithBackoff(job.ConstantBackoff(time.Second)),
					job.WithExecutor(func(ctx context.Context, ji job.Instance) (string, error) {
						if runs.add(ji.Info().Attempt) > 1 {
							return "again", nil
						}
						<-ctx.Done() // the fence
						causes <- context.Cause(ctx)
						return c.first(ctx)
					}))
				m := newManager(t, job.WithStore(cs), job.WithNodeID("a"), job.WithLogger(quietLogger()))
				if err := m.RegisterJob(j); err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if err := m.Start(ctx); err != nil {
					t.Fatal(err)
				}
				ji, err := m.ScheduleJob(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if got := runs.get(); len(got) != 1 {
					t.Fatalf("runs %v before the cut, want one", got)
				}
				cs.cut.Store(true)
				if cause := <-causes; !errors.Is(cause, job.ErrLeaseLost) {
					t.Fatalf("first run canceled with %v, want the fence's ErrLeaseLost", cause)
				}
				if h := m.Health(); !h.Fenced {
					t.Fatalf("not fenced: %+v", h)
				}
				time.Sleep(100 * time.Millisecond) // fenced a while, below the dead threshold
				cs.cut.Store(false)
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				if err := m.Wait(wctx); err != nil {
					t.Fatal(err)
				}
				if got := runs.get(); !slices.Equal(got, c.wantRuns) {
					t.Errorf("runs with attempts %v, want %v", got, c.wantRuns)
				}
				got := stateOf(t, m, ji.ID)
				if got.State != c.wantState || got.Attempt != c.wantAttempt {
					t.Errorf("instance %v attempt %d, want %v attempt %d", got.State, got.Attempt, c.wantState, c.wantAttempt)
				}
				hist, err := m.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstanceID(ji.ID)))
				if err != nil {
					t.Fatal(err)
				}
				var processing []int
				final := 0
				for _, h := range hist {
					if h.State == job.Processing {
						processing = append(processing, h.Attempt)
					}
					if h.State.Final() {
						final++
						if c.wantResult != "" && string(h.Result) != c.wantResult {
							t.Errorf("final record's result %s, want %s", h.Result, c.wantResult)
						}
					}
				}
				if !slices.Equal(processing, c.wantRuns) {
					t.Errorf("history has Processing records of attempts %v, want %v", processing, c.wantRuns)
				}
				if final != 1 {
					t.Errorf("%d final history records, want 1: %s", final, fmtHistory(hist))
				}
			})
		})
	}
}

func fmtHistory(hist []*job.HistoryRecord) string {
	s := ""
	for _, h := range hist {
		s += fmt.Sprintf("\n  %v attempt %d node %s err %q result %s", h.State, h.Attempt, h.Node, h.Error, h.Result)
	}
	return s
}

// TestFencedLateOutcomeAfterRescue: a node cut off from the store fences
// itself; its executor finishes its work right after the fence, but the
// outcome cannot be written until the store is back, and by then another
// node declared it dead and ran the instance again (attempt 2). The late
// outcome is refused by the store's lease check (ErrLeaseLost): the
// instance keeps the rescuer's result, and nothing is lost or run twice
// at once.
func TestFencedLateOutcomeAfterRescue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem := newMemdb(t)
		cs := &cutStore{Store: mem}
		var ov overlap
		var runs runLog
		newJob := func(node string) *job.Job {
			return mustJob(t, job.WithKind("k"), job.WithMaxRetries(3), job.WithExecutor(func(ctx context.Context, ji job.Instance) (string, error) {
				ov.enter(ji.Info().ID)
				defer ov.leave(ji.Info().ID)
				if runs.add(ji.Info().Attempt) == 1 {
					<-ctx.Done() // the fence; the work ends right then
				}
				return "from " + node, nil
			}))
		}
		var alog logBuf
		a := newManager(t, job.WithStore(cs), job.WithNodeID("a"), job.WithLogger(alog.logger()))
		b := newManager(t, job.WithStore(mem), job.WithNodeID("b"), job.WithLogger(quietLogger()))
		if err := a.RegisterJob(newJob("a")); err != nil {
			t.Fatal(err)
		}
		if err := b.RegisterJob(newJob("b")); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		ji, err := a.ScheduleJob(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := runs.get(); len(got) != 1 {
			t.Fatalf("runs %v before b starts, want a's one", got)
		}
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		cs.cut.Store(true)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := b.Wait(wctx); err != nil {
			t.Fatal(err)
		}
		if got := stateOf(t, b, ji.ID); got.State != job.Completed || got.Attempt != 2 {
			t.Fatalf("after b's rescue: %v attempt %d, want Completed attempt 2", got.State, got.Attempt)
		}
		cs.cut.Store(false)
		deadline := time.Now().Add(2 * time.Minute)
		for alog.count("outcome discarded: lease lost") == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("a's late outcome never reached the store; log:\n%s", alog.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		wantBsRun(t, b, ji.ID, &runs)
		if peak, _ := ov.stats(); peak > 1 {
			t.Errorf("the instance ran %d times at once", peak)
		}
	})
}

// TestStopKeepsOutcomeOfRunToItsEnd: Stop cancels the running attempts
// (cause ErrShutdown) and hands back those it stopped; one whose executor
// ran to its end all the same (it returned nil) is recorded Completed, not
// handed back to run again.
func TestStopKeepsOutcomeOfRunToItsEnd(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		causes := make(chan error, 2)
		j := mustJob(t, job.WithKind("k"), job.WithExecutor(func(ctx context.Context, n int) (int, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			if n == 1 {
				return 0, ctx.Err() // stopped
			}
			return 7, nil // ran to its end
		}))
		m := newManager(t, job.WithLogger(quietLogger()))
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		stopped, err := m.ScheduleJob(ctx, "k", job.WithArguments(1))
		if err != nil {
			t.Fatal(err)
		}
		ran, err := m.ScheduleJob(ctx, "k", job.WithArguments(2))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := m.Stop(sctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		for range 2 {
			if c := <-causes; !errors.Is(c, job.ErrShutdown) {
				t.Errorf("executor canceled with %v, want ErrShutdown", c)
			}
		}
		if got := stateOf(t, m, stopped.ID); got.State != job.Scheduled || got.Attempt != 0 {
			t.Errorf("stopped executor: %v attempt %d, want Scheduled attempt 0 (handed back)", got.State, got.Attempt)
		}
		if got := stateOf(t, m, ran.ID); got.State != job.Completed || got.Attempt != 1 || len(got.Results()) != 1 {
			t.Errorf("executor that ran to its end: %v attempt %d results %v, want Completed attempt 1 with its result", got.State, got.Attempt, got.Results())
		}
	})
}

// wantBsRun checks that instance id ended as manager b's run, rescued
// from a: Completed at attempt 2 with b's result ("from b"), one final
// history record, and runs of attempts 1 (a's) and 2 (b's) only.
func wantBsRun(t *testing.T, b *job.Manager, id string, runs *runLog) {
	t.Helper()
	got := stateOf(t, b, id)
	if got.State != job.Completed || got.Attempt != 2 {
		t.Errorf("%v attempt %d, want b's Completed attempt 2", got.State, got.Attempt)
	}
	if res := got.Results(); len(res) != 1 || res[0] != "from b" {
		t.Errorf("results %v, want b's", res)
	}
	hist, err := b.LookupInstanceHistory(t.Context(), job.NewQuery(job.WithQueryInstanceID(id)))
	if err != nil {
		t.Fatal(err)
	}
	final := 0
	for _, h := range hist {
		if h.State.Final() {
			final++
		}
	}
	if final != 1 {
		t.Errorf("%d final history records, want b's one:%s", final, fmtHistory(hist))
	}
	if got := runs.get(); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("runs with attempts %v, want [1 2]", got)
	}
}

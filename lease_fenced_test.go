package job_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// TestLeaseFencedExecutorOutcome: renewals fail (the store is slow or
// unreachable for renewals only), so the watchdog fences the attempt
// before its lease ends and cancels it with ErrLeaseLost; the store still
// holds the lease and takes outcomes. As for a node's fence, an executor
// that returns on its own after the cancel ran to its end and has its
// real outcome recorded (a completed run is not run again, a failure
// counts its attempt with its own error), and one stopped by the cancel
// is handed back, its attempt not counted, instead of waiting for its
// lease to lapse and be rescued.
func TestLeaseFencedExecutorOutcome(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, c := range []struct {
		name        string
		first       func(ctx context.Context) (string, error) // what the first run returns once canceled
		maxRetries  int
		wantRuns    []int // the attempt number of each run
		wantState   job.State
		wantAttempt int
		wantResult  string
		wantErr     string // in the history: the error that ended the first run
	}{
		{"completed", func(context.Context) (string, error) { return "first", nil }, 3, []int{1}, job.Completed, 1, `["first"]`, ""},
		{"failed with retries left", func(context.Context) (string, error) { return "", boom }, 3, []int{1, 2}, job.Completed, 2, `["again"]`, "boom"},
		{"failed for good", func(context.Context) (string, error) { return "", job.Permanent(boom) }, 3, []int{1}, job.Terminated, 1, "", "boom"},
		{"stopped by the fence", func(ctx context.Context) (string, error) { return "", ctx.Err() }, 3, []int{1, 1}, job.Completed, 1, `["again"]`, "handed back"},
		{"stopped, returning the cause", func(ctx context.Context) (string, error) { return "", context.Cause(ctx) }, 3, []int{1, 1}, job.Completed, 1, `["again"]`, "handed back"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				fs := &faultStore{Store: newMemdb(t)}
				var runs runLog
				causes := make(chan error, 1)
				j := mustJob(t, job.WithKind("k"), job.WithMaxRetries(c.maxRetries), job.WithBackoff(job.ConstantBackoff(time.Second)),
					job.WithExecutor(func(ctx context.Context, ji job.Instance) (string, error) {
						if runs.add(ji.Info().Attempt) > 1 {
							return "again", nil
						}
						<-ctx.Done() // the watchdog's fence
						causes <- context.Cause(ctx)
						return c.first(ctx)
					}))
				m := newManager(t, job.WithStore(fs), job.WithNodeID("a"), job.WithLease(30*time.Second), job.WithLogger(quietLogger()))
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
					t.Fatalf("runs %v before renewals fail, want one", got)
				}
				fs.fail(errors.New("renewal timed out"), nil, nil)
				start := time.Now()
				if cause := <-causes; !errors.Is(cause, job.ErrLeaseLost) {
					t.Fatalf("first run canceled with %v, want the watchdog's ErrLeaseLost", cause)
				}
				if h := m.Health(); h.Fenced {
					t.Fatalf("the node fenced itself (%+v); this test is about the lease's own fence", h)
				}
				if d := time.Since(start); d > 30*time.Second {
					t.Fatalf("fenced %v after renewals began to fail, want before the 30 s lease ends", d)
				}
				synctest.Wait() // the outcome is written, before the lease would end
				fs.fail(nil, nil, nil)
				wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
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
				final, sawErr := 0, c.wantErr == ""
				for _, h := range hist {
					if h.State.Final() {
						final++
						if c.wantResult != "" && string(h.Result) != c.wantResult {
							t.Errorf("final record's result %s, want %s", h.Result, c.wantResult)
						}
					}
					if c.wantErr != "" && strings.Contains(h.Error, c.wantErr) {
						sawErr = true
					}
					if strings.Contains(h.Error, "expired") {
						t.Errorf("the instance was rescued after its lease expired; its outcome should have been written:%s", fmtHistory(hist))
					}
				}
				if final != 1 {
					t.Errorf("%d final history records, want 1:%s", final, fmtHistory(hist))
				}
				if !sawErr {
					t.Errorf("no history record with error %q:%s", c.wantErr, fmtHistory(hist))
				}
			})
		})
	}
}

// finishLog records the (instance, attempt) of every outcome a manager
// submits to the store.
type finishLog struct {
	store.Store
	mu   sync.Mutex
	sent []store.LeaseRef
}

func (s *finishLog) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	s.mu.Lock()
	for _, o := range p.Outcomes {
		s.sent = append(s.sent, store.LeaseRef{ID: o.ID, Attempt: o.Attempt})
	}
	s.mu.Unlock()
	return s.Store.Finish(ctx, p)
}

func (s *finishLog) attempts(id string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for _, r := range s.sent {
		if r.ID == id {
			out = append(out, r.Attempt)
		}
	}
	return out
}

// TestRenewLostDiscardsOutcome pins the other way an attempt's own lease
// ends: a renewal the store answers "lost" (here a rescuer whose clock
// runs ahead took the instance). The store has said the attempt is no
// longer this manager's, and it refuses an outcome on the same lease
// check, so whatever the executor returns after the cancel is discarded,
// never submitted, and the rescued attempt's outcome stands.
func TestRenewLostDiscardsOutcome(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem := newMemdb(t)
		fl := &finishLog{Store: mem}
		var runs runLog
		causes := make(chan error, 1)
		j := mustJob(t, job.WithKind("k"), job.WithMaxRetries(3), job.WithBackoff(job.ConstantBackoff(time.Second)),
			job.WithExecutor(func(ctx context.Context, ji job.Instance) (string, error) {
				if runs.add(ji.Info().Attempt) > 1 {
					return "rescued run", nil
				}
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return "first run", nil // ran to its end all the same
			}))
		m := newManager(t, job.WithStore(fl), job.WithNodeID("a"), job.WithWorkers(1), job.WithLease(30*time.Second), job.WithLogger(quietLogger()))
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
			t.Fatalf("runs %v before the rescue, want one", got)
		}
		// A rescuer whose clock is past the lease takes the instance.
		rescued, err := mem.Rescue(ctx, &store.RescueParams{Now: time.Now().Add(31 * time.Second), Limit: 10, Node: "skewed"})
		if err != nil || len(rescued) != 1 {
			t.Fatalf("Rescue: %d instances, %v; want the running one", len(rescued), err)
		}
		if cause := <-causes; !errors.Is(cause, job.ErrLeaseLost) {
			t.Fatalf("first run canceled with %v, want ErrLeaseLost from its renewal", cause)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err := m.Wait(wctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got := stateOf(t, m, ji.ID)
		if got.State != job.Completed || got.Attempt != 2 {
			t.Errorf("%v attempt %d, want Completed attempt 2 (the rescued run)", got.State, got.Attempt)
		}
		if res := got.Results(); len(res) != 1 || res[0] != "rescued run" {
			t.Errorf("results %v, want the rescued run's", res)
		}
		if sent := fl.attempts(ji.ID); slices.Contains(sent, 1) {
			t.Errorf("outcomes submitted for attempts %v: attempt 1's after the store said its lease was lost", sent)
		}
		if got := runs.get(); !slices.Equal(got, []int{1, 2}) {
			t.Errorf("runs with attempts %v, want [1 2]", got)
		}
	})
}

// TestLeaseFencedLateOutcomeAfterRescue: renewals fail, the watchdog
// fences the attempt, and its executor ignores the cancel and ends only
// after the lease ended and another manager rescued the instance and ran
// it again. Its outcome is submitted, and the store's lease check refuses
// it (ErrLeaseLost): the rescuer's result stands and the late one never
// overwrites it.
func TestLeaseFencedLateOutcomeAfterRescue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem := newMemdb(t)
		fs := &faultStore{Store: mem}
		var runs runLog
		newJob := func(node string) *job.Job {
			return mustJob(t, job.WithKind("k"), job.WithMaxRetries(3), job.WithExecutor(func(ctx context.Context, ji job.Instance) (string, error) {
				if runs.add(ji.Info().Attempt) == 1 {
					<-ctx.Done()
					time.Sleep(2 * time.Minute) // ignores the cancel, well past the lease
				}
				return "from " + node, nil
			}))
		}
		var alog logBuf
		a := newManager(t, job.WithStore(fs), job.WithNodeID("a"), job.WithWorkers(1), job.WithLease(30*time.Second), job.WithLogger(alog.logger()))
		b := newManager(t, job.WithStore(mem), job.WithNodeID("b"), job.WithLease(30*time.Second), job.WithLogger(quietLogger()))
		if err := a.RegisterJob(newJob("a")); err != nil {
			t.Fatal(err)
		}
		if err := b.RegisterJob(newJob("b")); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ji, err := a.ScheduleJob(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := runs.get(); len(got) != 1 {
			t.Fatalf("runs %v before renewals fail, want a's one", got)
		}
		fs.fail(errors.New("renewal timed out"), nil, nil)
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if n := alog.count("outcome discarded: lease lost"); n != 1 {
			t.Errorf("a's late outcome refused %d times, want once; log:\n%s", n, alog.String())
		}
		wantBsRun(t, b, ji.ID, &runs)
	})
}

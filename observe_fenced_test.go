package job_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// heartbeatCut fails a manager's heartbeats while cut and passes every
// other call: its node fences itself while the store still holds its
// leases and takes its outcomes.
type heartbeatCut struct {
	store.Store
	cut atomic.Bool
}

func (s *heartbeatCut) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if s.cut.Load() {
		return nil, errors.New("heartbeat timed out")
	}
	return s.Store.Heartbeat(ctx, p)
}

func (s *heartbeatCut) Subscribe(ctx context.Context, q string) (<-chan struct{}, error) {
	return s.Store.(store.Notifier).Subscribe(ctx, q)
}

// finishedBrief is what TestObserverFencedOnce compares of an
// AttemptFinishedEvent.
type finishedBrief struct {
	State      job.State
	Attempt    int
	HandedBack bool
}

func (r *eventRecorder) finishedBriefs() []finishedBrief {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []finishedBrief
	for _, e := range r.finished {
		out = append(out, finishedBrief{e.State, e.Attempt, e.HandedBack})
	}
	return out
}

func (r *eventRecorder) lostReasons() []job.LeaseLostReason {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []job.LeaseLostReason
	for _, e := range r.lost {
		out = append(out, e.Reason)
	}
	return out
}

// TestObserverFencedOnce: an attempt a fence stopped (its lease could not
// be renewed, or its node's heartbeats failed) is reported once, for what
// became of it: finished (in the state its outcome left, or handed back)
// when the store took its outcome, since the store still held the lease;
// its lease lost, with the fence's reason, only when the store refused
// the outcome because another manager had rescued the instance. Before,
// the fence reported the lease lost at once and the outcome it recorded
// reported the attempt finished as well (or its lease lost a second time,
// reason finish).
func TestObserverFencedOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		node         bool                                      // the node's fence, not the lease's
		first        func(ctx context.Context) (string, error) // what the first run returns once canceled
		wantFinished []finishedBrief
	}{
		{"lease fence, ran to its end", false, func(context.Context) (string, error) { return "first", nil },
			[]finishedBrief{{job.Completed, 1, false}}},
		{"lease fence, handed back", false, func(ctx context.Context) (string, error) { return "", ctx.Err() },
			[]finishedBrief{{job.Scheduled, 1, true}, {job.Completed, 1, false}}},
		{"node fence, ran to its end", true, func(context.Context) (string, error) { return "first", nil },
			[]finishedBrief{{job.Completed, 1, false}}},
		{"node fence, handed back", true, func(ctx context.Context) (string, error) { return "", ctx.Err() },
			[]finishedBrief{{job.Scheduled, 1, true}, {job.Completed, 1, false}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				fs := &faultStore{Store: newMemdb(t)}
				hc := &heartbeatCut{Store: fs}
				rec := &eventRecorder{}
				var runs runLog
				causes := make(chan error, 1)
				j := mustJob(t, job.WithKind("k"), job.WithMaxRetries(3), job.WithExecutor(func(ctx context.Context, ji job.Instance) (string, error) {
					if runs.add(ji.Info().Attempt) > 1 {
						return "again", nil
					}
					<-ctx.Done()
					causes <- context.Cause(ctx)
					if c.node {
						hc.cut.Store(false) // the node comes back; its outcome is written then
					}
					return c.first(ctx)
				}))
				m := newManager(t, job.WithStore(hc), job.WithNodeID("a"), job.WithObserver(rec), job.WithLogger(quietLogger()))
				if err := m.RegisterJob(j); err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if err := m.Start(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := m.ScheduleJob(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if c.node {
					hc.cut.Store(true)
				} else {
					fs.fail(errors.New("renewal timed out"), nil, nil)
				}
				if cause := <-causes; !errors.Is(cause, job.ErrLeaseLost) {
					t.Fatalf("first run canceled with %v, want a fence's ErrLeaseLost", cause)
				}
				fs.fail(nil, nil, nil)
				wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				defer cancel()
				if err := m.Wait(wctx); err != nil {
					t.Fatal(err)
				}
				if got := rec.finishedBriefs(); !slices.Equal(got, c.wantFinished) {
					t.Errorf("attempts finished %+v, want %+v", got, c.wantFinished)
				}
				if got := rec.lostReasons(); len(got) != 0 {
					t.Errorf("leases lost %v, want none: the store took the fenced attempt's outcome", got)
				}
			})
		})
	}
	t.Run("refused after a rescue", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			fs := &faultStore{Store: newMemdb(t)}
			rec := &eventRecorder{}
			var runs runLog
			j := mustJob(t, job.WithKind("k"), job.WithMaxRetries(3), job.WithExecutor(func(ctx context.Context, ji job.Instance) (string, error) {
				if runs.add(ji.Info().Attempt) == 1 {
					<-ctx.Done()
					time.Sleep(2 * time.Minute) // ignores the cancel, past the lease
				}
				return "done", nil
			}))
			a := newManager(t, job.WithStore(fs), job.WithNodeID("a"), job.WithWorkers(1), job.WithObserver(rec), job.WithLogger(quietLogger()))
			if err := a.RegisterJob(j); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := a.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := a.ScheduleJob(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			fs.fail(errors.New("renewal timed out"), nil, nil)
			// The lease ends and the rescuer moves the instance back; a's
			// executor returns later and its outcome is refused.
			time.Sleep(3 * time.Minute)
			synctest.Wait()
			wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			if err := a.Wait(wctx); err != nil {
				t.Fatal(err)
			}
			if got := runs.get(); !slices.Equal(got, []int{1, 2}) {
				t.Fatalf("runs with attempts %v, want [1 2]: the rescued instance runs again", got)
			}
			if got, want := rec.lostReasons(), []job.LeaseLostReason{job.LeaseLostFence}; !slices.Equal(got, want) {
				t.Errorf("leases lost %v, want %v: once, for the fence", got, want)
			}
			for _, f := range rec.finishedBriefs() {
				if f.Attempt == 1 {
					t.Errorf("attempt 1 reported finished %+v; the store refused its outcome", f)
				}
			}
		})
	})
}

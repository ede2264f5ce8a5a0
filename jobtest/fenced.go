package jobtest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

func init() {
	register("FencedRunRecorded", testFencedRunRecorded)
}

// errBeatCut is the error of a heartbeat that beatCut fails.
var errBeatCut = errors.New("jobtest: heartbeats cut")

// beatCut fails the heartbeats of a manager while cut, and passes every
// other call: the node fences itself while the store still holds its
// leases and takes its outcomes.
type beatCut struct {
	store.Store
	cut atomic.Bool
}

func (s *beatCut) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if s.cut.Load() {
		return nil, errBeatCut
	}
	return s.Store.Heartbeat(ctx, p)
}

// beatCutNotifier is a beatCut over a store with wake-ups.
type beatCutNotifier struct{ *beatCut }

func (s beatCutNotifier) Subscribe(ctx context.Context, q string) (<-chan struct{}, error) {
	return s.Store.(store.Notifier).Subscribe(ctx, q)
}

// testFencedRunRecorded: a manager whose heartbeats fail fences itself and
// cancels its running attempt (cause ErrLeaseLost); the executor ends its
// work all the same and returns a result. The store still holds the lease,
// so that result is recorded (Completed in attempt 1) and the instance
// does not run again.
func testFencedRunRecorded(t *testing.T, e *env) {
	bc := &beatCut{Store: e.store(t)}
	var st store.Store = bc
	if _, ok := bc.Store.(store.Notifier); ok {
		st = beatCutNotifier{bc}
	}
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	var (
		mu   sync.Mutex
		runs []int
	)
	j := mustJob(t, job.WithKind("fenced"), job.WithMaxRetries(3), job.WithExecutor(func(ctx context.Context, ji job.Instance) (string, error) {
		mu.Lock()
		runs = append(runs, ji.Attempt())
		n := len(runs)
		mu.Unlock()
		if n > 1 {
			return "again", nil
		}
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "ran", nil // its work ended right then
	}))
	m := e.manager(t, []*job.Job{j}, job.WithStore(st))
	start(t, m)
	ji := schedule(t, m, "fenced")
	select {
	case <-started:
	case <-time.After(deadline):
		t.Fatal("instance did not start")
	}
	bc.cut.Store(true)
	select {
	case cause := <-causes:
		if !errors.Is(cause, job.ErrLeaseLost) {
			t.Errorf("attempt canceled with %v, want the fence's ErrLeaseLost", cause)
		}
	case <-time.After(deadline):
		t.Fatal("the manager did not fence itself while its heartbeats failed")
	}
	bc.cut.Store(false)
	got := waitState(t, m, ji.ID(), job.Completed, deadline)
	if got.Attempt() != 1 {
		t.Errorf("completed in attempt %d, want 1", got.Attempt())
	}
	var res string
	if err := got.ResultsInto(&res); err != nil || res != "ran" {
		t.Errorf("results %v (%v), want the fenced run's [ran]", got.Results(), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(runs, []int{1}) {
		t.Errorf("runs with attempts %v, want [1]: a run that ended must not run again", runs)
	}
}

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
	register("LeaseFencedRunRecorded", testLeaseFencedRunRecorded)
}

// errRenewCut is the error of a renewal that renewCut fails.
var errRenewCut = errors.New("jobtest: renewals cut")

// renewCut fails the lease renewals of a manager while cut, and passes
// every other call: the watchdog fences the attempt before its lease
// ends while the store still holds the lease and takes outcomes.
type renewCut struct {
	store.Store
	cut atomic.Bool
}

func (s *renewCut) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	if s.cut.Load() {
		return nil, errRenewCut
	}
	return s.Store.Renew(ctx, p)
}

// renewCutNotifier is a renewCut over a store with wake-ups.
type renewCutNotifier struct{ *renewCut }

func (s renewCutNotifier) Subscribe(ctx context.Context, q string) (<-chan struct{}, error) {
	return s.Store.(store.Notifier).Subscribe(ctx, q)
}

// testLeaseFencedRunRecorded: a manager whose lease renewals fail cancels
// its running attempt before the lease ends (cause ErrLeaseLost); the
// executor ends its work all the same and returns a result. The store
// still holds the lease, so that result is recorded (Completed in attempt
// 1) instead of the lease lapsing and the instance running again.
func testLeaseFencedRunRecorded(t *testing.T, e *env) {
	rc := &renewCut{Store: e.store(t)}
	var st store.Store = rc
	if _, ok := rc.Store.(store.Notifier); ok {
		st = renewCutNotifier{rc}
	}
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	var (
		mu   sync.Mutex
		runs []int
	)
	j := mustJob(t, job.WithKind("leasefenced"), job.WithMaxRetries(3), job.WithExecutor(func(ctx context.Context, ji job.Instance) (string, error) {
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
	// A 3 s lease: renewed every second, fenced half a second before it
	// ends.
	m := e.manager(t, []*job.Job{j}, job.WithStore(st), job.WithLease(3*time.Second))
	start(t, m)
	ji := schedule(t, m, "leasefenced")
	select {
	case <-started:
	case <-time.After(deadline):
		t.Fatal("instance did not start")
	}
	rc.cut.Store(true)
	select {
	case cause := <-causes:
		if !errors.Is(cause, job.ErrLeaseLost) {
			t.Errorf("attempt canceled with %v, want the lease fence's ErrLeaseLost", cause)
		}
	case <-time.After(deadline):
		t.Fatal("the manager did not fence the attempt while its renewals failed")
	}
	got := waitState(t, m, ji.ID(), job.Completed, deadline)
	rc.cut.Store(false)
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

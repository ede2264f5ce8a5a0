package jobtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

func init() {
	register("FencedRunRecorded", func(t *testing.T, e *env) { testFencedRunRecorded(t, e, cutHeartbeats) })
	register("LeaseFencedRunRecorded", func(t *testing.T, e *env) { testFencedRunRecorded(t, e, cutRenewals) })
	register("LeaseFencedHandBacksEnd", testLeaseFencedHandBacksEnd)
}

// What a callCut fails while cut.
type cutWhat int

const (
	// cutHeartbeats: the node fences itself while the store still holds
	// its leases and takes its outcomes.
	cutHeartbeats cutWhat = iota
	// cutRenewals: the watchdog fences the attempt before its lease ends
	// while the store still holds the lease and takes outcomes.
	cutRenewals
)

// errCallCut is the error of a call that callCut fails.
var errCallCut = errors.New("jobtest: store call cut")

// callCut fails a manager's heartbeats or lease renewals (what) while cut,
// and passes every other call.
type callCut struct {
	store.Store
	what cutWhat
	cut  atomic.Bool
}

func (s *callCut) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if s.what == cutHeartbeats && s.cut.Load() {
		return nil, errCallCut
	}
	return s.Store.Heartbeat(ctx, p)
}

func (s *callCut) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	if s.what == cutRenewals && s.cut.Load() {
		return nil, errCallCut
	}
	return s.Store.Renew(ctx, p)
}

// callCutNotifier is a callCut over a store with wake-ups.
type callCutNotifier struct{ *callCut }

func (s callCutNotifier) Subscribe(ctx context.Context, q string) (<-chan struct{}, error) {
	return s.Store.(store.Notifier).Subscribe(ctx, q)
}

// testFencedRunRecorded: a manager whose heartbeats fail fences itself, or
// one whose lease renewals fail fences the attempt before its lease ends;
// either way the running attempt is canceled (cause ErrLeaseLost), and the
// executor ends its work all the same and returns a result. The store
// still holds the lease, so that result is recorded (Completed in attempt
// 1) and the instance does not run again.
func testFencedRunRecorded(t *testing.T, e *env, what cutWhat) {
	cc := &callCut{Store: e.store(t), what: what}
	var st store.Store = cc
	if _, ok := cc.Store.(store.Notifier); ok {
		st = callCutNotifier{cc}
	}
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	var (
		mu   sync.Mutex
		runs []int
	)
	kind := map[cutWhat]string{cutHeartbeats: "fenced", cutRenewals: "leasefenced"}[what]
	j := mustJob(t, job.WithKind(kind), job.WithMaxRetries(3), job.WithExecutor(func(ctx context.Context, ji job.Instance) (string, error) {
		mu.Lock()
		runs = append(runs, ji.Info().Attempt)
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
	opts := []job.ManagerOption{job.WithStore(st)}
	if what == cutRenewals {
		// A 3 s lease: renewed every second, fenced half a second before
		// it ends.
		opts = append(opts, job.WithLease(3*time.Second))
	}
	m := e.manager(t, []*job.Job{j}, opts...)
	start(t, m)
	ji := schedule(t, m, kind)
	select {
	case <-started:
	case <-time.After(deadline):
		t.Fatal("instance did not start")
	}
	cc.cut.Store(true)
	select {
	case cause := <-causes:
		if !errors.Is(cause, job.ErrLeaseLost) {
			t.Errorf("attempt canceled with %v, want the fence's ErrLeaseLost", cause)
		}
	case <-time.After(deadline):
		t.Fatalf("the attempt was not fenced while its store calls (%d) failed", what)
	}
	if what == cutHeartbeats {
		// The node comes back; the outcome it holds is written then. (Cut
		// renewals stay cut: the outcome needs no renewal.)
		cc.cut.Store(false)
	}
	got := waitState(t, m, ji.ID, job.Completed, deadline)
	cc.cut.Store(false)
	if got.Attempt != 1 {
		t.Errorf("completed in attempt %d, want 1", got.Attempt)
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

// testLeaseFencedHandBacksEnd: an instance's renewals always fail while
// its claims and outcomes go through, and its executor runs longer than
// its lease, returning on the fence's cancel. The first fence hands it
// back without counting the attempt; with WithFencedHandBacks(1) the
// second counts it, and with no retries left the job ends Terminated
// instead of being handed back for ever. The count of hand-backs in a row
// travels in the record the store returns with the next claim.
func testLeaseFencedHandBacksEnd(t *testing.T, e *env) {
	cc := &callCut{Store: e.store(t), what: cutRenewals}
	cc.cut.Store(true)
	var st store.Store = cc
	if _, ok := cc.Store.(store.Notifier); ok {
		st = callCutNotifier{cc}
	}
	var (
		mu   sync.Mutex
		runs []int
	)
	j := mustJob(t, job.WithKind("handbacks"), job.WithMaxRetries(0), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
		mu.Lock()
		runs = append(runs, ji.Info().Attempt)
		mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}))
	// A 3 s lease: fenced half a second before it ends, 2.5 s into each run.
	m := e.manager(t, []*job.Job{j}, job.WithStore(st), job.WithLease(3*time.Second), job.WithFencedHandBacks(1))
	start(t, m)
	ji := schedule(t, m, "handbacks")
	got := waitState(t, m, ji.ID, job.Terminated, deadline)
	if got.Attempt != 1 {
		t.Errorf("terminated in attempt %d, want 1 (the hand-back did not count, the second fence did)", got.Attempt)
	}
	if err := got.Error; err == "" || !strings.Contains(err, job.ErrLeaseLost.Error()) {
		t.Errorf("final error %v, want one saying the lease was lost", err)
	}
	hist, err := m.LookupInstanceHistory(context.Background(), job.NewQuery(job.WithQueryInstanceID(ji.ID)))
	if err != nil {
		t.Fatal(err)
	}
	backs := 0
	for _, h := range hist {
		if strings.HasPrefix(h.Error, "handed back") {
			backs++
		}
	}
	if backs != 1 {
		t.Errorf("%d hand-backs in the history, want 1", backs)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(runs, []int{1, 1}) {
		t.Errorf("runs with attempts %v, want [1 1]", runs)
	}
}

package job_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/fakeclock"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// adminCalls wraps a store and records the IDs of each Retry and Delete
// call, so tests see how a bulk operation splits its work.
type adminCalls struct {
	store.Store
	mu      sync.Mutex
	retries [][]string
	deletes [][]string
}

func (s *adminCalls) Retry(ctx context.Context, p *store.RetryParams) ([]store.AdminResult, error) {
	s.mu.Lock()
	s.retries = append(s.retries, append([]string(nil), p.IDs...))
	s.mu.Unlock()
	return s.Store.Retry(ctx, p)
}

func (s *adminCalls) Delete(ctx context.Context, p *store.DeleteParams) ([]store.AdminResult, error) {
	s.mu.Lock()
	s.deletes = append(s.deletes, append([]string(nil), p.IDs...))
	s.mu.Unlock()
	return s.Store.Delete(ctx, p)
}

// callSizes returns the number of IDs of each call, and how often each ID
// was named.
func callSizes(calls [][]string) (sizes []int, named map[string]int) {
	named = map[string]int{}
	for _, c := range calls {
		sizes = append(sizes, len(c))
		for _, id := range c {
			named[id]++
		}
	}
	return sizes, named
}

func newAdminStore(t *testing.T) *adminCalls {
	t.Helper()
	s, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return &adminCalls{Store: s}
}

// count returns how many instances q selects.
func count(t *testing.T, m *job.Manager, opts ...job.QueryOption) int {
	t.Helper()
	got, err := m.LookupInstances(context.Background(), job.NewQuery(opts...))
	if err != nil {
		t.Fatal(err)
	}
	return len(got)
}

func TestBulkRefusesUnclearFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t)
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ScheduleJob(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() (job.BulkResult, error){
		"delete, nil query":   func() (job.BulkResult, error) { return m.Admin().DeleteInstances(ctx, nil) },
		"delete, empty query": func() (job.BulkResult, error) { return m.Admin().DeleteInstances(ctx, job.NewQuery()) },
		"cancel, empty query": func() (job.BulkResult, error) { return m.Admin().CancelInstances(ctx, job.NewQuery()) },
		"retry, empty query":  func() (job.BulkResult, error) { return m.Admin().RetryInstances(ctx, job.NewQuery()) },
		"limit only": func() (job.BulkResult, error) {
			return m.Admin().DeleteInstances(ctx, job.NewQuery(job.WithQueryLimit(5)))
		},
		"cancel, final state": func() (job.BulkResult, error) {
			return m.Admin().CancelInstances(ctx, job.NewQuery(job.WithQueryState(job.Completed)))
		},
		"retry, pending state": func() (job.BulkResult, error) {
			return m.Admin().RetryInstances(ctx, job.NewQuery(job.WithQueryState(job.Scheduled)))
		},
		"log levels": func() (job.BulkResult, error) {
			return m.Admin().DeleteInstances(ctx, job.NewQuery(job.WithQueryKind("k"), job.WithQueryLevel(job.LogInfo)))
		},
		"batch 0": func() (job.BulkResult, error) {
			return m.Admin().DeleteInstances(ctx, job.NewQuery(job.WithQueryKind("k")), job.WithBulkBatch(0))
		},
		"batch 10001": func() (job.BulkResult, error) {
			return m.Admin().DeleteInstances(ctx, job.NewQuery(job.WithQueryKind("k")), job.WithBulkBatch(10001))
		},
		"nil option": func() (job.BulkResult, error) {
			return m.Admin().DeleteInstances(ctx, job.NewQuery(job.WithQueryKind("k")), nil)
		},
		"bad query": func() (job.BulkResult, error) {
			return m.Admin().DeleteInstances(ctx, job.NewQuery(job.WithQueryLimit(-1)))
		},
		"retry option": func() (job.BulkResult, error) {
			return m.Admin().CancelInstances(ctx, job.NewQuery(), job.WithBulkBatch(-3))
		},
	} {
		res, err := call()
		if !errors.Is(err, job.ErrInvalidOption) || res != (job.BulkResult{}) {
			t.Errorf("%s: %+v, %v; want nothing done and ErrInvalidOption", name, res, err)
		}
	}
	if n := count(t, m); n != 1 {
		t.Fatalf("%d instances after refused bulk calls, want the 1 scheduled", n)
	}
	// Meant: every instance goes.
	res, err := m.Admin().DeleteInstances(ctx, job.NewQuery(), job.WithAllInstances())
	if err != nil || res != (job.BulkResult{Matched: 1, Applied: 1}) {
		t.Fatalf("DeleteInstances with WithAllInstances: %+v, %v; want 1 deleted", res, err)
	}
}

// TestBulkDeleteInBatches: a bulk delete names each instance once, in
// store calls of at most the batch size, and leaves what the query does
// not select.
func TestBulkDeleteInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newAdminStore(t)
	// One clock reading for all: instances that share a creation time
	// are still each found once.
	clk := fakeclock.New(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	m := newManager(t, job.WithStore(st), job.WithClock(clk))
	for _, k := range []string{"a", "b"} {
		if err := m.RegisterJob(mustJob(t, job.WithKind(k), job.WithExecutor(func() {}))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1203 {
		if _, err := m.ScheduleJob(ctx, "a", job.WithScheduleAfter(time.Duration(i%3)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for range 7 {
		if _, err := m.ScheduleJob(ctx, "b"); err != nil {
			t.Fatal(err)
		}
	}
	res, err := m.Admin().DeleteInstances(ctx, job.NewQuery(job.WithQueryKind("a")), job.WithBulkBatch(500))
	if err != nil || res != (job.BulkResult{Matched: 1203, Applied: 1203}) {
		t.Fatalf("DeleteInstances(kind a): %+v, %v; want 1203 deleted", res, err)
	}
	sizes, named := callSizes(st.deletes)
	if fmt.Sprint(sizes) != "[500 500 203]" {
		t.Errorf("store Delete calls of %v IDs, want [500 500 203]", sizes)
	}
	for id, n := range named {
		if n != 1 {
			t.Errorf("instance %s deleted %d times, want once", id, n)
		}
	}
	if a, b := count(t, m, job.WithQueryKind("a")), count(t, m, job.WithQueryKind("b")); a != 0 || b != 7 {
		t.Fatalf("after deleting kind a: %d of a and %d of b left, want 0 and 7", a, b)
	}
	// A Limit caps how many are handled; a time range narrows.
	res, err = m.Admin().DeleteInstances(ctx, job.NewQuery(job.WithQueryKind("b"), job.WithQueryLimit(3)))
	if err != nil || res.Applied != 3 || count(t, m, job.WithQueryKind("b")) != 4 {
		t.Fatalf("DeleteInstances with Limit 3: %+v, %v, %d left; want 3 deleted, 4 left", res, err, count(t, m, job.WithQueryKind("b")))
	}
	res, err = m.Admin().DeleteInstances(ctx, job.NewQuery(job.WithQuerySince(clk.Now().Add(time.Second))))
	if err != nil || res.Matched != 0 {
		t.Fatalf("DeleteInstances of a future range: %+v, %v; want nothing", res, err)
	}
}

// TestBulkRetry: failed instances are retried in batches, run again, and
// each is retried once.
func TestBulkRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newAdminStore(t)
	var mu sync.Mutex
	runs := map[string]int{}
	var onScheduled atomic.Int32
	j := mustJob(t, job.WithKind("flaky"), job.WithMaxRetries(0),
		job.WithStateChangeProcessor(func(ji job.Instance, s job.State) {
			if s == job.Scheduled && ji.Info().Attempt == 0 && ji.Info().Error == "" {
				onScheduled.Add(1) // scheduled, and retried with attempts reset
			}
		}),
		job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
			mu.Lock()
			defer mu.Unlock()
			runs[ji.Info().ID]++
			if runs[ji.Info().ID] == 1 {
				return errors.New("first run fails")
			}
			return nil
		}))
	m := newManager(t, job.WithStore(st), job.WithWorkers(8), job.WithPollInterval(10*time.Millisecond))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 120
	for range n {
		if _, err := m.ScheduleJob(ctx, "flaky"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every first run terminated", func() bool { return count(t, m, job.WithQueryState(job.Terminated)) == n })
	res, err := m.Admin().RetryInstances(ctx, job.NewQuery(job.WithQueryKind("flaky")), job.WithResetAttempts(), job.WithBulkBatch(50))
	if err != nil || res != (job.BulkResult{Matched: n, Applied: n}) {
		t.Fatalf("RetryInstances: %+v, %v; want %d retried", res, err, n)
	}
	// Retried instances that finish again meanwhile come back in the
	// lookups, so how the batches split varies; each is named once.
	sizes, named := callSizes(st.retries)
	for _, size := range sizes {
		if size > 50 {
			t.Errorf("a store Retry call of %d IDs, want at most the batch of 50", size)
		}
	}
	if len(named) != n {
		t.Errorf("store Retry calls named %d instances, want %d", len(named), n)
	}
	for id, c := range named {
		if c != 1 {
			t.Errorf("instance %s retried %d times, want once", id, c)
		}
	}
	waitFor(t, "every retry completed", func() bool { return count(t, m, job.WithQueryState(job.Completed)) == n })
	mu.Lock()
	for id, r := range runs {
		if r != 2 {
			t.Errorf("instance %s ran %d times, want 2", id, r)
		}
	}
	mu.Unlock()
	ins, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("flaky")))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		if in.Attempt != 1 {
			t.Fatalf("instance %s completed in attempt %d, want 1 (attempts reset)", in.ID, in.Attempt)
		}
	}
	waitFor(t, "state-change handlers saw every schedule and retry", func() bool { return onScheduled.Load() == 2*n })
	// Nothing final of that kind is left to retry but the completed ones;
	// Terminated only: none.
	res, err = m.Admin().RetryInstances(ctx, job.NewQuery(job.WithQueryKind("flaky"), job.WithQueryState(job.Terminated)))
	if err != nil || res.Matched != 0 {
		t.Fatalf("second RetryInstances of terminated ones: %+v, %v; want none matched", res, err)
	}
}

// TestBulkCancelWhileRunning: running instances stay Processing until
// their executors see the cancel; the bulk cancel handles each once and
// ends.
func TestBulkCancelWhileRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var started atomic.Int32
	j := mustJob(t, job.WithKind("block"), job.WithExecutor(func(ctx context.Context) error {
		started.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}))
	m := newManager(t, job.WithWorkers(4), job.WithPollInterval(10*time.Millisecond))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 30
	for range n {
		if _, err := m.ScheduleJob(ctx, "block"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "4 running", func() bool { return started.Load() == 4 })
	// Batches of 3: the running ones come back in every lookup until their
	// executors end, and must not be canceled twice or stall the loop.
	res, err := m.Admin().CancelInstances(ctx, job.NewQuery(job.WithQueryKind("block")), job.WithBulkBatch(3))
	if err != nil || res.Matched != n || res.Applied+res.Skipped != n {
		t.Fatalf("CancelInstances: %+v, %v; want %d matched, each applied or skipped", res, err, n)
	}
	waitFor(t, "every instance canceled", func() bool { return count(t, m, job.WithQueryState(job.Canceled)) == n })
	if s := started.Load(); s != 4 {
		t.Errorf("%d attempts started, want only the 4 running at the cancel", s)
	}
}

// TestDeleteRunning: deleting an instance that runs on another manager
// stops its attempt at that manager's next lease renewal, with
// ErrLeaseLost, and records no outcome; on this manager it stops at once.
func TestDeleteRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	causes := make(chan error, 2)
	release := make(chan struct{})
	j := func() *job.Job {
		return mustJob(t, job.WithKind("long"), job.WithExecutor(func(ctx context.Context) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			<-release
			return errors.New("stopped")
		}))
	}
	runner := newManager(t, job.WithStore(st), job.WithNodeID("runner"), job.WithLease(300*time.Millisecond), job.WithLogger(quietLogger()))
	if err := runner.RegisterJob(j()); err != nil {
		t.Fatal(err)
	}
	admin := newManager(t, job.WithStore(st), job.WithNodeID("admin")) // not started: no workers run
	if err := admin.RegisterJob(j()); err != nil {
		t.Fatal(err)
	}
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ji, err := admin.ScheduleJob(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "running on runner", func() bool {
		got, err := admin.GetInstance(ctx, ji.ID)
		return err == nil && got.State == job.Processing
	})
	if err := admin.DeleteInstance(ctx, ji.ID); err != nil {
		t.Fatalf("DeleteInstance of a running instance: %v", err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, job.ErrLeaseLost) {
			t.Fatalf("the deleted attempt's context ended with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deleted attempt was not stopped at the runner's lease renewal")
	}
	close(release)
	// Its outcome is not recorded: the instance stays gone.
	waitFor(t, "runner idle", func() bool { _, busy := runner.Workers(); return busy == 0 })
	if _, err := admin.GetInstance(ctx, ji.ID); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("deleted instance after its attempt ended: %v, want ErrNotFound", err)
	}
	if h, err := admin.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstanceID(ji.ID))); err != nil || len(h) != 0 {
		t.Fatalf("history of the deleted instance: %d records, %v; want none", len(h), err)
	}
	if err := admin.DeleteInstance(ctx, ji.ID); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("second DeleteInstance: %v, want ErrNotFound", err)
	}
}

// TestDeleteRunningHere: the manager that runs the instance stops it at
// once.
func TestDeleteRunningHere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	causes := make(chan error, 1)
	started := make(chan struct{})
	m := newManager(t, job.WithLease(time.Hour))
	if err := m.RegisterJob(mustJob(t, job.WithKind("long"), job.WithExecutor(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}))); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the executor itself: a busy worker slot is taken before
	// the claim and its attempt dispatched after it, and a delete in
	// between finds no local attempt to stop (its next renewal, an hour
	// away here, would).
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the instance did not start")
	}
	if err := m.DeleteInstance(ctx, ji.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, job.ErrLeaseLost) {
			t.Fatalf("context ended with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a deleted attempt running on this manager was not stopped (lease is 1h: no renewal came)")
	}
}

func TestRetryInstance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := fakeclock.New(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	m := newManager(t, job.WithClock(clk), job.WithNodeID("op"))
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(ctx, "k", job.WithScheduleAfter(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.RetryInstance(ctx, ji.ID); !errors.Is(err, job.ErrNotFinished) {
		t.Fatalf("RetryInstance of a scheduled instance: %v, want ErrNotFinished", err)
	}
	if _, err := m.RetryInstance(ctx, "no-such-id"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("RetryInstance of an unknown ID: %v, want ErrNotFound", err)
	}
	if _, err := m.CancelInstance(ctx, ji.ID); err != nil {
		t.Fatal(err)
	}
	at := clk.Now().Add(2 * time.Hour)
	got, err := m.RetryInstance(ctx, ji.ID, job.WithRetryAt(at))
	if err != nil {
		t.Fatalf("RetryInstance of a canceled instance: %v", err)
	}
	if got.State != job.Scheduled || !got.RunAt.Equal(at) || !got.FinishedAt.IsZero() {
		t.Fatalf("retried instance: %v due %v finished %v; want scheduled at %v, not finished", got.State, got.RunAt, got.FinishedAt, at)
	}
	h, err := m.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstance(ji)))
	if err != nil {
		t.Fatal(err)
	}
	if last := h[len(h)-1]; last.State != job.Scheduled || last.Error != "retried by op" {
		t.Fatalf("last history record %+v, want scheduled, retried by op", last)
	}
	if _, err := m.RetryInstance(ctx, ji.ID, nil); !errors.Is(err, job.ErrInvalidOption) {
		t.Fatalf("RetryInstance with a nil option: %v, want ErrInvalidOption", err)
	}
}

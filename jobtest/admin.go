package jobtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
)

func init() {
	register("AdminBulk", testAdminBulk)
	register("AdminDeleteRunningOnOtherManager", testAdminDeleteRemote)
}

// count returns how many instances the query options select.
func count(t *testing.T, m *job.Manager, opts ...job.QueryOption) int {
	t.Helper()
	got, err := m.LookupInstances(context.Background(), job.NewQuery(opts...))
	if err != nil {
		t.Fatalf("LookupInstances: %v", err)
	}
	return len(got)
}

// testAdminBulk: bulk retry, cancel and delete by query, in small
// batches, each touching what its query selects and nothing else.
func testAdminBulk(t *testing.T, e *env) {
	ctx := context.Background()
	var runs atomic.Int32
	flaky := mustJob(t, job.WithKind("flaky"), job.WithMaxRetries(0), job.WithExecutor(func() error {
		if runs.Add(1) <= 12 {
			return errors.New("first runs fail")
		}
		return nil
	}))
	later := mustJob(t, job.WithKind("later"), job.WithExecutor(func() {}))
	m := e.manager(t, []*job.Job{flaky, later}, job.WithWorkers(4))
	start(t, m)
	for range 12 {
		schedule(t, m, "flaky")
	}
	for range 9 {
		schedule(t, m, "later", job.WithScheduleAfter(time.Hour))
	}
	waitFor(t, deadline, "12 terminated", func() bool {
		return count(t, m, job.WithQueryKind("flaky"), job.WithQueryState(job.Terminated)) == 12
	})
	res, err := m.Admin().RetryInstances(ctx, job.NewQuery(job.WithQueryKind("flaky")), job.WithBulkBatch(5), job.WithResetAttempts())
	if err != nil || res.Matched != 12 || res.Applied != 12 {
		t.Fatalf("RetryInstances: %+v, %v; want 12 retried", res, err)
	}
	waitFor(t, deadline, "12 retries completed", func() bool {
		return count(t, m, job.WithQueryKind("flaky"), job.WithQueryState(job.Completed)) == 12
	})
	if n := runs.Load(); n != 24 {
		t.Errorf("%d runs, want 24 (each instance twice)", n)
	}
	res, err = m.Admin().CancelInstances(ctx, job.NewQuery(job.WithQueryKind("later")), job.WithBulkBatch(4))
	if err != nil || res != (job.BulkResult{Matched: 9, Applied: 9}) {
		t.Fatalf("CancelInstances: %+v, %v; want 9 canceled", res, err)
	}
	if n := count(t, m, job.WithQueryKind("later"), job.WithQueryState(job.Canceled)); n != 9 {
		t.Fatalf("%d canceled after CancelInstances, want 9", n)
	}
	res, err = m.Admin().DeleteInstances(ctx, job.NewQuery(job.WithQueryState(job.Canceled)), job.WithBulkBatch(2))
	if err != nil || res != (job.BulkResult{Matched: 9, Applied: 9}) {
		t.Fatalf("DeleteInstances of the canceled: %+v, %v; want 9 deleted", res, err)
	}
	if a, b := count(t, m, job.WithQueryKind("flaky")), count(t, m, job.WithQueryKind("later")); a != 12 || b != 0 {
		t.Fatalf("after deleting the canceled: %d flaky and %d later, want 12 and 0", a, b)
	}
	if _, err := m.Admin().DeleteInstances(ctx, job.NewQuery()); !errors.Is(err, job.ErrInvalidOption) {
		t.Fatalf("DeleteInstances with an empty query: %v, want ErrInvalidOption", err)
	}
}

// testAdminDeleteRemote deletes an instance while it runs on another
// manager: the runner loses its lease at its next renewal, the attempt's
// context ends with ErrLeaseLost, and its outcome is never recorded.
func testAdminDeleteRemote(t *testing.T, e *env) {
	started, causes, release := make(chan struct{}, 1), make(chan error, 1), make(chan struct{})
	j := mustJob(t, job.WithKind("long"), job.WithExecutor(func(ctx context.Context) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		select {
		case causes <- context.Cause(ctx):
		default:
		}
		<-release
		return errors.New("stopped")
	}))
	runner := e.manager(t, []*job.Job{j}, job.WithLease(300*time.Millisecond))
	other := e.manager(t, []*job.Job{mustJob(t, job.WithKind("long"), job.WithExecutor(func() {}))})
	start(t, runner)
	ji := schedule(t, other, "long")
	select {
	case <-started:
	case <-time.After(deadline):
		t.Fatal("instance did not start")
	}
	if err := other.DeleteInstance(context.Background(), ji.ID); err != nil {
		t.Fatalf("DeleteInstance of a running instance: %v", err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, job.ErrLeaseLost) {
			t.Fatalf("the deleted attempt's context ended with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(deadline):
		t.Fatal("the deleted attempt was not stopped")
	}
	close(release)
	waitFor(t, deadline, "runner idle", func() bool { _, busy := runner.Workers(); return busy == 0 })
	if _, err := other.GetInstance(context.Background(), ji.ID); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("deleted instance after its attempt ended: %v, want ErrNotFound", err)
	}
}

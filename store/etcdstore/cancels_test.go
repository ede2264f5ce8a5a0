package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobkit/job"
)

// TestCancelOtherNodeAtOnce: on etcd, a cancel asked through one manager
// of an attempt running on another manager (each on its own etcd client,
// as two processes) stops the attempt at once, through the store's
// cancel notices, not at the runner's next lease renewal (an hour away
// here). The attempt's context ends with ErrCanceled and the instance ends
// Canceled.
func TestCancelOtherNodeAtOnce(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	ctx := t.Context()
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	newJob := func() *job.Job {
		j, err := job.NewJob(job.WithKind("long"), job.WithExecutor(func(ctx context.Context) error {
			started <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	newManager := func(node string, opts ...job.ManagerOption) *job.Manager {
		m, err := job.NewManager(append([]job.ManagerOption{job.WithStore(open(t, ns)), job.WithNodeID(node)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = m.Stop(sctx)
		})
		if err := m.RegisterJob(newJob()); err != nil {
			t.Fatal(err)
		}
		return m
	}
	runner := newManager("runner", job.WithLease(3*time.Hour))
	admin := newManager("admin") // not started: runs nothing
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ji, err := admin.ScheduleJob(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("the attempt did not start within 15s")
	}
	asked := time.Now()
	if _, err := admin.CancelInstance(ctx, ji.ID()); err != nil {
		t.Fatalf("CancelInstance: %v", err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, job.ErrCanceled) {
			t.Fatalf("the attempt's context ended with %v, want ErrCanceled", cause)
		}
		t.Logf("canceled %v after the request", time.Since(asked))
	case <-time.After(5 * time.Second):
		t.Fatal("the attempt still runs 5s after the cancel (its renewal is an hour away)")
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := admin.LookupInstances(ctx, job.NewQuery(job.WithQueryState(job.Canceled)))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d canceled instances 15s after the cancel; want 1", len(got))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

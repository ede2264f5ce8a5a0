package job_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// TestCancelOtherNodeAtOnce: a cancel asked through one manager of an
// attempt running on another stops it at once when the store reports
// cancels (store.CancelNotifier: memdbstore does), not at the runner's
// next lease renewal (an hour away here). The attempt's context ends
// with ErrCanceled and the instance ends Canceled.
func TestCancelOtherNodeAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	j := func() *job.Job {
		return mustJob(t, job.WithKind("long"), job.WithExecutor(func(ctx context.Context) error {
			started <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}))
	}
	runner := newManager(t, job.WithStore(st), job.WithNodeID("runner"), job.WithLease(3*time.Hour))
	if err := runner.RegisterJob(j()); err != nil {
		t.Fatal(err)
	}
	admin := newManager(t, job.WithStore(st), job.WithNodeID("admin")) // not started: runs nothing
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
	<-started
	asked := time.Now()
	if _, err := admin.CancelInstance(ctx, ji.ID); err != nil {
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
	waitFor(t, "the instance ends Canceled", func() bool { return count(t, admin, job.WithQueryState(job.Canceled)) == 1 })
}

// lateCancelSubscriber is a memdb store whose cancel subscription is made
// only once the first cancel has been requested: the cancel notice itself
// is lost, as it is when a subscription is slow to start or a broken one
// is being renewed.
type lateCancelSubscriber struct {
	*memdbstore.Store
	asked chan struct{}
	once  sync.Once
}

func (s *lateCancelSubscriber) Cancel(ctx context.Context, p *store.CancelParams) (*store.Instance, error) {
	in, err := s.Store.Cancel(ctx, p)
	s.once.Do(func() { close(s.asked) })
	return in, err
}

func (s *lateCancelSubscriber) SubscribeCancels(ctx context.Context) (<-chan store.LeaseRef, error) {
	select {
	case <-s.asked:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.SubscribeCancels(ctx)
}

// TestCancelMissedBeforeSubscribing: a cancel requested while the
// runner's cancel subscription is not yet in place (its notice is lost)
// still stops the attempt at once: once subscribed, the runner renews its
// leases, and the renewal reports the request. Before, the attempt ran on
// until its next renewal, an hour away here (the race behind
// TestCancelOtherNodeAtOnce's failure in CI).
func TestCancelMissedBeforeSubscribing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	st := &lateCancelSubscriber{Store: mem, asked: make(chan struct{})}
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	runner := newManager(t, job.WithStore(st), job.WithNodeID("runner"), job.WithLease(3*time.Hour))
	if err := runner.RegisterJob(mustJob(t, job.WithKind("long"), job.WithExecutor(func(ctx context.Context) error {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}))); err != nil {
		t.Fatal(err)
	}
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	admin := newManager(t, job.WithStore(st), job.WithNodeID("admin")) // not started: runs nothing
	ji, err := runner.ScheduleJob(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := admin.CancelInstance(ctx, ji.ID); err != nil {
		t.Fatalf("CancelInstance: %v", err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, job.ErrCanceled) {
			t.Fatalf("the attempt's context ended with %v, want ErrCanceled", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt still runs 30s after the cancel whose notice was lost (its renewal is an hour away)")
	}
}

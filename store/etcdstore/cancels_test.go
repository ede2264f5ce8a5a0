package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
)

// TestCancelOtherNodeAtOnce: on etcd, a cancel asked through one manager
// of an attempt running on another manager (each on its own etcd client,
// as two processes) stops the attempt at once, through the store's
// cancel notices, not at the runner's next lease renewal (an hour away
// here). The attempt's context ends with ErrCanceled and the instance ends
// Canceled.
func TestCancelOtherNodeAtOnce(t *testing.T) {
	t.Parallel()
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

// TestCancelNoticesConcurrent: cancels of many running attempts at once,
// from several handles, each reach a subscriber, although they all put
// the namespace's one notice key (each put is a revision of its own).
func TestCancelNoticesConcurrent(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	cleanup(t, ns)
	s := open(t, ns)
	ch, err := s.SubscribeCancels(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	var ins []*store.Instance
	for i := range n {
		ins = append(ins, testInst(fmt.Sprintf("cc%02d", i)))
	}
	mustEnqueue(t, s, ins...)
	if got := claimN(t, s, "w", n); len(got) != n {
		t.Fatalf("claimed %d; want %d", len(got), n)
	}
	handles := []*etcdstore.Store{open(t, ns), open(t, ns), open(t, ns), open(t, ns)}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("cc%02d", i)
			if _, err := handles[i%len(handles)].Cancel(t.Context(), &store.CancelParams{ID: id, Now: t0, Node: "n"}); err != nil {
				t.Errorf("Cancel %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	want := map[store.LeaseRef]bool{}
	for i := range n {
		want[store.LeaseRef{ID: fmt.Sprintf("cc%02d", i), Attempt: 1}] = true
	}
	timeout := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case ref, ok := <-ch:
			if !ok {
				t.Fatal("the channel closed")
			}
			if !want[ref] {
				t.Fatalf("notice %+v: not one of the attempts canceled, or twice", ref)
			}
			delete(want, ref)
		case <-timeout:
			t.Fatalf("%d notices missing 10s after the cancels: %v", len(want), want)
		}
	}
}

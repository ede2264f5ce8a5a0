package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/pgstore"
)

// TestCancelOtherNodeAtOnce: two managers on one PostgreSQL namespace; a
// cancel asked through one of an attempt running on the other stops it
// within a second (store.CancelNotifier through LISTEN/NOTIFY), not at
// the runner's next lease renewal (an hour away here).
func TestCancelOtherNodeAtOnce(t *testing.T) {
	ctx := t.Context()
	ns := "cancel-at-once-" + time.Now().Format("150405.000000000")
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
	admin := newManager("admin") // never started: it only schedules and cancels
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ji, err := admin.ScheduleJob(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt did not start within 30s")
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
	case <-time.After(time.Second):
		t.Fatal("the attempt still runs 1s after the cancel (its renewal is an hour away)")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := admin.GetInstance(ctx, ji.ID)
		if err == nil && got.State == job.Canceled {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the instance is %v (%v) 10s after its attempt was canceled; want Canceled", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCancelNoticesCommittedOnly: a cancel notice reaches the subscribers
// of its own namespace only, and only when the cancel's transaction
// commits: a Cancel in a caller's transaction that rolls back sends
// nothing, nor does a cancel in another namespace of the schema.
func TestCancelNoticesCommittedOnly(t *testing.T) {
	ns := "cancel-notices-" + time.Now().Format("150405.000000000")
	s, other, elsewhere := open(t, ns), open(t, ns), open(t, ns+"-other")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.SubscribeCancels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	run := func(st store.Store, ids ...string) {
		t.Helper()
		var ins []*store.Instance
		for _, id := range ids {
			ins = append(ins, &store.Instance{ID: id, Kind: "k", Queue: "q", RunAt: now, CreatedAt: now})
		}
		if _, err := st.Enqueue(t.Context(), &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
			t.Fatal(err)
		}
		res, err := st.Claim(t.Context(), &store.ClaimParams{Queue: "q", Owner: "w1", Limit: len(ids), Now: now, LeaseUntil: now.Add(time.Hour), ClaimSeq: 1})
		if err != nil || len(res.Instances) != len(ids) {
			t.Fatalf("claim: %+v, %v; want %d instances", res, err, len(ids))
		}
	}
	run(other, "rolled-back", "committed")
	run(elsewhere, "committed")
	tx, err := testPool(t).Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Cancel(pgstore.WithTx(t.Context(), tx), &store.CancelParams{ID: "rolled-back", Now: now, Node: "n"}); err != nil {
		t.Fatalf("Cancel in a transaction: %v", err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := elsewhere.Cancel(t.Context(), &store.CancelParams{ID: "committed", Now: now, Node: "n"}); err != nil {
		t.Fatalf("Cancel in the other namespace: %v", err)
	}
	if _, err := other.Cancel(t.Context(), &store.CancelParams{ID: "committed", Now: now, Node: "n"}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	// PostgreSQL delivers a listener's notifications in commit order: the
	// first one is that of the last cancel, unless an earlier one leaked.
	select {
	case ref := <-ch:
		if ref != (store.LeaseRef{ID: "committed", Attempt: 1}) {
			t.Fatalf("first notice %+v; want committed attempt 1 (nothing for the rolled-back cancel nor the other namespace)", ref)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notice within 5s of a committed cancel")
	}
	in, err := s.LookupInstances(t.Context(), &store.Query{InstanceID: "rolled-back"})
	if err != nil || len(in) != 1 || in[0].CancelRequested {
		t.Fatalf("rolled-back: %+v, %v; want one instance without a cancel request", in, err)
	}
	select {
	case ref := <-ch:
		t.Fatalf("a second notice %+v; want none", ref)
	default:
	}
}

// TestCancelNoticesAfterReconnect: when the listening connection is
// killed, the store reconnects and cancel notices arrive again.
func TestCancelNoticesAfterReconnect(t *testing.T) {
	p := testPool(t)
	ns := "cancel-reconnect-" + randHex(4)
	s, other := open(t, ns), open(t, ns)
	ch, err := s.SubscribeCancels(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := p.Query(t.Context(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1", `LISTEN "jobkit_`+testSchema+`"`)
	if err != nil {
		t.Fatal(err)
	}
	killed, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil || len(killed) == 0 {
		t.Fatalf("killed %v listening connections (%v); want at least the store's", killed, err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	i := 0
	waitFor(t, "a cancel notice after the reconnect", func() bool {
		i++
		id := fmt.Sprintf("r-%d", i)
		in := &store.Instance{ID: id, Kind: "k", Queue: "q", RunAt: now, CreatedAt: now}
		if _, err := other.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now}); err != nil {
			t.Fatal(err)
		}
		res, err := other.Claim(t.Context(), &store.ClaimParams{Queue: "q", Owner: "w1", Limit: 1, Now: now, LeaseUntil: now.Add(time.Hour), ClaimSeq: uint64(i)})
		if err != nil || len(res.Instances) != 1 {
			t.Fatalf("claim: %+v, %v", res, err)
		}
		if _, err := other.Cancel(t.Context(), &store.CancelParams{ID: id, Now: now, Node: "n"}); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case ref := <-ch:
				if ref.ID == id {
					return true
				}
			case <-time.After(200 * time.Millisecond):
				return false
			}
		}
	})
	if i > 1 {
		t.Logf("a notice after %d cancels", i)
	}
}

package pgstore_test

// An open caller transaction that scheduled a job holds nothing but its
// own rows (issue 39): other schedules, claims and finishes of the
// namespace never wait on it, and a rollback leaves no trace in the
// feed or the counters.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/pgstore"
)

// outsideDeadline bounds each call made outside the held transaction:
// well under the hold, so a call that waits on the transaction fails.
const outsideDeadline = 2 * time.Second

// startWorkers starts a manager on s with 32 workers running kind "work"
// (counted in r); it stops when t ends.
func startWorkers(t *testing.T, s store.Store, r *runs) *job.Manager {
	t.Helper()
	m, err := job.NewManager(job.WithStore(s), job.WithWorkers(32), job.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("work"), job.WithExecutor(func(ctx context.Context, ji job.Instance, a, b int) (int, error) {
		r.add(ji.Info().ID)
		return a + b, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	return m
}

// scheduleOutside schedules n jobs of kind "work" from 8 goroutines, each
// call bounded by outsideDeadline, and returns their IDs; a call that
// fails fails t, naming how long it waited.
func scheduleOutside(t *testing.T, m *job.Manager, n int) []string {
	t.Helper()
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				ctx, cancel := context.WithTimeout(t.Context(), outsideDeadline)
				start := time.Now()
				ji, err := m.ScheduleJob(ctx, "work", job.WithArguments(i, 1))
				cancel()
				if err != nil {
					t.Errorf("ScheduleJob %d outside the open transaction: %v after %v; want it done without waiting on that transaction", i, err, time.Since(start).Round(time.Millisecond))
					return
				}
				ids[i] = ji.ID
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return ids
}

// feedEvent returns the next event of ch within 20 s.
func feedEvent(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok || e.Err != nil {
			t.Fatalf("feed ended: open %v, %v", ok, e.Err)
		}
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20 s")
	}
	return store.Event{}
}

// workCounts returns the Counts of kind "work" in queue "default" (zero when
// there is no group yet).
func workCounts(t *testing.T, s store.Store) store.GroupCount {
	t.Helper()
	gs, err := s.Counts(t.Context(), &store.CountsParams{Kind: "work"})
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	switch len(gs) {
	case 0:
		return store.GroupCount{}
	case 1:
		return gs[0]
	}
	t.Fatalf("Counts of kind work: %d groups %+v; want one", len(gs), gs)
	return store.GroupCount{}
}

// TestOpenTxBlocksNoWriter: while a caller's transaction that scheduled a
// job stays open (at least 5 s), 1,000 jobs are scheduled outside it,
// each call bounded by 2 s, and run by a manager to completion; then the
// transaction commits and its job runs, and the event feed delivers every
// job's transitions in order.
func TestOpenTxBlocksNoWriter(t *testing.T) {
	const n = 1000
	const hold = 5 * time.Second
	p := testPool(t)
	s := open(t, "opentx-"+randHex(4), pgstore.WithPollInterval(20*time.Millisecond))
	r := &runs{n: map[string]int{}}
	m := startWorkers(t, s, r)
	cursor, err := s.EventCursor(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	feed, err := s.Follow(t.Context(), &store.FollowParams{Cursor: cursor, Buffer: 8 * n})
	if err != nil {
		t.Fatal(err)
	}

	held, err := p.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Rollback(context.Background()) }()
	ji, err := m.ScheduleJob(pgstore.WithTx(t.Context(), held), "work", job.WithArguments(40, 2))
	if err != nil {
		t.Fatalf("ScheduleJob in the transaction: %v", err)
	}
	heldID := ji.ID
	opened := time.Now()

	ids := scheduleOutside(t, m, n)
	scheduled := time.Since(opened)
	waitFor(t, fmt.Sprintf("the %d jobs scheduled outside the open transaction to complete", n), func() bool {
		return workCounts(t, s).States[store.Completed] == n
	})
	done := time.Since(opened)
	for _, id := range ids {
		if got := r.get(id); got != 1 {
			t.Fatalf("job %s ran %d times, want 1", id, got)
		}
	}
	if got := r.get(heldID); got != 0 {
		t.Fatalf("the job of the open transaction ran %d times before the commit", got)
	}
	t.Logf("with a transaction open: %d jobs scheduled in %v, all completed %v after it opened", n, scheduled.Round(time.Millisecond), done.Round(time.Millisecond))
	if rest := hold - time.Since(opened); rest > 0 {
		time.Sleep(rest) // the transaction stays open its full hold: what a slow request does
	}
	if err := held.Commit(t.Context()); err != nil {
		t.Fatalf("commit of the held transaction: %v", err)
	}
	waitFor(t, "the job of the committed transaction to complete", func() bool { return stateOf(t, m, heldID) == job.Completed })
	if got := r.get(heldID); got != 1 {
		t.Fatalf("the job of the committed transaction ran %d times, want 1", got)
	}
	if c := workCounts(t, s); c.States[store.Completed] != n+1 || c.Total() != n+1 {
		t.Fatalf("Counts after the commit: %+v; want %d Completed and nothing else", c.States, n+1)
	}

	// The feed: every job's four records, in order per job, nothing twice.
	want := []store.State{store.Created, store.Scheduled, store.Processing, store.Completed}
	seen := map[string]int{}
	cursors := map[string]bool{}
	for completed := 0; completed < n+1; {
		ev := feedEvent(t, feed)
		i := seen[ev.InstanceID]
		if i >= len(want) || ev.State != want[i] {
			t.Fatalf("feed: event %d of %s is %v; want the states %v in order", i, ev.InstanceID, ev.State, want)
		}
		if cursors[ev.Cursor] {
			t.Fatalf("feed: cursor %s delivered twice", ev.Cursor)
		}
		cursors[ev.Cursor] = true
		seen[ev.InstanceID] = i + 1
		if ev.State == store.Completed {
			completed++
		}
	}
	if seen[heldID] != len(want) || len(seen) != n+1 {
		t.Fatalf("feed: %d instances, the held one with %d events; want %d instances, 4 events each", len(seen), seen[heldID], n+1)
	}
}

// TestRolledBackTxLeavesNoTrace: a job scheduled in a transaction that is
// rolled back while other jobs run never runs, and never appears in the
// event feed, the counters or the history.
func TestRolledBackTxLeavesNoTrace(t *testing.T) {
	const n = 50
	p := testPool(t)
	s := open(t, "rolltx-"+randHex(4), pgstore.WithPollInterval(20*time.Millisecond))
	r := &runs{n: map[string]int{}}
	m := startWorkers(t, s, r)
	feed, err := s.Follow(t.Context(), &store.FollowParams{Buffer: 8 * n})
	if err != nil {
		t.Fatal(err)
	}

	rolled, err := p.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rolled.Rollback(context.Background()) }()
	ji, err := m.ScheduleJob(pgstore.WithTx(t.Context(), rolled), "work", job.WithArguments(1, 2))
	if err != nil {
		t.Fatalf("ScheduleJob in the transaction: %v", err)
	}
	rolledID := ji.ID
	scheduleOutside(t, m, n)
	waitFor(t, "the jobs scheduled outside the transaction to complete", func() bool {
		return workCounts(t, s).States[store.Completed] == n
	})
	if err := rolled.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	// One job after the rollback: once the feed delivers its completion,
	// it has delivered everything that committed before.
	last, err := m.ScheduleJob(t.Context(), "work", job.WithArguments(5, 6))
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev := feedEvent(t, feed)
		if ev.InstanceID == rolledID {
			t.Fatalf("the feed delivered %v of the rolled-back job %s", ev.State, rolledID)
		}
		if ev.InstanceID == last.ID && ev.State == store.Completed {
			break
		}
	}
	if got := r.get(rolledID); got != 0 {
		t.Fatalf("the rolled-back job ran %d times", got)
	}
	if _, err := m.GetInstance(t.Context(), rolledID); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("LookupInstance of the rolled-back job: %v; want ErrNotFound", err)
	}
	hist, err := s.LookupHistory(t.Context(), &store.Query{InstanceID: rolledID})
	if err != nil || len(hist) != 0 {
		t.Fatalf("history of the rolled-back job: %d records, %v; want none", len(hist), err)
	}
	if c := workCounts(t, s); c.States[store.Completed] != n+1 || c.Total() != n+1 {
		t.Fatalf("Counts after the rollback: %+v; want %d Completed and nothing else", c.States, n+1)
	}
}

// TestOlderTxRecordsAfterNewer: a transaction whose id is older than the
// one that enqueued an instance (it began, and wrote, first) cancels that
// instance after the enqueue committed: the feed delivers the Canceled
// record after the Created and Scheduled ones, as the history has them,
// not in transaction-id order.
func TestOlderTxRecordsAfterNewer(t *testing.T) {
	p := testPool(t)
	s := open(t, "oldtx-"+randHex(4), pgstore.WithPollInterval(20*time.Millisecond))
	cursor, err := s.EventCursor(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	old, err := p.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Rollback(context.Background()) }()
	var oldID, newID uint64
	if err := old.QueryRow(t.Context(), "SELECT pg_current_xact_id()::text::int8").Scan(&oldID); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	in := &store.Instance{ID: "x", Kind: "k", Queue: "q", RunAt: now.Add(time.Hour), CreatedAt: now}
	if _, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := p.QueryRow(t.Context(), "SELECT pg_current_xact_id()::text::int8").Scan(&newID); err != nil {
		t.Fatal(err)
	}
	if newID <= oldID {
		t.Fatalf("transaction ids: the older %d, a later one %d", oldID, newID)
	}
	if _, err := s.Cancel(pgstore.WithTx(t.Context(), old), &store.CancelParams{ID: "x", Now: now.Add(time.Second), Node: "n2"}); err != nil {
		t.Fatalf("Cancel in the older transaction: %v", err)
	}
	if err := old.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	feed, err := s.Follow(t.Context(), &store.FollowParams{Cursor: cursor})
	if err != nil {
		t.Fatal(err)
	}
	var got []store.State
	for range 3 {
		got = append(got, feedEvent(t, feed).State)
	}
	if want := []store.State{store.Created, store.Scheduled, store.Canceled}; !slices.Equal(got, want) {
		t.Fatalf("feed of x: %v; want %v", got, want)
	}
}

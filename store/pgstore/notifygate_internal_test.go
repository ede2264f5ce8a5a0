package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// windowStore is a migrated Store of its own schema with opts.
func windowStore(t *testing.T, prefix string, opts ...Option) *Store {
	t.Helper()
	pool, schema := internalPool(t, prefix)
	if err := Migrate(t.Context(), pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(t.Context(), pool, append([]Option{WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// enqueueOne stores one ready job of queue q on its own.
func enqueueOne(t *testing.T, ctx context.Context, s *Store, id, q string) {
	t.Helper()
	now := time.Now()
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Now: now, Instances: []*store.Instance{{ID: id, Kind: "k", Queue: q, RunAt: now, CreatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
}

// A run of enqueues into one queue within the notify window costs
// PostgreSQL one notification at its start and one when the window ends,
// not one per enqueue (each of which PostgreSQL delivers to every
// listening connection, a transaction there each). Counted on a listening
// connection of the test's own; the last notification comes after the
// last enqueue has committed, so a claim it wakes finds every job.
func TestNotifyWindowCoalescesEnqueues(t *testing.T) {
	ctx := t.Context()
	const window = 2 * time.Second
	s := windowStore(t, "window", WithNotifyWindow(window))
	conn, err := pgx.Connect(ctx, testserver.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	const n = 20
	t0 := time.Now()
	for i := range n {
		enqueueOne(t, ctx, s, fmt.Sprintf("j%d", i), "q")
	}
	elapsed := time.Since(t0)
	// Every enqueue has committed: read the notifications until none
	// comes for a window and a half after the last one.
	var got []time.Time
	for {
		wctx, cancel := context.WithTimeout(ctx, window*3/2)
		nt, err := conn.WaitForNotification(wctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if nt.Payload != s.payload("q") {
			t.Fatalf("notification %q, want %q", nt.Payload, s.payload("q"))
		}
		got = append(got, time.Now())
		if len(got) > n {
			break
		}
	}
	// One at the start, one at the end of each window the run spanned.
	most := 2 + int(elapsed/window)
	if len(got) > most || len(got) < 2 {
		t.Fatalf("%d enqueues in %v sent %d notifications; want 2 to %d (window %v)", n, elapsed, len(got), most, window)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 2 * n, Now: time.Now(), LeaseUntil: time.Now().Add(time.Hour)})
	if err != nil || len(res.Instances) != n {
		t.Fatalf("claim after the last notification: %d instances, %v; want %d", len(res.Instances), err, n)
	}
}

// waitWake fails unless ch receives within 10 s.
func waitWake(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake-up within 10 s after %s", what)
	}
}

// The window holds back only enqueues that follow a notification of their
// queue: a lone job after a quiet spell wakes the subscribers at once, an
// enqueue in a caller's transaction notifies at its commit even inside
// the window, another queue has a window of its own, and a held one is
// sent when the window ends.
func TestNotifyWindowKeepsLoneJobsFast(t *testing.T) {
	ctx := t.Context()
	const window = 700 * time.Millisecond
	s := windowStore(t, "windowfast", WithNotifyWindow(window))
	wq, err := s.Subscribe(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	wr, err := s.Subscribe(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}

	enqueueOne(t, ctx, s, "a", "q")
	waitWake(t, wq, "a lone enqueue")

	// Another queue is not held by q's window.
	enqueueOne(t, ctx, s, "b", "r")
	waitWake(t, wr, "the first enqueue into another queue")

	// In the caller's transaction: notified at its commit.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := s.Enqueue(WithTx(ctx, tx), &store.EnqueueParams{Now: now, Instances: []*store.Instance{{ID: "c", Kind: "k", Queue: "q", RunAt: now, CreatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitWake(t, wq, "an enqueue in a committed transaction")

	// Held, then sent when the window ends, with the job stored.
	t0 := time.Now()
	enqueueOne(t, ctx, s, "d", "q")
	waitWake(t, wq, "a held enqueue's window")
	if d := time.Since(t0); d > window+5*time.Second {
		t.Fatalf("the held wake-up came %v after the enqueue; the window is %v", d, window)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 10, Now: time.Now(), LeaseUntil: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range res.Instances {
		ids = append(ids, in.ID)
	}
	if !slices.Contains(ids, "d") {
		t.Fatalf("claim at the held wake-up took %v; want d among them", ids)
	}
}

// An owed notification does not hold Close up.
func TestNotifyWindowClose(t *testing.T) {
	ctx := t.Context()
	s := windowStore(t, "windowclose", WithNotifyWindow(time.Hour))
	enqueueOne(t, ctx, s, "a", "q")
	enqueueOne(t, ctx, s, "b", "q") // held for an hour
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the owed notification")
	}
	if _, err := New(ctx, s.pool, WithNotifyWindow(-time.Second)); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("WithNotifyWindow(-1s): %v; want ErrInvalid", err)
	}
}

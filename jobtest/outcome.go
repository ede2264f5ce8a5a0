package jobtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// Stalled is what OutcomeUnknown needs: a store whose server the test can
// stall, and optionally one that refuses connections.
type Stalled struct {
	// Store is a handle on a server of the test's own (a private
	// redis-server, etcd, PostgreSQL, jobd). Required.
	Store store.Store
	// Stall makes the server stop answering from the store's next write
	// on (SIGSTOP), so that the write is sent and gets no answer, and
	// returns the func that resumes it (SIGCONT). Required.
	Stall func(t testing.TB) (resume func())
	// Refused, when set, is a handle that certainly cannot send a write:
	// its server refuses connections (nothing listens on its port), or
	// its client is closed. A schedule there stored nothing, and its
	// error must not wrap job.ErrOutcomeUnknown.
	Refused store.Store
	// Deadline is the schedule calls' deadline while the server is
	// stalled. Defaults to 500 ms.
	Deadline time.Duration
}

// OutcomeUnknown checks that a schedule cut short by a stalled store says
// so (issue 39): ScheduleJob and ScheduleJobs with a short deadline on a
// stalled server return errors wrapping job.ErrOutcomeUnknown and
// context.DeadlineExceeded whose messages name WithIdempotencyKey, and once
// the server resumes, repeating the calls with the same idempotency keys
// leaves exactly one instance per key. With Refused set, a schedule that
// cannot be sent fails without ErrOutcomeUnknown.
func OutcomeUnknown(t *testing.T, s Stalled) {
	t.Helper()
	if s.Store == nil || s.Stall == nil {
		t.Fatal("jobtest: OutcomeUnknown needs Stalled.Store and Stalled.Stall")
	}
	deadline := s.Deadline
	if deadline <= 0 {
		deadline = 500 * time.Millisecond
	}
	kind := "outcome-" + namespace(t)
	newJob := func() *job.Job {
		j, err := job.NewJob(job.WithKind(kind), job.WithExecutor(func(context.Context) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	m, err := job.NewManager(job.WithStore(s.Store), job.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	if err := m.RegisterJob(newJob()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// A first schedule opens the connections and loads what the store
	// loads on first use, so that the stalled calls below send their
	// writes at once.
	if _, err := m.ScheduleJob(ctx, kind, job.WithIdempotencyKey("warm"), job.WithScheduleAfter(time.Hour)); err != nil {
		t.Fatalf("ScheduleJob before the stall: %v", err)
	}

	checkUnknown := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, job.ErrOutcomeUnknown) {
			t.Errorf("%s while the store was stalled: %v; want an error wrapping job.ErrOutcomeUnknown", what, err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s while the store was stalled: %v; want it to wrap context.DeadlineExceeded as well", what, err)
		}
		if err != nil && !strings.Contains(err.Error(), "WithIdempotencyKey") {
			t.Errorf("%s while the store was stalled: %q; want the message to name WithIdempotencyKey as the safe retry", what, err)
		}
	}

	resume := s.Stall(t)
	sctx, cancel := context.WithTimeout(ctx, deadline)
	inst, err := m.ScheduleJob(sctx, kind, job.WithIdempotencyKey("one"), job.WithScheduleAfter(time.Hour))
	cancel()
	if inst != nil {
		t.Errorf("ScheduleJob while the store was stalled returned instance %s", inst.ID)
	}
	checkUnknown("ScheduleJob", err)
	t.Logf("ScheduleJob while stalled: %v", err)
	resume()

	resume = s.Stall(t)
	items := make([]job.BatchItem, 3)
	for i := range items {
		items[i] = job.BatchItem{Kind: kind, Options: []job.ScheduleOption{job.WithIdempotencyKey(fmt.Sprintf("batch-%d", i)), job.WithScheduleAfter(time.Hour)}}
	}
	sctx, cancel = context.WithTimeout(ctx, deadline)
	res, err := m.ScheduleJobs(sctx, items...)
	cancel()
	checkUnknown("ScheduleJobs", err)
	for i, r := range res {
		checkUnknown(fmt.Sprintf("ScheduleJobs item %d", i), r.Err)
	}
	resume()
	if t.Failed() {
		t.FailNow()
	}

	// The safe retry: the same keys again, now that the store answers.
	want := map[string]bool{}
	first, err := m.ScheduleJob(ctx, kind, job.WithIdempotencyKey("one"), job.WithScheduleAfter(time.Hour))
	if err != nil {
		t.Fatalf("ScheduleJob repeated with the same idempotency key after the store resumed: %v", err)
	}
	want[first.ID] = true
	again, err := m.ScheduleJob(ctx, kind, job.WithIdempotencyKey("one"), job.WithScheduleAfter(time.Hour))
	if err != nil || again.ID != first.ID {
		t.Fatalf("ScheduleJob repeated once more: %v, %v; want instance %s again", again, err, first.ID)
	}
	res, err = m.ScheduleJobs(ctx, items...)
	if err != nil {
		t.Fatalf("ScheduleJobs repeated with the same idempotency keys after the store resumed: %v", err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("ScheduleJobs repeated: item %d: %v", i, r.Err)
		}
		want[r.Instance.ID] = true
	}
	warm, err := m.ScheduleJob(ctx, kind, job.WithIdempotencyKey("warm"))
	if err != nil {
		t.Fatal(err)
	}
	want[warm.ID] = true
	got, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryKind(kind)))
	if err != nil {
		t.Fatalf("LookupInstances: %v", err)
	}
	seen := map[string]int{}
	for _, in := range got {
		seen[in.ID]++
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("instance %s is stored %d times, want once", id, seen[id])
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d instances of kind %s are stored, want %d (one per idempotency key: warm, one, batch-0..2)", len(got), kind, len(want))
	}

	if s.Refused != nil {
		rm, err := job.NewManager(job.WithStore(s.Refused), job.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatalf("NewManager on the refusing store: %v", err)
		}
		if err := rm.RegisterJob(newJob()); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		_, err = rm.ScheduleJob(rctx, kind, job.WithIdempotencyKey("refused"))
		if err == nil || errors.Is(err, job.ErrOutcomeUnknown) {
			t.Errorf("ScheduleJob on the Refused store: %v; want an error that does not wrap job.ErrOutcomeUnknown (nothing was sent)", err)
		}
		t.Logf("ScheduleJob on the Refused store: %v", err)
	}
}

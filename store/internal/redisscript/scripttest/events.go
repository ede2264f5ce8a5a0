package scripttest

import (
	"context"
	"testing"
	"time"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// ExpireEvents is the storetest.Harness.ExpireEvents of the Redis and
// Valkey stores: it prunes every history entry (HistoryBefore far in the
// future), which makes every event cursor taken before expire.
func ExpireEvents(t testing.TB, s store.Store) {
	t.Helper()
	far := time.Date(2200, time.January, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.Prune(t.Context(), &store.PruneParams{Now: far, HistoryBefore: far, Limit: 1 << 20}); err != nil {
		t.Fatalf("prune the history stream: %v", err)
	}
}

// testEventsRestart: a feed outlives a restart of its server: it keeps
// its position while the server is down (a dead server is not a closed
// client) and, once the server is back, delivers what was written after,
// with nothing lost or repeated.
func testEventsRestart(t *testing.T, h Harness) {
	p := testserver.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	s := h.Open(t, p.Addr, ns(t))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.Follow(ctx, &store.FollowParams{})
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, s, inst("er-1", "q"))
	for _, st := range []store.State{store.Created, store.Scheduled} {
		if ev := nextEvent(t, ch); ev.InstanceID != "er-1" || ev.State != st {
			t.Fatalf("before the restart: %+v, want er-1 %v", ev, st)
		}
	}
	p.Kill()
	// Down for longer than the feed's retries of a failing call take.
	time.Sleep(time.Second)
	p = testserver.RestartRedis(t, p)
	defer p.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{inst("er-2", "q")}, Now: base})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Enqueue after the restart still fails after 10s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, st := range []store.State{store.Created, store.Scheduled} {
		if ev := nextEvent(t, ch); ev.InstanceID != "er-2" || ev.State != st {
			t.Fatalf("after the restart: %+v, want er-2 %v", ev, st)
		}
	}
}

// nextEvent returns ch's next event, failing on an error event, a closed
// feed or after 15 s.
func nextEvent(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok || ev.Err != nil {
			t.Fatalf("feed ended: open %v, %v", ok, ev.Err)
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no event within 15s")
	}
	panic("unreachable")
}

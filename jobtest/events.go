package jobtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

func init() {
	register("Events", testEvents)
}

// nextEvent returns the next event of ch, failing on a closed feed, an
// error event or the deadline.
func nextEvent(t *testing.T, ch <-chan job.Event, what string) job.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the feed closed", what)
		}
		if ev.Err != nil {
			t.Fatalf("%s: the feed ended with %v", what, ev.Err)
		}
		return ev
	case <-time.After(deadline):
		t.Fatalf("%s: no event within %v", what, deadline)
	}
	panic("unreachable")
}

// testEvents: Manager.WatchEvents delivers the transitions the engine makes
// (a run that fails, is retried and completes; a pending instance
// canceled from another manager) as they happen, filtered by kind or
// instance, and resumes from an event's cursor with exactly what followed
// it.
func testEvents(t *testing.T, e *env) {
	var calls atomic.Int32
	flaky := mustJob(t, job.WithKind("ev-flaky"), job.WithMaxRetries(3), job.WithBackoff(job.ConstantBackoff(10*time.Millisecond)),
		job.WithExecutor(func() error {
			if calls.Add(1) == 1 {
				return errors.New("first try fails")
			}
			return nil
		}))
	later := mustJob(t, job.WithKind("ev-later"), job.WithExecutor(func() {}))
	m := e.manager(t, []*job.Job{flaky, later})
	other := e.manager(t, nil) // a producer/observer with no executors, never started
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cursor, err := other.GetEventCursor(ctx)
	if err != nil {
		t.Fatalf("EventCursor: %v", err)
	}
	byKind, err := other.WatchEvents(ctx, job.WithEventCursor(cursor), job.WithEventKinds("ev-flaky"))
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	all, err := m.WatchEvents(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	start(t, m)
	pending := schedule(t, m, "ev-later", job.WithScheduleAfter(time.Hour))
	ji := schedule(t, m, "ev-flaky")

	type step struct {
		state   job.State
		attempt int
		err     bool
		node    string
	}
	want := []step{
		{job.Created, 0, false, m.NodeID()}, {job.Scheduled, 0, false, m.NodeID()},
		{job.Processing, 1, false, m.NodeID()}, {job.Scheduled, 1, true, m.NodeID()},
		{job.Processing, 2, false, m.NodeID()}, {job.Completed, 2, false, m.NodeID()},
	}
	var got []job.Event
	for i, w := range want {
		ev := nextEvent(t, byKind, fmt.Sprintf("ev-flaky event %d (%v)", i, w.state))
		if ev.InstanceID != ji.ID || ev.Kind != "ev-flaky" || ev.Queue == "" || ev.State != w.state || ev.Attempt != w.attempt ||
			(ev.Error != "") != w.err || ev.Node != w.node || ev.Time.IsZero() || ev.Cursor == "" {
			t.Fatalf("event %d: %+v; want instance %s kind ev-flaky state %v attempt %d error %v node %s",
				i, ev, ji.ID, w.state, w.attempt, w.err, w.node)
		}
		got = append(got, ev)
	}

	// Canceled from the other manager: the follower of everything sees it
	// (after the schedules and runs above, in order per instance).
	if _, err := other.CancelInstance(ctx, pending.ID); err != nil {
		t.Fatalf("CancelInstance: %v", err)
	}
	var states []job.State
	for !slices.Contains(states, job.Canceled) {
		ev := nextEvent(t, all, "events of ev-later")
		if ev.InstanceID == pending.ID {
			states = append(states, ev.State)
		}
	}
	if w := []job.State{job.Created, job.Scheduled, job.Canceled}; !slices.Equal(states, w) {
		t.Fatalf("ev-later events %v, want %v", states, w)
	}

	// Resume after the first Processing: exactly the rest, by instance.
	resumed, err := other.WatchEvents(ctx, job.WithEventCursor(got[2].Cursor), job.WithEventInstanceID(ji.ID))
	if err != nil {
		t.Fatalf("Events from a cursor: %v", err)
	}
	for i := 3; i < len(got); i++ {
		ev := nextEvent(t, resumed, fmt.Sprintf("resumed event %d", i))
		if ev.Cursor != got[i].Cursor || ev.State != got[i].State || ev.Attempt != got[i].Attempt {
			t.Fatalf("resumed event %d: %+v, want %+v", i, ev, got[i])
		}
	}

	if _, err := other.WatchEvents(ctx, job.WithEventBuffer(-1)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Events(WithEventBuffer(-1)): %v, want ErrInvalid", err)
	}
	if _, err := other.WatchEvents(ctx, job.WithEventCursor("forged")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Events(WithEventCursor(forged)): %v, want ErrInvalid", err)
	}

	// Ending ctx closes the feeds.
	cancel()
	for _, ch := range []<-chan job.Event{byKind, all, resumed} {
		timeout := time.After(deadline)
	drain:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break drain
				}
			case <-timeout:
				t.Fatal("a feed was not closed after its ctx ended")
			}
		}
	}
}

package etcdstore_test

import (
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// A write that records no transition (Wake moving RunAt) appends no
// history record, so the event feed, which delivers what each put of a
// dynamic record appended, delivers nothing for it: the next event after
// a Wake is the Cancel's, not the enqueue's records again.
func TestWakeDeliversNoEvent(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	cleanup(t, ns)
	s := open(t, ns)
	ctx := t.Context()
	later := testInst("later")
	later.RunAt = t0.Add(time.Hour)
	mustEnqueue(t, s, later)
	cur, err := s.EventCursor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Follow(ctx, &store.FollowParams{Cursor: cur})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wake(ctx, &store.WakeParams{IDs: []string{"later"}, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, &store.CancelParams{ID: "later", Now: t0, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if ev.Err != nil || ev.InstanceID != "later" || ev.State != store.Canceled {
			t.Fatalf("first event after Wake and Cancel: %+v, want the Cancel's (state canceled)", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s after a Cancel")
	}
}

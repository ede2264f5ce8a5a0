package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// eventWait bounds how long the events tests wait for one event.
const eventWait = 10 * time.Second

// follow starts a feed on s, failing t when Follow does; the feed ends
// with t.
func (e *env) follow(s store.Store, p store.FollowParams) (<-chan store.Event, context.CancelFunc) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	ch, err := s.Follow(ctx, &p)
	if err != nil {
		cancel()
		e.t.Fatalf("Follow(%+v): %v", p, err)
	}
	e.t.Cleanup(cancel)
	return ch, cancel
}

// cursor returns s's EventCursor.
func (e *env) cursor(s store.Store) string {
	e.t.Helper()
	c, err := s.EventCursor(e.ctx)
	if err != nil {
		e.t.Fatalf("EventCursor: %v", err)
	}
	if c == "" {
		e.t.Fatal("EventCursor returned an empty cursor")
	}
	return c
}

// next returns the next event of ch, failing on a closed feed, an error
// event or a deadline.
func next(t testing.TB, ch <-chan store.Event, what string) store.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the feed closed before the event", what)
		}
		if ev.Err != nil {
			t.Fatalf("%s: the feed ended with %v", what, ev.Err)
		}
		if ev.Cursor == "" {
			t.Fatalf("%s: event %s %v has no cursor", what, ev.InstanceID, ev.State)
		}
		return ev
	case <-time.After(eventWait):
		t.Fatalf("%s: no event within %v", what, eventWait)
	}
	panic("unreachable")
}

// take returns the next n events of ch.
func take(t testing.TB, ch <-chan store.Event, n int, what string) []store.Event {
	t.Helper()
	out := make([]store.Event, n)
	for i := range out {
		out[i] = next(t, ch, fmt.Sprintf("%s (event %d of %d)", what, i+1, n))
	}
	return out
}

// quiet fails when ch yields an event within a short while: for checks
// that a filter or a cursor left everything else out. The events it
// checks for were written before, so a store that delivered them would
// have by then.
func quiet(t testing.TB, ch <-chan store.Event, what string) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("%s: unexpected event %s", what, fmtEvent(ev))
		}
		t.Fatalf("%s: the feed closed", what)
	case <-time.After(200 * time.Millisecond):
	}
}

func fmtEvent(ev store.Event) string {
	if ev.Err != nil {
		return "error " + ev.Err.Error()
	}
	return fmt.Sprintf("{%s %s/%s %v attempt %d at %v by %q err %q}", ev.InstanceID, ev.Kind, ev.Queue, ev.State, ev.Attempt, ev.Time.Format(time.RFC3339Nano), ev.Node, ev.Error)
}

func fmtEvents(evs []store.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString("\n\t" + fmtEvent(ev))
	}
	return b.String()
}

// checkEvent compares what matters of an event with want.
func checkEvent(t testing.TB, what string, want, got store.Event) {
	t.Helper()
	if got.InstanceID != want.InstanceID || got.State != want.State || got.Attempt != want.Attempt ||
		!got.Time.Equal(want.Time) || got.Node != want.Node || got.Kind != want.Kind || got.Queue != want.Queue ||
		(want.Error == "*" && got.Error == "") || (want.Error != "*" && got.Error != want.Error) {
		t.Fatalf("%s: got %s, want %s", what, fmtEvent(got), fmtEvent(want))
	}
}

// testEventsTransitions: following from a cursor taken before anything
// happened delivers every transition of every path (enqueue, claim,
// finish, a retry by rescue, cancel), in order per instance, with what
// its history record says, and only what happened after the cursor.
func testEventsTransitions(t *testing.T, h Harness) {
	e := setup(t, h)
	before := inst("ev-before", "q-ev")
	e.enqueue(e.s, base, before)
	c := e.cursor(e.s)
	ch, _ := e.follow(e.open(), store.FollowParams{Cursor: c})

	other := e.open()
	a, b := inst("ev-a", "q-ev"), inst("ev-b", "q-ev")
	b.Kind = "kind-b"
	e.enqueue(other, at(time.Second), a, b)
	// Claim before-, a and b in queue order.
	e.claimOne(other, "q-ev", "w1", at(2*time.Second), "ev-before")
	e.claimOne(other, "q-ev", "w1", at(2*time.Second), "ev-a")
	e.claimOne(other, "q-ev", "w2", at(3*time.Second), "ev-b")
	e.finishOK(other, "w1", at(4*time.Second), store.Outcome{ID: "ev-a", Attempt: 1, State: store.Completed, Result: []byte(`[1]`)})
	e.finishOK(other, "w1", at(4*time.Second), store.Outcome{ID: "ev-before", Attempt: 1, State: store.Terminated, Error: "boom"})
	// b's lease lapses: a rescue puts it back (a retry), then it is canceled.
	if got := e.rescue(other, at(3*time.Second+lease+time.Second), 10); len(got) != 1 || got[0].ID != "ev-b" {
		t.Fatalf("Rescue returned %v, want ev-b", ids(got))
	}
	if _, err := other.Cancel(e.ctx, &store.CancelParams{ID: "ev-b", Now: at(time.Hour), Node: "n-cancel"}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}

	rescuedAt := at(3*time.Second + lease + time.Second)
	want := map[string][]store.Event{
		"ev-before": {
			{State: store.Processing, Attempt: 1, Time: at(2 * time.Second), Node: "w1"},
			{State: store.Terminated, Attempt: 1, Time: at(4 * time.Second), Node: "w1", Error: "boom"},
		},
		"ev-a": {
			{State: store.Created, Time: at(time.Second), Node: "node-enq"},
			{State: store.Scheduled, Time: at(time.Second), Node: "node-enq"},
			{State: store.Processing, Attempt: 1, Time: at(2 * time.Second), Node: "w1"},
			{State: store.Completed, Attempt: 1, Time: at(4 * time.Second), Node: "w1"},
		},
		"ev-b": {
			{State: store.Created, Time: at(time.Second), Node: "node-enq"},
			{State: store.Scheduled, Time: at(time.Second), Node: "node-enq"},
			{State: store.Processing, Attempt: 1, Time: at(3 * time.Second), Node: "w2"},
			{State: store.Scheduled, Attempt: 1, Time: rescuedAt, Node: "node-rescue", Error: "*"},
			{State: store.Canceled, Attempt: 1, Time: at(time.Hour), Node: "n-cancel"},
		},
	}
	total := 0
	for id, evs := range want {
		for i := range evs {
			evs[i].InstanceID, evs[i].Kind, evs[i].Queue = id, "kind-a", "q-ev"
			if id == "ev-b" {
				evs[i].Kind = "kind-b"
			}
		}
		total += len(evs)
	}
	got := take(t, ch, total, "events of enqueue, claim, finish, rescue and cancel")
	seen := map[string]int{}
	cursors := map[string]bool{c: true}
	for _, ev := range got {
		w := want[ev.InstanceID]
		i := seen[ev.InstanceID]
		if i >= len(w) {
			t.Fatalf("event %s not expected (cursor %q); got:%s", fmtEvent(ev), c, fmtEvents(got))
		}
		checkEvent(t, fmt.Sprintf("event %d of %s", i, ev.InstanceID), w[i], ev)
		seen[ev.InstanceID] = i + 1
		if cursors[ev.Cursor] {
			t.Fatalf("cursor %q repeats; got:%s", ev.Cursor, fmtEvents(got))
		}
		cursors[ev.Cursor] = true
	}
	quiet(t, ch, "after every transition was delivered")

	// A cancel request on a running instance changes no state: no event.
	e.enqueue(other, at(2*time.Hour), inst("ev-c", "q-ev"))
	e.claimOne(other, "q-ev", "w1", at(2*time.Hour), "ev-c")
	take(t, ch, 3, "enqueue and claim of ev-c")
	if _, err := other.Cancel(e.ctx, &store.CancelParams{ID: "ev-c", Now: at(2 * time.Hour), Node: "n-cancel"}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	quiet(t, ch, "after a cancel request on a running instance")
}

// testEventsReadyAt: a Processing event carries when its attempt became
// ready (the RunAt the claim found: the enqueue's, then a retry's), so a
// follower can chart wait times of every node; other events carry none.
// Each step's events are taken before the next step, as a live feed reads
// them (Redis, Valkey and PostgreSQL read the ready time as they deliver).
func testEventsReadyAt(t *testing.T, h Harness) {
	e := setup(t, h)
	ch, _ := e.follow(e.s, store.FollowParams{Cursor: e.cursor(e.s)})
	in := inst("ra-1", "q-ra")
	in.RunAt = at(time.Second)
	e.enqueue(e.s, base, in)
	e.claimOne(e.s, "q-ra", "w1", at(5*time.Second), "ra-1")
	evs := take(t, ch, 3, "enqueue and first claim")
	for _, ev := range evs[:2] {
		if !ev.ReadyAt.IsZero() {
			t.Fatalf("the %v event of an enqueue has ReadyAt %v, want none", ev.State, ev.ReadyAt)
		}
	}
	if ev := evs[2]; ev.State != store.Processing || !ev.ReadyAt.Equal(at(time.Second)) {
		t.Fatalf("first claim: got %s with ReadyAt %v, want Processing ready at %v (the RunAt)", fmtEvent(ev), ev.ReadyAt, at(time.Second))
	}

	// A retry ready at 10 s, claimed at 12 s.
	e.finishOK(e.s, "w1", at(6*time.Second), store.Outcome{ID: "ra-1", Attempt: 1, State: store.Scheduled, RunAt: at(10 * time.Second), Error: "again"})
	e.claimOne(e.s, "q-ra", "w2", at(12*time.Second), "ra-1")
	evs = take(t, ch, 2, "retry and second claim")
	if ev := evs[0]; ev.State != store.Scheduled || !ev.ReadyAt.IsZero() {
		t.Fatalf("retry: got %s with ReadyAt %v, want Scheduled with none", fmtEvent(ev), ev.ReadyAt)
	}
	if ev := evs[1]; ev.State != store.Processing || ev.Attempt != 2 || !ev.ReadyAt.Equal(at(10*time.Second)) {
		t.Fatalf("second claim: got %s with ReadyAt %v, want attempt 2 ready at %v (the retry's RunAt)", fmtEvent(ev), ev.ReadyAt, at(10*time.Second))
	}
	e.finishOK(e.s, "w2", at(13*time.Second), store.Outcome{ID: "ra-1", Attempt: 2, State: store.Completed, Result: []byte(`[1]`)})
	if ev := next(t, ch, "completion"); ev.State != store.Completed || !ev.ReadyAt.IsZero() {
		t.Fatalf("completion: got %s with ReadyAt %v, want Completed with none", fmtEvent(ev), ev.ReadyAt)
	}

	// A feed that reads the second claim after the instance completed
	// still has its ready time on every store.
	ch2, _ := e.follow(e.open(), store.FollowParams{InstanceID: "ra-1", Cursor: evs[0].Cursor})
	if ev := next(t, ch2, "second claim read again"); ev.State != store.Processing || !ev.ReadyAt.Equal(at(10*time.Second)) {
		t.Fatalf("second claim read after the completion: got %s with ReadyAt %v, want ready at %v", fmtEvent(ev), ev.ReadyAt, at(10*time.Second))
	}
}

// testEventsFilters: kind and instance filters keep only what they name;
// a follow from now (no cursor) sees only later events.
func testEventsFilters(t *testing.T, h Harness) {
	e := setup(t, h)
	e.enqueue(e.s, base, inst("f-old", "q-f"))
	byKind, _ := e.follow(e.s, store.FollowParams{Kinds: []string{"kind-x", "kind-y"}})
	byID, _ := e.follow(e.open(), store.FollowParams{InstanceID: "f-2"})
	all, _ := e.follow(e.s, store.FollowParams{})

	var ins []*store.Instance
	for i, k := range []string{"kind-a", "kind-x", "kind-a", "kind-y"} {
		in := inst(fmt.Sprintf("f-%d", i), "q-f")
		in.Kind = k
		ins = append(ins, in)
	}
	e.enqueue(e.s, at(time.Second), ins...)
	// f-old was enqueued first, so the claims take it first.
	for _, id := range []string{"f-old", "f-0", "f-1", "f-2", "f-3"} {
		e.claimOne(e.s, "q-f", "w", at(2*time.Second), id)
	}

	got := take(t, all, 13, "follow from now")
	if got[0].InstanceID == "f-old" && got[0].State != store.Processing {
		t.Fatalf("follow from now delivered an event from before it started: %s", fmtEvent(got[0]))
	}
	quiet(t, all, "follow from now after its 13 events")

	got = take(t, byKind, 6, "kinds kind-x, kind-y")
	for _, ev := range got {
		if ev.Kind != "kind-x" && ev.Kind != "kind-y" {
			t.Fatalf("kind filter delivered %s; got:%s", fmtEvent(ev), fmtEvents(got))
		}
	}
	quiet(t, byKind, "kind filter after its 6 events")

	got = take(t, byID, 3, "instance f-2")
	for i, st := range []store.State{store.Created, store.Scheduled, store.Processing} {
		if got[i].InstanceID != "f-2" || got[i].State != st || got[i].Kind != "kind-a" {
			t.Fatalf("instance filter: event %d is %s, want f-2 %v", i, fmtEvent(got[i]), st)
		}
	}
	quiet(t, byID, "instance filter after its 3 events")
}

// testEventsResume: following again from the cursor of any event
// delivers exactly the events after it, even with writes in between, and
// a cursor from EventCursor after a batch of writes starts after them.
func testEventsResume(t *testing.T, h Harness) {
	e := setup(t, h)
	start := e.cursor(e.s)
	ch, stop := e.follow(e.s, store.FollowParams{Cursor: start})
	var ins []*store.Instance
	for i := range 3 {
		ins = append(ins, inst(fmt.Sprintf("r-%d", i), "q-r"))
	}
	e.enqueue(e.s, base, ins...)                 // 6 events in one write
	e.claim(e.s, "q-r", "w", 2, at(time.Second)) // 2 more in one write
	first := take(t, ch, 8, "first part")
	stop()

	// More writes while nobody follows.
	e.finishOK(e.s, "w", at(2*time.Second),
		store.Outcome{ID: "r-0", Attempt: 1, State: store.Completed},
		store.Outcome{ID: "r-1", Attempt: 1, State: store.Scheduled, RunAt: at(3 * time.Second), Error: "again"})
	e.claimOne(e.open(), "q-r", "w2", at(4*time.Second), "r-2")
	const later = 3

	// The whole story from the start, for reference.
	ref, _ := e.follow(e.s, store.FollowParams{Cursor: start})
	whole := take(t, ref, len(first)+later, "from the start")
	quiet(t, ref, "from the start after every event")
	for i := range first {
		checkEvent(t, fmt.Sprintf("event %d again from the start", i), first[i], whole[i])
	}

	// From each event's cursor, in the middle of a write's events too:
	// exactly the rest.
	for i, ev := range whole {
		resumed, stop := e.follow(e.open(), store.FollowParams{Cursor: ev.Cursor})
		rest := take(t, resumed, len(whole)-i-1, fmt.Sprintf("resumed after event %d %s", i, fmtEvent(ev)))
		for j := range rest {
			want := whole[i+1+j]
			checkEvent(t, fmt.Sprintf("resumed after event %d: event %d", i, j), want, rest[j])
			if rest[j].Cursor != want.Cursor {
				t.Fatalf("resumed after event %d: event %d has cursor %q, want %q as first delivered", i, j, rest[j].Cursor, want.Cursor)
			}
		}
		if i == len(whole)-1 || i == 0 || i == 5 {
			quiet(t, resumed, fmt.Sprintf("resumed after event %d, after the rest", i))
		}
		stop()
	}

	// EventCursor now: nothing before it comes again.
	now := e.cursor(e.s)
	if now != whole[len(whole)-1].Cursor {
		// Stores may spell "after the last event" differently from the last
		// event's cursor; both must follow from the same place.
		resumed, stop := e.follow(e.s, store.FollowParams{Cursor: now})
		quiet(t, resumed, "from EventCursor after the last write")
		stop()
	}
	fromNow, _ := e.follow(e.s, store.FollowParams{Cursor: now})
	e.enqueue(e.s, at(time.Minute), inst("r-new", "q-r"))
	got := take(t, fromNow, 2, "from EventCursor")
	if got[0].InstanceID != "r-new" || got[0].State != store.Created || got[1].State != store.Scheduled {
		t.Fatalf("from EventCursor:%s, want r-new created, scheduled", fmtEvents(got))
	}
}

// testEventsEnd: a feed closes when its ctx ends, with no error event; a
// slow consumer does not block writers.
func testEventsEnd(t *testing.T, h Harness) {
	e := setup(t, h)
	ch, stop := e.follow(e.s, store.FollowParams{Buffer: 1})
	// Nobody reads while 200 instances (400 events) are written: the
	// writes do not wait for the consumer.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20 {
			var ins []*store.Instance
			for j := range 10 {
				ins = append(ins, inst(fmt.Sprintf("end-%d-%d", i, j), "q-end"))
			}
			if _, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: ins, Node: "n", Now: base}); err != nil {
				t.Errorf("Enqueue: %v", err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("writes did not finish within 30s while a follower read nothing: the feed blocks writers")
	}
	// The consumer still gets every event, in order, once it reads.
	got := take(t, ch, 400, "slow consumer")
	if got[0].InstanceID != "end-0-0" || got[399].InstanceID != "end-19-9" || got[399].State != store.Scheduled {
		t.Fatalf("slow consumer: first %s, last %s; want end-0-0 created ... end-19-9 scheduled", fmtEvent(got[0]), fmtEvent(got[399]))
	}
	stop()
	deadline := time.After(eventWait)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if ev.Err != nil {
				t.Fatalf("feed ended by its ctx sent an error event: %v", ev.Err)
			}
		case <-deadline:
			t.Fatalf("feed not closed within %v of its ctx ending", eventWait)
		}
	}
}

// testEventsBadCursor: a cursor that is not this store's is ErrInvalid;
// one the store no longer reaches back to is ErrCursorExpired, from
// Follow or as the feed's last event.
func testEventsBadCursor(t *testing.T, h Harness) {
	e := setup(t, h)
	e.enqueue(e.s, base, inst("bc-1", "q-bc"))
	good := e.cursor(e.s)
	for _, c := range []string{"garbage", "m:zz", "r:1-0:x", "e:abc", "e:-1", "r:notanid", good + "x", "x" + good, strings.Repeat("9", 40)} {
		_, err := e.s.Follow(e.ctx, &store.FollowParams{Cursor: c})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Follow(cursor %q): %v, want an error wrapping ErrInvalid", c, err)
		}
	}
	if _, err := e.s.Follow(e.ctx, &store.FollowParams{Buffer: -1}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Follow(Buffer -1): %v, want ErrInvalid", err)
	}
	if _, err := e.s.Follow(e.ctx, &store.FollowParams{Kinds: []string{""}}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Follow(Kinds [\"\"]): %v, want ErrInvalid", err)
	}
	if _, err := e.s.Follow(e.ctx, nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Follow(nil): %v, want ErrInvalid", err)
	}

	if h.ExpireEvents == nil {
		t.Fatal("storetest: Harness.ExpireEvents is nil; set it to a func that makes the store drop what it retains of its events (prune the history, compact, overflow a buffer)")
	}
	// A cursor with events after it that the store then forgets: Follow
	// refuses it, saying how to catch up.
	old := e.cursor(e.s)
	e.enqueue(e.s, at(time.Second), inst("bc-2", "q-bc"))
	h.ExpireEvents(t, e.s)
	_, err := e.s.Follow(e.ctx, &store.FollowParams{Cursor: old})
	if !errors.Is(err, store.ErrCursorExpired) {
		t.Fatalf("Follow from a cursor older than what the store retains: %v, want an error wrapping ErrCursorExpired", err)
	}
	if !strings.Contains(err.Error(), "EventCursor") {
		t.Errorf("ErrCursorExpired error %q does not say how to catch up (list instances, then follow from EventCursor)", err)
	}
	// A fresh cursor works again.
	fresh, _ := e.follow(e.s, store.FollowParams{Cursor: e.cursor(e.s)})
	e.enqueue(e.s, at(time.Hour), inst("bc-3", "q-bc"))
	if ev := next(t, fresh, "after catching up"); ev.InstanceID != "bc-3" {
		t.Fatalf("after catching up: %s, want bc-3", fmtEvent(ev))
	}
}

// testEventsLagging: a follower that reads nothing while many writes
// happen and the store then forgets them delivers what it had in hand, in
// order, then ends with an error wrapping ErrCursorExpired: it never
// skips silently.
func testEventsLagging(t *testing.T, h Harness) {
	e := setup(t, h)
	if h.ExpireEvents == nil {
		t.Fatal("storetest: Harness.ExpireEvents is nil; set it to a func that makes the store drop what it retains of its events (prune the history, compact, overflow a buffer)")
	}
	lagging, _ := e.follow(e.s, store.FollowParams{Buffer: 1})
	const n = 300
	for i := range n {
		e.enqueue(e.s, at(time.Duration(i)*time.Millisecond), inst(fmt.Sprintf("lag-%03d", i), "q-lag"))
	}
	h.ExpireEvents(t, e.s)
	deadline := time.After(eventWait)
	got := 0
	for {
		select {
		case ev, ok := <-lagging:
			if !ok {
				t.Fatalf("lagging feed closed after %d events without an error event", got)
			}
			if ev.Err != nil {
				if !errors.Is(ev.Err, store.ErrCursorExpired) {
					t.Fatalf("lagging feed ended with %v, want an error wrapping ErrCursorExpired", ev.Err)
				}
				if _, ok := <-lagging; ok {
					t.Fatal("lagging feed not closed after its error event")
				}
				return
			}
			want := fmt.Sprintf("lag-%03d", got/2)
			if ev.InstanceID != want || ev.State != []store.State{store.Created, store.Scheduled}[got%2] {
				t.Fatalf("lagging feed: event %d is %s, want %s %v (in order, nothing skipped)", got, fmtEvent(ev), want, []store.State{store.Created, store.Scheduled}[got%2])
			}
			got++
			if got == 2*n {
				t.Fatalf("lagging feed delivered all %d events although the store forgot them before they were read", got)
			}
		case <-deadline:
			t.Fatalf("lagging feed gave no ErrCursorExpired within %v (%d events read)", eventWait, got)
		}
	}
}

// testEvents runs the checks of store.Events, each in a namespace of its
// own: first those that keep their cursors good, in parallel, then those
// that call Harness.ExpireEvents, one at a time, since expiring may reach
// the whole server (an etcd compaction expires every older cursor).
func testEvents(t *testing.T, h Harness) {
	t.Run("Live", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			fn   func(*testing.T, Harness)
		}{
			{"Transitions", testEventsTransitions},
			{"Filters", testEventsFilters},
			{"Resume", testEventsResume},
			{"End", testEventsEnd},
			{"ReadyAt", testEventsReadyAt},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.fn(t, h)
			})
		}
	})
	t.Run("BadCursor", func(t *testing.T) { testEventsBadCursor(t, h) })
	t.Run("Lagging", func(t *testing.T) { testEventsLagging(t, h) })
}

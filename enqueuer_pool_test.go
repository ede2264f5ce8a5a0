package job

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jobkit/job/store"
)

// TestScheduleGaveUpRequestNotReused: a caller that gives up while its
// shared call is in flight returns at once, and the call's completion
// still writes into its request; a caller that queues next must never get
// that request (reused requests, issue 19), or it would return the other
// caller's instance. Each round: B's call held in flight, B gives up, C
// queues behind it, then B's call completes, then C's; C must get its own
// instance. Requests come from a sync.Pool, which hands a freed one to the
// next caller on the same P most of the time: 20 rounds.
func TestScheduleGaveUpRequestNotReused(t *testing.T) {
	for range 20 {
		e := newEnqueueTest(t)
		var bID string
		e.g.mu.Lock()
		e.g.seen = func(_ context.Context, p *store.EnqueueParams) {
			for _, in := range p.Instances {
				if strings.Contains(string(in.Args), `"b"`) {
					e.g.mu.Lock()
					bID = in.ID
					e.g.mu.Unlock()
				}
			}
		}
		e.g.mu.Unlock()
		first := e.schedule(context.Background(), "first")
		e.waitEntered()
		ctxB, cancelB := context.WithCancel(context.Background())
		b := e.schedule(ctxB, "b")
		e.waitQueued(1)
		e.g.mu.Lock()
		close(e.g.gate) // lets first through; B's call is held at the new gate
		e.g.gate = make(chan struct{})
		e.g.mu.Unlock()
		if r := e.result(first); r.err != nil {
			t.Fatal(r.err)
		}
		e.waitEntered() // B's call, in flight
		cancelB()
		if r := e.result(b); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("caller that gave up in flight: %v, want context.Canceled", r.err)
		}
		c := e.schedule(context.Background(), "c")
		e.waitQueued(1)
		e.open() // B's call completes, then C's
		r := e.result(c)
		if r.err != nil {
			t.Fatal(r.err)
		}
		e.g.mu.Lock()
		got, gaveUp := r.inst.ID, bID
		e.g.mu.Unlock()
		if got == gaveUp {
			t.Fatalf("the caller after one that gave up got that caller's instance %s: its request was reused while its call was in flight", got)
		}
	}
}

package job

import (
	"context"
	"slices"
	"testing"

	"github.com/jobkit/job/store"
)

// TestScheduleUnsharedGoesAlone: a ScheduleJob whose context is
// store.Unshared (it carries the caller's database transaction) is sent
// as a store call of its own at once, even while another call is in
// flight, never queued into a shared batch.
func TestScheduleUnsharedGoesAlone(t *testing.T) {
	e := newEnqueueTest(t)
	first := e.schedule(context.Background(), "first")
	e.waitEntered()
	queued := e.schedule(context.Background(), "queued")
	e.waitQueued(1)
	alone := e.schedule(store.Unshared(context.Background()), "alone")
	e.waitEntered() // reached the store while the first call is still in flight
	e.m.enq.mu.Lock()
	pending := len(e.m.enq.pending)
	e.m.enq.mu.Unlock()
	if pending != 1 {
		t.Fatalf("%d calls queued, want only the shared one: the unshared call must not queue", pending)
	}
	e.open()
	for _, ch := range []<-chan scheduled{first, queued, alone} {
		if r := e.result(ch); r.err != nil {
			t.Fatal(r.err)
		}
	}
	sizes, _ := e.g.calls()
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{1, 1, 1}) {
		t.Fatalf("store.Enqueue sizes %v, want three calls of one", sizes)
	}
}

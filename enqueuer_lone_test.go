package job

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/jobkit/job/store"
)

// goroutineID returns the ID of the calling goroutine, from its stack
// header ("goroutine 42 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	if len(f) < 2 {
		return ""
	}
	return string(f[1])
}

type ctxKey struct{}

// TestScheduleLoneCallerCallsTheStoreItself checks that a ScheduleJob made
// while no other is in flight pays nothing for group commit: the store
// call runs on the caller's own goroutine (no hand-off to another) with
// the caller's own context, one call per schedule.
func TestScheduleLoneCallerCallsTheStoreItself(t *testing.T) {
	e := newEnqueueTest(t)
	e.open()
	var mu sync.Mutex
	var gids []string
	var ctxs []context.Context
	e.g.seen = func(ctx context.Context, _ *store.EnqueueParams) {
		mu.Lock()
		gids = append(gids, goroutineID())
		ctxs = append(ctxs, ctx)
		mu.Unlock()
	}
	me := goroutineID()
	for i := range 3 {
		ctx := context.WithValue(context.Background(), ctxKey{}, i)
		if _, err := e.m.ScheduleJob(ctx, "k", WithArguments("alone")); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		gid, got := gids[len(gids)-1], ctxs[len(ctxs)-1]
		mu.Unlock()
		if gid != me {
			t.Fatalf("schedule %d: the store call ran on goroutine %s, want the caller's (%s): a lone caller must not hand its call to another goroutine", i, gid, me)
		}
		if got != ctx {
			t.Fatalf("schedule %d: the store call got another context than the caller's", i)
		}
	}
	if sizes, _ := e.g.calls(); !slices.Equal(sizes, []int{1, 1, 1}) {
		t.Fatalf("store.Enqueue sizes %v, want [1 1 1]", sizes)
	}
	e.m.enq.mu.Lock()
	busy, queued := e.m.enq.busy, len(e.m.enq.pending)
	e.m.enq.mu.Unlock()
	if busy || queued != 0 {
		t.Fatalf("after lone calls: busy %v, %d queued; want idle", busy, queued)
	}
}

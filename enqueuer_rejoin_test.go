package job

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// slowStore is a memdb store whose Enqueue takes a millisecond (of
// synctest's clock: it returns once every other goroutine is blocked),
// recording each call's size.
type slowStore struct {
	*memdbstore.Store
	mu    sync.Mutex
	sizes []int
}

func (s *slowStore) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	s.sizes = append(s.sizes, len(p.Instances))
	s.mu.Unlock()
	return s.Store.Enqueue(ctx, p)
}

// TestScheduleCallersJustCompletedJoinTheNextCall: callers scheduling in
// a loop share store calls with each other, not in two halves taking
// turns. Callers completed by a shared call get to queue again before the
// next call is taken, so with 8 callers the calls carry nearly 8 (issue
// 19); without that, the 4 completed ones found the other 4 already sent
// and every call carried 4.
func TestScheduleCallersJustCompletedJoinTheNextCall(t *testing.T) {
	// One P: which goroutine runs when is then up to the enqueuer's
	// hand-offs alone.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		mem, err := memdbstore.New()
		if err != nil {
			t.Fatal(err)
		}
		st := &slowStore{Store: mem}
		m, err := NewManager(WithStore(st), WithNodeID("n1"))
		if err != nil {
			t.Fatal(err)
		}
		j, err := NewJob(WithKind("k"), WithExecutor(func(n int) {}))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
		const callers, each = 8, 40
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for i := range each {
					if _, err := m.ScheduleJob(t.Context(), "k", WithArguments(c*each+i)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		st.mu.Lock()
		sizes := st.sizes
		st.mu.Unlock()
		total := 0
		for _, n := range sizes {
			total += n
		}
		if total != callers*each {
			t.Fatalf("the store calls carried %d instances, want %d", total, callers*each)
		}
		// The first calls fill up as the callers start; the last ones
		// empty as they finish.
		mid := sizes[len(sizes)/4 : len(sizes)*3/4]
		sum := 0
		for _, n := range mid {
			sum += n
		}
		if mean := float64(sum) / float64(len(mid)); mean < 6 {
			t.Errorf("the middle half of the store calls carried %.1f instances each (sizes %v), want at least 6 of the %d callers", mean, sizes, callers)
		}
	})
}

// TestScheduleSharedCallEndsWhenEveryCallerLeft: once every caller of a
// shared call has given up, the call's context ends too (and the callers
// return at once with their contexts' errors).
func TestScheduleSharedCallEndsWhenEveryCallerLeft(t *testing.T) {
	e := newEnqueueTest(t)
	first := e.schedule(context.Background(), "first")
	e.waitEntered()
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	a := e.schedule(ctx1, "a")
	e.waitQueued(1)
	b := e.schedule(ctx2, "b")
	e.waitQueued(2)
	var sharedCtx context.Context
	e.g.mu.Lock()
	e.g.seen = func(ctx context.Context, p *store.EnqueueParams) {
		if len(p.Instances) == 2 {
			e.g.mu.Lock()
			sharedCtx = ctx
			e.g.mu.Unlock()
		}
	}
	close(e.g.gate)
	e.g.gate = make(chan struct{})
	e.g.mu.Unlock()
	if r := e.result(first); r.err != nil {
		t.Fatal(r.err)
	}
	e.waitEntered() // the shared call, held at the gate
	e.g.mu.Lock()
	shared := sharedCtx
	e.g.mu.Unlock()
	if shared == nil || shared.Err() != nil {
		t.Fatalf("shared call's context %v before anyone left; want a live one", shared)
	}
	cancel1()
	if r := e.result(a); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("first caller that left: %v, want context.Canceled", r.err)
	}
	if shared.Err() != nil {
		t.Fatal("the shared call's context ended while one of its callers still waited")
	}
	cancel2()
	if r := e.result(b); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("second caller that left: %v, want context.Canceled", r.err)
	}
	select {
	case <-shared.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the shared call's context did not end once every caller had left")
	}
	e.open()
}

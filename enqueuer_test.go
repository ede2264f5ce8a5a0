package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// gatedStore is a real memdb store whose Enqueue calls can be held at a
// gate, so a test can line ScheduleJob calls up behind one in flight. It
// records each call's size and whether its context had ended by the time
// the gate opened, and refuses, as etcd does an oversized record, any call
// holding an instance whose arguments contain "too-large".
type gatedStore struct {
	*memdbstore.Store
	mu      sync.Mutex
	gate    chan struct{} // nil: calls pass
	entered chan struct{} // gets a value as each call reaches the gate
	sizes   []int
	ctxErrs []error
	// seen, when set, is called first thing in each Enqueue.
	seen func(ctx context.Context, p *store.EnqueueParams)
	// fail, when set, is returned by the calls it says true for (after
	// seen), and they store nothing.
	fail func(call int) error
	n    int
}

func (g *gatedStore) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	g.mu.Lock()
	gate, seen, fail := g.gate, g.seen, g.fail
	g.n++
	n := g.n
	g.mu.Unlock()
	if seen != nil {
		seen(ctx, p)
	}
	if fail != nil {
		if err := fail(n); err != nil {
			return nil, err
		}
	}
	if gate != nil {
		g.entered <- struct{}{}
		<-gate
	}
	g.mu.Lock()
	g.sizes = append(g.sizes, len(p.Instances))
	g.ctxErrs = append(g.ctxErrs, ctx.Err())
	g.mu.Unlock()
	for _, in := range p.Instances {
		if bytes.Contains(in.Args, []byte("too-large")) {
			return nil, fmt.Errorf("%w: instance %s", store.ErrTooLarge, in.ID)
		}
	}
	return g.Store.Enqueue(ctx, p)
}

func (g *gatedStore) calls() ([]int, []error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sizes), slices.Clone(g.ctxErrs)
}

type enqueueTest struct {
	t *testing.T
	g *gatedStore
	m *Manager
}

func newEnqueueTest(t *testing.T) *enqueueTest {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Store: st, gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	m, err := NewManager(WithStore(g), WithNodeID("n1"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := NewJob(WithKind("k"), WithExecutor(func(s string) {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	return &enqueueTest{t: t, g: g, m: m}
}

type scheduled struct {
	inst *InstanceInfo
	err  error
}

// schedule calls ScheduleJob in a goroutine; the result arrives on the
// returned channel.
func (e *enqueueTest) schedule(ctx context.Context, arg string) <-chan scheduled {
	ch := make(chan scheduled, 1)
	go func() {
		inst, err := e.m.ScheduleJob(ctx, "k", WithArguments(arg))
		ch <- scheduled{inst, err}
	}()
	return ch
}

// waitEntered waits until a store call reaches the gate.
func (e *enqueueTest) waitEntered() {
	e.t.Helper()
	select {
	case <-e.g.entered:
	case <-time.After(10 * time.Second):
		e.t.Fatal("no Enqueue reached the store")
	}
}

// waitQueued waits until n ScheduleJob calls wait behind the one in flight.
func (e *enqueueTest) waitQueued(n int) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.m.enq.mu.Lock()
		got := len(e.m.enq.pending)
		e.m.enq.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d calls queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// open lets the gated call through and every later call pass.
func (e *enqueueTest) open() {
	e.g.mu.Lock()
	close(e.g.gate)
	e.g.gate = nil
	e.g.mu.Unlock()
}

func (e *enqueueTest) result(ch <-chan scheduled) scheduled {
	e.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		e.t.Fatal("ScheduleJob did not return")
		return scheduled{}
	}
}

func (e *enqueueTest) stored(id string) bool {
	e.t.Helper()
	_, err := e.m.GetInstance(context.Background(), id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

func TestScheduleCallsShareOneEnqueue(t *testing.T) {
	e := newEnqueueTest(t)
	first := e.schedule(context.Background(), "first")
	e.waitEntered()
	var rest []<-chan scheduled
	for i := range 10 {
		rest = append(rest, e.schedule(context.Background(), fmt.Sprint("a", i)))
	}
	e.waitQueued(10)
	e.open()
	results := []scheduled{e.result(first)}
	for _, ch := range rest {
		results = append(results, e.result(ch))
	}
	if sizes, _ := e.g.calls(); !slices.Equal(sizes, []int{1, 10}) {
		t.Fatalf("store.Enqueue sizes %v, want [1 10]: the ten calls queued behind the first should share one", sizes)
	}
	ids := map[string]bool{}
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("schedule %d: %v", i, r.err)
		}
		if ids[r.inst.ID] {
			t.Fatalf("instance %s returned twice", r.inst.ID)
		}
		ids[r.inst.ID] = true
		rec, err := e.m.GetInstance(context.Background(), r.inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := `["first"]`
		if i > 0 {
			want = fmt.Sprintf(`["a%d"]`, i-1)
		}
		if got := string(rec.Args); got != want || rec.State != Scheduled || rec.Seq == 0 {
			t.Errorf("schedule %d: stored args %s, state %v, seq %d; want %s, scheduled, a sequence number", i, got, rec.State, rec.Seq, want)
		}
		if r.inst.Seq != rec.Seq {
			t.Errorf("schedule %d: returned seq %d, stored %d", i, r.inst.Seq, rec.Seq)
		}
	}
	// Idle again: a lone call goes straight through on its own.
	if r := e.result(e.schedule(context.Background(), "alone")); r.err != nil {
		t.Fatal(r.err)
	}
	if sizes, _ := e.g.calls(); !slices.Equal(sizes, []int{1, 10, 1}) {
		t.Fatalf("store.Enqueue sizes %v, want [1 10 1]", sizes)
	}
}

func TestScheduleCanceledWhileQueuedStoresNothing(t *testing.T) {
	e := newEnqueueTest(t)
	first := e.schedule(context.Background(), "first")
	e.waitEntered()
	ctx, cancel := context.WithCancel(context.Background())
	canceled := e.schedule(ctx, "canceled")
	other := e.schedule(context.Background(), "other")
	e.waitQueued(2)
	cancel()
	// It returns while the call ahead of it is still held at the gate.
	r := e.result(canceled)
	if !errors.Is(r.err, context.Canceled) || r.inst != nil {
		t.Fatalf("canceled schedule: %v, %v; want context.Canceled and no instance", r.inst, r.err)
	}
	if errors.Is(r.err, ErrOutcomeUnknown) {
		t.Fatalf("schedule canceled while queued: %v; it was never sent, so it must not wrap ErrOutcomeUnknown", r.err)
	}
	e.waitQueued(1)
	e.open()
	for _, ch := range []<-chan scheduled{first, other} {
		if r := e.result(ch); r.err != nil || !e.stored(r.inst.ID) {
			t.Fatalf("schedule: %v, stored %v", r.err, r.err == nil && e.stored(r.inst.ID))
		}
	}
	all, err := e.m.LookupInstances(context.Background(), NewQuery())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		if string(in.Args) == `["canceled"]` {
			t.Fatalf("the canceled schedule was stored as %s", in.ID)
		}
	}
	if len(all) != 2 {
		t.Fatalf("%d instances stored, want 2", len(all))
	}
}

func TestScheduleSharedCallOutlivesOneCaller(t *testing.T) {
	e := newEnqueueTest(t)
	first := e.schedule(context.Background(), "first")
	e.waitEntered()
	ctx, cancel := context.WithCancel(context.Background())
	leaving := e.schedule(ctx, "leaving") // first: its values lead the shared call
	e.waitQueued(1)
	staying := e.schedule(context.Background(), "staying")
	e.waitQueued(2)
	// Let the first call through; hold the shared one at the gate.
	e.g.mu.Lock()
	close(e.g.gate)
	e.g.gate = make(chan struct{})
	e.g.mu.Unlock()
	e.waitEntered()
	cancel()
	r := e.result(leaving)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("caller that left: %v, want context.Canceled", r.err)
	}
	// Its instance is in the shared call in flight, which goes on: the
	// caller cannot know whether it will be stored.
	if !errors.Is(r.err, ErrOutcomeUnknown) || !strings.Contains(r.err.Error(), "WithIdempotencyKey") {
		t.Fatalf("caller that left while its shared call was in flight: %v; want an error wrapping ErrOutcomeUnknown that names WithIdempotencyKey", r.err)
	}
	e.open()
	if r := e.result(first); r.err != nil {
		t.Fatal(r.err)
	}
	if r := e.result(staying); r.err != nil || !e.stored(r.inst.ID) {
		t.Fatalf("caller that stayed: %v", r.err)
	}
	all, err := e.m.LookupInstances(context.Background(), NewQuery())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("%d instances stored, want 3: the caller that left was stored by the shared call all the same", len(all))
	}
	sizes, ctxErrs := e.g.calls()
	if !slices.Equal(sizes, []int{1, 2}) || ctxErrs[1] != nil {
		t.Fatalf("store calls %v with context errors %v; want [1 2], the shared call's context still live after one caller left", sizes, ctxErrs)
	}
}

func TestScheduleBatchRefusedForOneRecordRetriesEach(t *testing.T) {
	e := newEnqueueTest(t)
	first := e.schedule(context.Background(), "first")
	e.waitEntered()
	ok1 := e.schedule(context.Background(), "ok1")
	e.waitQueued(1)
	bad := e.schedule(context.Background(), "too-large")
	e.waitQueued(2)
	ok2 := e.schedule(context.Background(), "ok2")
	e.waitQueued(3)
	e.open()
	if r := e.result(bad); !errors.Is(r.err, store.ErrTooLarge) {
		t.Fatalf("oversized schedule: %v, want ErrTooLarge", r.err)
	}
	for _, ch := range []<-chan scheduled{first, ok1, ok2} {
		if r := e.result(ch); r.err != nil || !e.stored(r.inst.ID) {
			t.Fatalf("schedule next to an oversized one: %v", r.err)
		}
	}
	if sizes, _ := e.g.calls(); !slices.Equal(sizes, []int{1, 3, 1, 1, 1}) {
		t.Fatalf("store.Enqueue sizes %v, want [1 3 1 1 1]: the refused batch, then each on its own", sizes)
	}
}

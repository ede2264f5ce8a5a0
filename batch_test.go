package job

import (
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

// newBatchTest is newEnqueueTest with its gate open and a second kind,
// "sum", whose executor takes two ints.
func newBatchTest(t *testing.T) *enqueueTest {
	e := newEnqueueTest(t)
	e.open()
	j, err := NewJob(WithKind("sum"), WithExecutor(func(a, b int) int { return a + b }))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestScheduleJobsStoresEveryItemInOneCall(t *testing.T) {
	e := newBatchTest(t)
	ctx := context.Background()
	items := []BatchItem{
		{Kind: "k", Options: []ScheduleOption{WithArguments("a")}},
		{Kind: "sum", Options: []ScheduleOption{WithArguments(1, 2), WithPriority(HighPriority)}},
		{Kind: "k", Options: []ScheduleOption{WithArguments("b"), WithScheduleAfter(time.Hour)}},
		{Kind: "sum", Options: []ScheduleOption{WithArguments(3, 4), WithQueue("other")}},
	}
	res, err := e.m.ScheduleJobs(ctx, items...)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(items) {
		t.Fatalf("%d results for %d items", len(res), len(items))
	}
	if sizes, _ := e.g.calls(); !slices.Equal(sizes, []int{4}) {
		t.Fatalf("store.Enqueue sizes %v, want [4]: one call for the batch", sizes)
	}
	want := []struct {
		kind, args, queue string
		prio              int
		later             bool
	}{{"k", `["a"]`, DefaultQueue, int(NormalPriority), false}, {"sum", `[1,2]`, DefaultQueue, int(HighPriority), false},
		{"k", `["b"]`, DefaultQueue, int(NormalPriority), true}, {"sum", `[3,4]`, "other", int(NormalPriority), false}}
	var lastSeq uint64
	for i, r := range res {
		if r.Err != nil || r.Instance == nil {
			t.Fatalf("item %d: %v, %v", i, r.Instance, r.Err)
		}
		got, err := e.m.GetInstance(ctx, r.Instance.ID)
		if err != nil {
			t.Fatalf("item %d not stored: %v", i, err)
		}
		rec, w := got, want[i]
		if rec.Kind != w.kind || string(rec.Args) != w.args || rec.Queue != w.queue || int(rec.Priority) != w.prio ||
			rec.RunAt.After(rec.CreatedAt) != w.later || rec.State != store.Scheduled {
			t.Errorf("item %d stored as kind %s args %s queue %s prio %d runAt %v created %v state %v; want %+v",
				i, rec.Kind, rec.Args, rec.Queue, rec.Priority, rec.RunAt, rec.CreatedAt, rec.State, w)
		}
		if rec.Seq <= lastSeq || r.Instance.Seq != rec.Seq {
			t.Errorf("item %d: seq %d (returned %d) after %d; want increasing in item order", i, rec.Seq, r.Instance.Seq, lastSeq)
		}
		lastSeq = rec.Seq
	}
}

func TestScheduleJobsRejectsBadItemsAlone(t *testing.T) {
	e := newBatchTest(t)
	ctx := context.Background()
	holder, err := e.m.ScheduleJob(ctx, "k", WithArguments("holder"), WithUniqueKey("held", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	items := []BatchItem{
		{Kind: "k", Options: []ScheduleOption{WithArguments("ok1")}},
		{Kind: "nope", Options: []ScheduleOption{WithArguments("x")}},                     // unknown kind
		{Kind: "sum", Options: []ScheduleOption{WithArguments("one", "two")}},             // arguments do not fit
		{Kind: "k", Options: []ScheduleOption{WithArguments("x"), WithScheduleAfter(-1)}}, // bad option
		{Kind: "k", Options: []ScheduleOption{WithArguments("too-large")}},                // the store refuses it
		{Kind: "k", Options: []ScheduleOption{WithArguments("dup"), WithUniqueKey("held", time.Hour)}},
		{Kind: "k", Options: []ScheduleOption{WithArguments("in1"), WithUniqueKey("inbatch", time.Hour)}},
		{Kind: "k", Options: []ScheduleOption{WithArguments("in2"), WithUniqueKey("inbatch", time.Hour)}},
		{Kind: "sum", Options: []ScheduleOption{WithArguments(5, 6)}},
		{Kind: "k", Options: []ScheduleOption{WithArguments("md"), WithMetadata("big", strings.Repeat("x", 5000))}},
	}
	res, err := e.m.ScheduleJobs(ctx, items...)
	if err != nil {
		t.Fatal(err)
	}
	wantErrs := []error{nil, ErrUnknownKind, ErrInvalidArguments, ErrInvalidOption, ErrTooLarge, ErrDuplicate, nil, ErrDuplicate, nil, ErrInvalidOption}
	for i, r := range res {
		if w := wantErrs[i]; w == nil && r.Err != nil || w != nil && !errors.Is(r.Err, w) {
			t.Errorf("item %d: error %v, want %v", i, r.Err, w)
		}
	}
	if res[5].Instance == nil || res[5].Instance.ID != holder.ID {
		t.Errorf("duplicate of a stored key: instance %v, want the holder %s", res[5].Instance, holder.ID)
	}
	if res[7].Instance == nil || res[6].Instance == nil || res[7].Instance.ID != res[6].Instance.ID {
		t.Errorf("second of a key in the batch: instance %v, want the first's %v", res[7].Instance, res[6].Instance)
	}
	all, err := e.m.LookupInstances(ctx, NewQuery())
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, in := range all {
		args = append(args, string(in.Args))
	}
	slices.Sort(args)
	if want := []string{`"holder"`, `"in1"`, `"ok1"`, `[5,6]`}; !slices.Equal(args, []string{`["holder"]`, `["in1"]`, `["ok1"]`, `[5,6]`}) {
		t.Fatalf("stored arguments %v; want only the accepted items and the holder (%v)", args, want)
	}
}

func TestScheduleJobsSplitsIntoStoreCalls(t *testing.T) {
	e := newBatchTest(t)
	n := 2*MaxScheduleBatch + 5
	items := make([]BatchItem, n)
	for i := range items {
		items[i] = BatchItem{Kind: "k", Options: []ScheduleOption{WithArguments(fmt.Sprint(i))}}
	}
	res, err := e.m.ScheduleJobs(context.Background(), items...)
	if err != nil {
		t.Fatal(err)
	}
	if sizes, _ := e.g.calls(); !slices.Equal(sizes, []int{MaxScheduleBatch, MaxScheduleBatch, 5}) {
		t.Fatalf("store.Enqueue sizes %v, want [%d %d 5]", sizes, MaxScheduleBatch, MaxScheduleBatch)
	}
	for i, r := range res {
		if r.Err != nil || string(r.Instance.Args) != fmt.Sprintf(`["%d"]`, i) {
			t.Fatalf("item %d: %v, %v", i, r.Instance, r.Err)
		}
	}
}

func TestScheduleJobsStoreFailureStopsTheBatch(t *testing.T) {
	e := newBatchTest(t)
	broken := errors.New("connection reset")
	e.g.fail = func(call int) error {
		if call == 2 {
			return broken
		}
		return nil
	}
	n := MaxScheduleBatch + 10
	items := make([]BatchItem, n)
	for i := range items {
		items[i] = BatchItem{Kind: "k", Options: []ScheduleOption{WithArguments(fmt.Sprint(i))}}
	}
	items[n-1].Kind = "nope"
	res, err := e.m.ScheduleJobs(context.Background(), items...)
	if !errors.Is(err, broken) {
		t.Fatalf("ScheduleJobs: %v, want the store's error", err)
	}
	for i, r := range res {
		switch {
		case i < MaxScheduleBatch:
			if r.Err != nil || !e.stored(r.Instance.ID) {
				t.Fatalf("item %d of the first call: %v", i, r.Err)
			}
		case i == n-1:
			if !errors.Is(r.Err, ErrUnknownKind) {
				t.Fatalf("item %d: %v, want its own error", i, r.Err)
			}
		default:
			if !errors.Is(r.Err, broken) || r.Instance != nil {
				t.Fatalf("item %d of the failed call: %v, %v; want the store's error", i, r.Instance, r.Err)
			}
		}
	}
	all, lerr := e.m.LookupInstances(context.Background(), NewQuery(WithQueryLimit(10*MaxScheduleBatch)))
	if lerr != nil || len(all) != MaxScheduleBatch {
		t.Fatalf("%d instances stored, want the first call's %d", len(all), MaxScheduleBatch)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.m.ScheduleJobs(ctx, items[0]); !errors.Is(err, context.Canceled) {
		t.Fatalf("ScheduleJobs with an ended ctx: %v", err)
	}
	if res, err := e.m.ScheduleJobs(context.Background()); err != nil || len(res) != 0 {
		t.Fatalf("ScheduleJobs of nothing: %v, %v", res, err)
	}
}

func TestScheduleJobsIdempotentRepeat(t *testing.T) {
	e := newBatchTest(t)
	ctx := context.Background()
	items := []BatchItem{
		{Kind: "k", Options: []ScheduleOption{WithArguments("a"), WithIdempotencyKey("ka")}},
		{Kind: "k", Options: []ScheduleOption{WithArguments("b"), WithIdempotencyKey("kb")}},
	}
	first, err := e.m.ScheduleJobs(ctx, items...)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.m.ScheduleJobs(ctx, items...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range items {
		if first[i].Err != nil || again[i].Err != nil || again[i].Instance.ID != first[i].Instance.ID {
			t.Fatalf("item %d: first %v %v, repeat %v %v; want the same instance", i, first[i].Instance, first[i].Err, again[i].Instance, again[i].Err)
		}
	}
	if all, err := e.m.LookupInstances(ctx, NewQuery()); err != nil || len(all) != 2 {
		t.Fatalf("%d instances stored (%v), want 2", len(all), err)
	}
}

// tagMiddleware adds a metadata pair naming the item's first argument to
// every instance it schedules, and turns away kind "refused" without
// calling next.
type tagMiddleware struct {
	MiddlewareDefaults
	mu    sync.Mutex
	calls int
}

func (t *tagMiddleware) Schedule(ctx context.Context, info *ScheduleInfo, next func(context.Context) (*InstanceInfo, error)) (*InstanceInfo, error) {
	t.mu.Lock()
	t.calls++
	t.mu.Unlock()
	if info.Kind == "refused" {
		return nil, fmt.Errorf("%w: refused by middleware", ErrInvalidOption)
	}
	info.Metadata["tag"] = "mw-" + info.ID
	return next(ctx)
}

func TestScheduleJobsPassesEachItemThroughMiddleware(t *testing.T) {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Store: st}
	mw := &tagMiddleware{}
	m, err := NewManager(WithStore(g), WithNodeID("n1"), WithMiddleware(mw))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"k", "refused"} {
		j, err := NewJob(WithKind(kind), WithExecutor(func(s string) {}))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	items := []BatchItem{
		{Kind: "k", Options: []ScheduleOption{WithArguments("a"), WithMetadata("user", "1")}},
		{Kind: "refused", Options: []ScheduleOption{WithArguments("b")}},
		{Kind: "k", Options: []ScheduleOption{WithArguments("c")}},
		{Kind: "k", Options: []ScheduleOption{WithArguments("d")}},
	}
	res, err := m.ScheduleJobs(ctx, items...)
	if err != nil {
		t.Fatal(err)
	}
	if mw.calls != len(items) {
		t.Fatalf("middleware saw %d schedules, want one per item (%d)", mw.calls, len(items))
	}
	if sizes, _ := g.calls(); !slices.Equal(sizes, []int{3}) {
		t.Fatalf("store.Enqueue sizes %v, want [3]: the items the middleware let through, in one call", sizes)
	}
	if !errors.Is(res[1].Err, ErrInvalidOption) || res[1].Instance != nil {
		t.Fatalf("refused item: %v, %v", res[1].Instance, res[1].Err)
	}
	var lastSeq uint64
	for _, i := range []int{0, 2, 3} {
		if res[i].Err != nil {
			t.Fatalf("item %d: %v", i, res[i].Err)
		}
		got, err := m.GetInstance(ctx, res[i].Instance.ID)
		if err != nil {
			t.Fatal(err)
		}
		md := got.Metadata
		if md["tag"] != "mw-"+got.ID || (i == 0) != (md["user"] == "1") {
			t.Errorf("item %d stored metadata %v, want the middleware's tag (and the item's own pair)", i, md)
		}
		if got.Seq <= lastSeq {
			t.Errorf("item %d: seq %d after %d, want item order", i, got.Seq, lastSeq)
		}
		lastSeq = got.Seq
	}
	if all, err := m.LookupInstances(ctx, NewQuery()); err != nil || len(all) != 3 {
		t.Fatalf("%d instances stored (%v), want 3", len(all), err)
	}
}

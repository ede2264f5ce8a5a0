package jobtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

const deadline = 15 * time.Second

func init() {
	register("Signatures", testSignatures)
	register("TypedResults", testTypedResults)
	register("RetryThenTerminate", testRetryThenTerminate)
	register("PermanentError", testPermanentError)
	register("Timeout", testTimeout)
	register("CancelPending", testCancelPending)
	register("CancelRunning", testCancelRunning)
	register("CancelRunningOnOtherManager", testCancelRemote)
	register("CancelRunningThenFail", testCancelRemoteThenFail)
	register("PanicRecovered", testPanic)
	register("UniqueKey", testUniqueKey)
	register("ConcurrentSchedule", testConcurrentSchedule)
	register("PriorityOrder", testPriorityOrder)
	register("ScheduleAt", testScheduleAt)
	register("ClusterNoDuplicates", testClusterNoDuplicates)
	register("RecurringOncePerCluster", testRecurringOncePerCluster)
	register("RescueAfterCrash", testRescueAfterCrash)
	register("StopHandsBack", testStopHandsBack)
	register("UndecodableArguments", testUndecodableArguments)
	register("MixedClusterKinds", testMixedClusterKinds)
	register("ClaimsByLabel", testClaimsByLabel)
	register("Logs", testLogs)
	register("Retention", testRetention)
}

type point struct{ X, Y int }

func testSignatures(t *testing.T, e *env) {
	var gotInst atomic.Value
	jobs := []*job.Job{
		mustJob(t, job.WithKind("sum"), job.WithExecutor(func(a, b int) int { return a + b })),
		mustJob(t, job.WithKind("ctx"), job.WithExecutor(func(ctx context.Context, s string) (string, error) {
			if ctx == nil {
				return "", errors.New("nil context")
			}
			return strings.ToUpper(s), nil
		})),
		mustJob(t, job.WithKind("inst"), job.WithExecutor(func(ji job.Instance, f float64) float64 {
			gotInst.Store(ji.Info().ID)
			return f * 2
		})),
		mustJob(t, job.WithKind("struct"), job.WithExecutor(func(ctx context.Context, ji job.Instance, p point, pp *point, xs []int, m map[string]bool, at time.Time) (int, string, error) {
			return p.X + pp.Y + len(xs) + len(m), at.UTC().Format(time.RFC3339), nil
		})),
		mustJob(t, job.WithKind("noargs"), job.WithExecutor(func() {})),
		mustJob(t, job.WithKind("variadic"), job.WithExecutor(func(prefix string, xs ...int) string {
			return fmt.Sprint(prefix, len(xs))
		})),
	}
	m := e.manager(t, jobs, job.WithWorkers(4))
	start(t, m)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		kind string
		args []any
		want string // JSON of the results
	}{
		{"sum", []any{2, 3}, "[5]"},
		{"ctx", []any{"abc"}, `["ABC"]`},
		{"inst", []any{1.25}, "[2.5]"},
		{"struct", []any{point{1, 2}, &point{3, 4}, []int{1, 2, 3}, map[string]bool{"a": true}, at}, `[9,"2026-01-02T03:04:05Z"]`},
		{"noargs", nil, ""},
		{"variadic", []any{"n=", 1, 2, 3}, `["n=3"]`},
		{"variadic", []any{"n="}, `["n=0"]`},
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		ids[i] = schedule(t, m, c.kind, job.WithArguments(c.args...)).ID
	}
	for i, c := range cases {
		ji := waitState(t, m, ids[i], job.Completed, deadline)
		if got := resultsJSON(t, ji); got != c.want {
			t.Errorf("%s%v: result %s, want %s", c.kind, c.args, got, c.want)
		}
		if got := states(t, m, ids[i]); !slices.Equal(got, []job.State{job.Created, job.Scheduled, job.Processing, job.Completed}) {
			t.Errorf("%s: history %v", c.kind, got)
		}
	}
	if gotInst.Load() != ids[2] {
		t.Errorf("injected Instance has ID %v, want %s", gotInst.Load(), ids[2])
	}
	// Mismatches are caught before anything is stored.
	for _, bad := range []struct {
		kind string
		args []any
	}{
		{"sum", []any{1}},
		{"sum", []any{1, 2, 3}},
		{"sum", []any{"one", 2}},
		{"struct", []any{point{}, &point{}, "not a slice", map[string]bool{}, at}},
		{"variadic", nil},
	} {
		_, err := m.ScheduleJob(context.Background(), bad.kind, job.WithArguments(bad.args...))
		if !errors.Is(err, job.ErrInvalidArguments) {
			t.Errorf("ScheduleJob(%s, %v): err %v, want ErrInvalidArguments", bad.kind, bad.args, err)
		}
	}
	if _, err := m.ScheduleJob(context.Background(), "nope"); !errors.Is(err, job.ErrUnknownKind) {
		t.Errorf("ScheduleJob(unknown kind): %v, want ErrUnknownKind", err)
	}
	all, err := m.LookupInstances(context.Background(), job.NewQuery())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(cases) {
		t.Errorf("store holds %d instances, want %d (bad schedules must store nothing)", len(all), len(cases))
	}
}

// testTypedResults: arguments and results written by the store read back
// into their Go types, through Register's typed handle and through
// InstanceInfo.ResultsInto, large integers and nested values included.
func testTypedResults(t *testing.T, e *env) {
	type in struct {
		Name  string
		Big   int64
		Tags  []string
		Point *point
	}
	type out struct {
		Greeting string
		Twice    int64
		Tags     map[string]int
		At       time.Time
	}
	at := time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)
	m := e.manager(t, nil)
	tj, err := job.Register(m, "typed", func(_ context.Context, a in) (out, error) {
		tags := map[string]int{}
		for i, s := range a.Tags {
			tags[s] = i
		}
		return out{Greeting: "hi " + a.Name, Twice: a.Big * 2, Tags: tags, At: at}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, m)
	const big = int64(1)<<61 + 1 // not a float64
	arg := in{Name: "ada", Big: big, Tags: []string{"a", "b"}, Point: &point{1, 2}}
	ti, err := tj.Schedule(context.Background(), arg)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, m, ti.ID, job.Completed, deadline)
	got, err := tj.GetInstance(context.Background(), ti.ID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := got.Result()
	if err != nil {
		t.Fatalf("Result: %v", err)
	}
	if res.Greeting != "hi ada" || res.Twice != 2*big || res.Tags["b"] != 1 || !res.At.Equal(at) {
		t.Errorf("result %+v", res)
	}
	a, err := got.Argument()
	if err != nil || a.Big != big || a.Point == nil || *a.Point != (point{1, 2}) || len(a.Tags) != 2 {
		t.Errorf("argument %+v, %v", a, err)
	}
	var r out
	if err := got.ResultsInto(&r); err != nil || r.Twice != 2*big {
		t.Errorf("ResultsInto: %+v, %v", r, err)
	}
	if err := got.ResultsInto(&r, &r); !errors.Is(err, job.ErrInvalidResults) {
		t.Errorf("ResultsInto with two pointers for one result: %v, want ErrInvalidResults", err)
	}
}

func testRetryThenTerminate(t *testing.T, e *env) {
	var calls atomic.Int32
	var terminated atomic.Value
	j := mustJob(t, job.WithKind("flaky"),
		job.WithExecutor(func() error { calls.Add(1); return errors.New("boom") }),
		job.WithMaxRetries(2), job.WithBackoff(job.ConstantBackoff(10*time.Millisecond)),
		job.WithTerminateProcessor(func(ji job.Instance, err error) { terminated.Store(err.Error()) }),
	)
	m := e.manager(t, []*job.Job{j})
	start(t, m)
	ji := schedule(t, m, "flaky")
	got := waitState(t, m, ji.ID, job.Terminated, deadline)
	if got.Attempt != 3 || calls.Load() != 3 {
		t.Errorf("attempt %d, calls %d; want 3 and 3 (1 + 2 retries)", got.Attempt, calls.Load())
	}
	if got.Error == "" || got.Error != "boom" {
		t.Errorf("error %v, want boom", got.Error)
	}
	want := []job.State{job.Created, job.Scheduled, job.Processing, job.Scheduled, job.Processing, job.Scheduled, job.Processing, job.Terminated}
	if s := states(t, m, ji.ID); !slices.Equal(s, want) {
		t.Errorf("history %v, want %v", s, want)
	}
	waitFor(t, deadline, "terminate processor", func() bool { return terminated.Load() == "boom" })
}

func testPermanentError(t *testing.T, e *env) {
	j := mustJob(t, job.WithKind("perm"), job.WithMaxRetries(5),
		job.WithExecutor(func() error { return job.Permanent(errors.New("bad input")) }))
	m := e.manager(t, []*job.Job{j})
	start(t, m)
	ji := schedule(t, m, "perm")
	got := waitState(t, m, ji.ID, job.Terminated, deadline)
	if got.Attempt != 1 {
		t.Errorf("attempt %d, want 1: a permanent error is not retried", got.Attempt)
	}
}

func testTimeout(t *testing.T, e *env) {
	j := mustJob(t, job.WithKind("slow"), job.WithMaxRetries(1), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
		job.WithTimeout(30*time.Millisecond),
		job.WithExecutor(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }))
	m := e.manager(t, []*job.Job{j})
	start(t, m)
	ji := schedule(t, m, "slow")
	got := waitState(t, m, ji.ID, job.TimedOut, deadline)
	if got.Attempt != 2 {
		t.Errorf("attempt %d, want 2 (a timed-out attempt is retried)", got.Attempt)
	}
	if got.Error == "" || !strings.Contains(got.Error, "timed out") {
		t.Errorf("error %v, want a timeout", got.Error)
	}
	// A per-instance timeout overrides the job's.
	ji = schedule(t, m, "slow", job.WithTimeout(10*time.Millisecond), job.WithMaxRetries(0))
	got = waitState(t, m, ji.ID, job.TimedOut, deadline)
	if got.Timeout != 10*time.Millisecond || got.Attempt != 1 {
		t.Errorf("timeout %v attempt %d, want 10ms and 1", got.Timeout, got.Attempt)
	}
}

func testCancelPending(t *testing.T, e *env) {
	var ran atomic.Bool
	j := mustJob(t, job.WithKind("later"), job.WithExecutor(func() { ran.Store(true) }))
	m := e.manager(t, []*job.Job{j})
	start(t, m)
	ji := schedule(t, m, "later", job.WithScheduleAfter(time.Hour))
	got, err := m.CancelInstance(context.Background(), ji.ID)
	if err != nil || got.State != job.Canceled {
		t.Fatalf("CancelInstance: %v, %v; want Canceled", got, err)
	}
	if _, err := m.CancelInstance(context.Background(), ji.ID); !errors.Is(err, job.ErrFinished) {
		t.Errorf("second cancel: %v, want ErrFinished", err)
	}
	if _, err := m.CancelInstance(context.Background(), "no-such-id"); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("cancel unknown: %v, want ErrNotFound", err)
	}
	if ran.Load() {
		t.Error("canceled instance ran")
	}
}

func testCancelRunning(t *testing.T, e *env) {
	started := make(chan struct{})
	j := mustJob(t, job.WithKind("block"), job.WithExecutor(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}))
	m := e.manager(t, []*job.Job{j})
	start(t, m)
	ji := schedule(t, m, "block")
	select {
	case <-started:
	case <-time.After(deadline):
		t.Fatal("instance did not start")
	}
	if _, err := m.CancelInstance(context.Background(), ji.ID); err != nil {
		t.Fatal(err)
	}
	waitState(t, m, ji.ID, job.Canceled, deadline)
}

func testCancelRemote(t *testing.T, e *env) {
	started := make(chan struct{})
	var once sync.Once // an attempt fenced before the cancel runs again
	j := mustJob(t, job.WithKind("block"), job.WithExecutor(func(ctx context.Context) error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ctx.Err()
	}))
	// A short lease: renewals every 100 ms carry the request. On a loaded
	// machine the attempt may be fenced first; its rescue then ends the
	// instance Canceled all the same, since the store keeps the request.
	runner := e.manager(t, []*job.Job{j}, job.WithLease(300*time.Millisecond))
	other, ji := cancelFromOther(t, e, runner, "block", started)
	// The runner sees the request at once where the store reports cancels
	// (store.CancelNotifier), else at its next lease renewal.
	waitState(t, other, ji.ID, job.Canceled, deadline)
}

// cancelFromOther starts runner, schedules kind from a second manager
// that is never started (it only schedules and cancels), waits until the
// attempt has started (started receives), and cancels it from the second
// manager, which it returns with the instance.
func cancelFromOther(t *testing.T, e *env, runner *job.Manager, kind string, started <-chan struct{}) (*job.Manager, *job.InstanceInfo) {
	t.Helper()
	other := e.manager(t, []*job.Job{mustJob(t, job.WithKind(kind), job.WithExecutor(func() {}))})
	start(t, runner)
	ji := schedule(t, other, kind)
	select {
	case <-started:
	case <-time.After(deadline):
		t.Fatal("instance did not start")
	}
	if _, err := other.CancelInstance(context.Background(), ji.ID); err != nil {
		t.Fatal(err)
	}
	return other, ji
}

// testCancelRemoteThenFail cancels an attempt from another manager and
// makes it fail, with retries left, before a renewal tells its runner of
// the request: the instance ends Canceled, its retry never runs, and the
// job's handlers see Canceled, the state the store applied.
func testCancelRemoteThenFail(t *testing.T, e *env) {
	started, fail := make(chan struct{}, 1), make(chan struct{})
	var calls atomic.Int32
	var mu sync.Mutex
	var seen []string // state, and the handler's instance's state
	j := mustJob(t, job.WithKind("flaky"), job.WithMaxRetries(5), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
		job.WithExecutor(func() error {
			calls.Add(1)
			select {
			case started <- struct{}{}:
			default:
			}
			<-fail
			return errors.New("boom")
		}),
		job.WithStateChangeProcessor(func(ji job.Instance, st job.State) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprintf("%v/%v", st, ji.Info().State))
		}),
	)
	// A lease far longer than the test: no renewal carries the request,
	// and the store's cancel notices do not reach this runner.
	runner := e.manager(t, []*job.Job{j}, job.WithLease(time.Minute), job.WithStore(withoutCancelNotices(e.store(t))))
	other, ji := cancelFromOther(t, e, runner, "flaky", started)
	close(fail)
	got := waitState(t, other, ji.ID, job.Canceled, deadline)
	if got.Attempt != 1 || calls.Load() != 1 {
		t.Errorf("attempt %d, calls %d; want 1 and 1 (a canceled instance is not retried)", got.Attempt, calls.Load())
	}
	if got.Error == "" || got.Error != "boom" {
		t.Errorf("error %v, want boom (the failure of the canceled attempt)", got.Error)
	}
	want := []job.State{job.Created, job.Scheduled, job.Processing, job.Canceled}
	if s := states(t, other, ji.ID); !slices.Equal(s, want) {
		t.Errorf("history %v, want %v", s, want)
	}
	waitFor(t, deadline, "the state-change handler to see canceled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(seen, "canceled/canceled")
	})
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if strings.HasPrefix(s, "scheduled") {
			t.Errorf("state-change handler saw %v, want no retry (all: %v)", s, seen)
		}
	}
}

func testPanic(t *testing.T, e *env) {
	jobs := []*job.Job{
		mustJob(t, job.WithKind("panic"), job.WithMaxRetries(0), job.WithExecutor(func() { panic("kaboom") })),
		mustJob(t, job.WithKind("ok"), job.WithExecutor(func() string { return "fine" })),
	}
	m := e.manager(t, jobs, job.WithWorkers(1))
	start(t, m)
	p := schedule(t, m, "panic")
	ok := schedule(t, m, "ok")
	got := waitState(t, m, p.ID, job.Terminated, deadline)
	msg := got.Error
	if !strings.Contains(msg, "kaboom") || !strings.Contains(msg, "goroutine") {
		t.Errorf("panic error %q lacks the value or the stack", msg)
	}
	waitState(t, m, ok.ID, job.Completed, deadline)
}

func testUniqueKey(t *testing.T, e *env) {
	j := mustJob(t, job.WithKind("u"), job.WithExecutor(func(n int) {}))
	m := e.manager(t, []*job.Job{j})
	first := schedule(t, m, "u", job.WithArguments(1), job.WithUniqueKey("report-42", time.Hour), job.WithScheduleAfter(time.Hour))
	dup, err := m.ScheduleJob(context.Background(), "u", job.WithArguments(2), job.WithUniqueKey("report-42", time.Hour))
	if !errors.Is(err, job.ErrDuplicate) {
		t.Fatalf("duplicate schedule: %v, want ErrDuplicate", err)
	}
	if dup == nil || dup.ID != first.ID {
		t.Fatalf("duplicate returned %v, want the holder %s", dup, first.ID)
	}
	other := schedule(t, m, "u", job.WithArguments(3), job.WithUniqueKey("report-43", time.Hour), job.WithScheduleAfter(time.Hour))
	if other.ID == first.ID {
		t.Fatal("another key returned the same instance")
	}
}

// testConcurrentSchedule schedules from many goroutines at once, so that
// the manager sends several calls in one store.Enqueue, some of them
// competing for the same unique keys: every call gets its own instance or
// the key's one holder, and each stored instance runs once with its own
// arguments.
func testConcurrentSchedule(t *testing.T, e *env) {
	const producers, each, keys = 16, 25, 10
	var mu sync.Mutex
	ran := map[string]int{} // instance ID -> argument it ran with
	j := mustJob(t, job.WithKind("c"), job.WithExecutor(func(ji job.Instance, n int) {
		mu.Lock()
		ran[ji.Info().ID] = n
		mu.Unlock()
	}))
	m := e.manager(t, []*job.Job{j}, job.WithWorkers(8))
	start(t, m)
	type result struct {
		arg    int
		id     string
		key    string
		holder bool
	}
	results := make([][]result, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				arg := p*each + i
				opts := []job.ScheduleOption{job.WithArguments(arg)}
				key := ""
				if i%5 == 0 { // a fifth compete for 10 keys
					key = fmt.Sprintf("key-%d", (p+i)%keys)
					opts = append(opts, job.WithUniqueKey(key, time.Hour))
				}
				ji, err := m.ScheduleJob(context.Background(), "c", opts...)
				switch {
				case err == nil:
					results[p] = append(results[p], result{arg, ji.ID, key, true})
				case key != "" && errors.Is(err, job.ErrDuplicate) && ji != nil:
					results[p] = append(results[p], result{arg, ji.ID, key, false})
				default:
					t.Errorf("schedule %d (key %q): %v", arg, key, err)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	want := map[string]int{}       // stored instance ID -> its argument
	holders := map[string]string{} // unique key -> holder ID
	var dups []result
	for _, rs := range results {
		for _, r := range rs {
			if !r.holder {
				dups = append(dups, r)
				continue
			}
			if _, seen := want[r.id]; seen {
				t.Fatalf("two schedules returned instance %s", r.id)
			}
			want[r.id] = r.arg
			if r.key != "" {
				if h, held := holders[r.key]; held {
					t.Fatalf("key %s held by %s and %s", r.key, h, r.id)
				}
				holders[r.key] = r.id
			}
		}
	}
	if len(holders) != keys {
		t.Errorf("%d keys have a holder, want %d", len(holders), keys)
	}
	if len(want)+len(dups) != producers*each {
		t.Errorf("%d stored + %d duplicates, want %d calls", len(want), len(dups), producers*each)
	}
	for _, d := range dups {
		if holders[d.key] != d.id {
			t.Errorf("duplicate of key %s names %s, want its holder %s", d.key, d.id, holders[d.key])
		}
	}
	waitIdle(t, m, 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != len(want) {
		t.Errorf("%d instances ran, want %d", len(ran), len(want))
	}
	for id, arg := range want {
		if got, ok := ran[id]; !ok || got != arg {
			t.Errorf("instance %s ran with %d (ran: %v), want %d", id, got, ok, arg)
		}
	}
}

func testPriorityOrder(t *testing.T, e *env) {
	var mu sync.Mutex
	var order []string
	j := mustJob(t, job.WithKind("p"), job.WithExecutor(func(name string) {
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
	}))
	m := e.manager(t, []*job.Job{j}, job.WithWorkers(1), job.WithClaimBatch(1))
	ids := map[string]string{}
	ids["low"] = schedule(t, m, "p", job.WithArguments("low"), job.WithPriority(job.LowPriority)).ID
	ids["normal1"] = schedule(t, m, "p", job.WithArguments("normal1")).ID
	ids["high"] = schedule(t, m, "p", job.WithArguments("high"), job.WithPriority(job.HighPriority)).ID
	ids["normal2"] = schedule(t, m, "p", job.WithArguments("normal2")).ID
	schedule(t, m, "p", job.WithArguments("future-high"), job.WithPriority(job.HighPriority+1), job.WithScheduleAfter(time.Hour))
	start(t, m)
	waitFor(t, deadline, "four runs", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 4 })
	mu.Lock()
	defer mu.Unlock()
	want := []string{"high", "normal1", "normal2", "low"}
	if e.h.PartitionOf == nil {
		if !slices.Equal(order, want) {
			t.Errorf("ran %v, want %v", order, want)
		}
		return
	}
	// The order holds among the instances of each partition.
	in := func(names []string, part int) []string {
		var out []string
		for _, n := range names {
			if e.h.PartitionOf(t, e.ns, ids[n]) == part {
				out = append(out, n)
			}
		}
		return out
	}
	if !slices.Equal(slices.Sorted(slices.Values(order)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("ran %v, want %v in some order", order, want)
	}
	for _, n := range want {
		part := e.h.PartitionOf(t, e.ns, ids[n])
		if got, w := in(order, part), in(want, part); !slices.Equal(got, w) {
			t.Errorf("partition %d ran %v, want %v (all ran: %v)", part, got, w, order)
		}
	}
}

func testScheduleAt(t *testing.T, e *env) {
	var ranAt atomic.Int64
	j := mustJob(t, job.WithKind("at"), job.WithExecutor(func() { ranAt.Store(time.Now().UnixNano()) }))
	m := e.manager(t, []*job.Job{j})
	start(t, m)
	due := time.Now().Add(300 * time.Millisecond)
	ji := schedule(t, m, "at", job.WithScheduleAt(due))
	waitState(t, m, ji.ID, job.Completed, deadline)
	if got := time.Unix(0, ranAt.Load()); got.Before(due) {
		t.Errorf("ran at %v, before it was due at %v", got, due)
	}
}

// onceOnly is the node registry setting of the scenarios that check that
// every instance ran exactly once. The design promises that only while no
// node is declared dead: a node silent for the dead threshold has its
// attempts rescued and run again (at least once), including ones whose
// outcome it has not written yet. With the default 1 s threshold a test
// process starved of CPU (at nice 15 beside busy processes, through jobd
// under -race) went silent that long, and the check failed on a rerun the
// contract allows. A 10 s threshold keeps the premise of the check.
var onceOnly = job.WithHeartbeat(job.DefaultHeartbeatInterval, 10*time.Second)

func testClusterNoDuplicates(t *testing.T, e *env) {
	const n = 600
	var mu sync.Mutex
	runs := make(map[int]int)
	var nodes sync.Map
	mk := func(node int) *job.Job {
		return mustJob(t, job.WithKind("count"), job.WithExecutor(func(i int) {
			mu.Lock()
			runs[i]++
			mu.Unlock()
			nodes.Store(node, true)
		}))
	}
	var ms []*job.Manager
	for node := range 3 {
		m := e.manager(t, []*job.Job{mk(node)}, job.WithWorkers(4), job.WithClaimBatch(2), onceOnly)
		ms = append(ms, m)
	}
	for _, m := range ms {
		start(t, m)
	}
	for i := range n {
		schedule(t, ms[i%3], "count", job.WithArguments(i))
	}
	for _, m := range ms {
		waitIdle(t, m, 30*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != n {
		t.Errorf("%d distinct instances ran, want %d", len(runs), n)
	}
	for i, c := range runs {
		if c != 1 {
			t.Errorf("instance %d ran %d times", i, c)
		}
	}
	done, err := ms[0].LookupInstances(context.Background(), job.NewQuery(job.WithQueryState(job.Completed)))
	if err != nil || len(done) != n {
		t.Errorf("%d completed records (%v), want %d", len(done), err, n)
	}
}

func testRecurringOncePerCluster(t *testing.T, e *env) {
	const interval = job.MinInterval
	var mu sync.Mutex
	ticks := make(map[int64]int)
	mk := func() *job.Job {
		return mustJob(t, job.WithKind("tick"), job.WithInterval(interval, job.WithArguments("x")),
			job.WithExecutor(func(ji job.Instance, s string) {
				mu.Lock()
				ticks[ji.Info().RunAt.UnixNano()]++
				mu.Unlock()
			}))
	}
	var ms []*job.Manager
	for range 3 {
		ms = append(ms, e.manager(t, []*job.Job{mk()}, job.WithWorkers(2)))
	}
	for _, m := range ms {
		start(t, m)
	}
	waitFor(t, deadline, "3 ticks", func() bool { mu.Lock(); defer mu.Unlock(); return len(ticks) >= 3 })
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := m.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	for at, c := range ticks {
		if c != 1 {
			t.Errorf("tick %v ran %d times", time.Unix(0, at), c)
		}
		if at%int64(interval) != 0 {
			t.Errorf("tick %v is not on an interval boundary", time.Unix(0, at))
		}
	}
}

func testRescueAfterCrash(t *testing.T, e *env) {
	// A "crashed" manager: claim through the store with a short lease and
	// never renew or finish, as a process killed mid-run leaves things.
	j := mustJob(t, job.WithKind("r"), job.WithMaxRetries(1), job.WithExecutor(func(ji job.Instance) int { return ji.Info().Attempt }))
	m := e.manager(t, []*job.Job{j})
	retried := schedule(t, m, "r")
	// Out of retries, a crashed attempt is terminated.
	terminated := schedule(t, m, "r", job.WithMaxRetries(0))
	s := e.store(t)
	now := time.Now()
	res, err := s.Claim(context.Background(), &store.ClaimParams{Queue: job.DefaultQueue, Owner: "crashed-node", Limit: 2, Now: now, LeaseUntil: now.Add(300 * time.Millisecond)})
	if err != nil || len(res.Instances) != 2 {
		t.Fatalf("claim as the crashed node: %v, %+v", err, res)
	}
	start(t, m)
	got := waitState(t, m, retried.ID, job.Completed, deadline)
	if got.Attempt != 2 {
		t.Errorf("attempt %d, want 2: the crashed attempt counts", got.Attempt)
	}
	var n int
	if err := got.ResultsInto(&n); err != nil || n != 2 {
		t.Errorf("results %v (%v), want [2]", got.Results(), err)
	}
	if d := got.FinishedAt.Sub(now); d > 5*time.Second {
		t.Errorf("rescued and finished %v after the crash, want within lease + a few rescue intervals", d)
	}
	got = waitState(t, m, terminated.ID, job.Terminated, deadline)
	if got.Error == "" || !strings.Contains(got.Error, "lease") {
		t.Errorf("terminated with %v, want a lease-expiry error", got.Error)
	}
}

func testStopHandsBack(t *testing.T, e *env) {
	started := make(chan struct{}, 1)
	j := mustJob(t, job.WithKind("h"), job.WithExecutor(func(ctx context.Context) error {
		started <- struct{}{}
		<-ctx.Done()
		return context.Cause(ctx)
	}))
	m := e.manager(t, []*job.Job{j})
	start(t, m)
	ji := schedule(t, m, "h")
	select {
	case <-started:
	case <-time.After(deadline):
		t.Fatal("instance did not start")
	}
	// The executor returns once canceled, so the hand-back works as
	// designed and Stop reports no error.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Errorf("Stop: %v, want nil: the running attempt was handed back", err)
	}
	got, err := m.GetInstance(context.Background(), ji.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != job.Scheduled || got.Attempt != 0 {
		t.Errorf("after Stop: %v attempt %d, want Scheduled attempt 0 (handed back)", got.State, got.Attempt)
	}
	// Another manager takes it over at once.
	done := mustJob(t, job.WithKind("h"), job.WithExecutor(func() {}))
	m2 := e.manager(t, []*job.Job{done})
	start(t, m2)
	waitState(t, m2, ji.ID, job.Completed, deadline)
}

func testUndecodableArguments(t *testing.T, e *env) {
	j := mustJob(t, job.WithKind("d"), job.WithExecutor(func(n int) int { return n }))
	m := e.manager(t, []*job.Job{j}, job.WithWorkers(1))
	// Written by something else: arguments that do not fit the executor.
	s := e.store(t)
	now := time.Now()
	bad := []*store.Instance{
		{ID: "bad-json-" + e.ns, Kind: "d", Queue: job.DefaultQueue, Args: []byte(`{not json`), RunAt: now, CreatedAt: now, MaxRetries: 3},
		{ID: "bad-type-" + e.ns, Kind: "d", Queue: job.DefaultQueue, Args: []byte(`["seven"]`), RunAt: now, CreatedAt: now, MaxRetries: 3},
	}
	res, err := s.Enqueue(context.Background(), &store.EnqueueParams{Instances: bad, Node: "other", Now: now})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("Enqueue: %v %+v", err, res)
	}
	start(t, m)
	good := schedule(t, m, "d", job.WithArguments(7))
	for _, b := range bad {
		got := waitState(t, m, b.ID, job.Terminated, deadline)
		if got.Attempt != 1 || got.Error == "" || !strings.Contains(got.Error, "invalid arguments") {
			t.Errorf("%s: attempt %d error %v; want one attempt and a decode error", b.ID, got.Attempt, got.Error)
		}
	}
	waitState(t, m, good.ID, job.Completed, deadline)
}

// testMixedClusterKinds: node A runs kind x, node B kind y, on one store.
// Claims name the kinds a node runs, so neither claims the other's work:
// no instance fails as an unknown kind, and each runs on its own node.
func testMixedClusterKinds(t *testing.T, e *env) {
	const n = 200
	var mu sync.Mutex
	ranOn := map[string]string{} // kind/arg -> node that ran it
	mk := func(kind, node string) *job.Job {
		return mustJob(t, job.WithKind(kind), job.WithMaxRetries(0), job.WithExecutor(func(i int) {
			mu.Lock()
			ranOn[fmt.Sprintf("%s/%d", kind, i)] += node
			mu.Unlock()
		}))
	}
	a := e.manager(t, []*job.Job{mk("x", "A")}, job.WithWorkers(4), job.WithClaimBatch(2), onceOnly)
	b := e.manager(t, []*job.Job{mk("y", "B")}, job.WithWorkers(4), job.WithClaimBatch(2), onceOnly)
	start(t, a)
	start(t, b)
	for i := range n {
		schedule(t, a, "x", job.WithArguments(i))
		schedule(t, b, "y", job.WithArguments(i))
	}
	waitFor(t, 30*time.Second, "every instance to complete", func() bool {
		done, err := a.LookupInstances(context.Background(), job.NewQuery(job.WithQueryState(job.Completed)))
		if err != nil {
			t.Fatal(err)
		}
		return len(done) == 2*n
	})
	failed, err := a.LookupInstances(context.Background(), job.NewQuery(job.WithQueryState(job.Terminated)))
	if err != nil || len(failed) != 0 {
		t.Fatalf("%d instances failed (%v), want none: a node claimed a kind it does not run", len(failed), err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if got := ranOn[fmt.Sprintf("x/%d", i)]; got != "A" {
			t.Errorf("x/%d ran on %q, want once on A", i, got)
		}
		if got := ranOn[fmt.Sprintf("y/%d", i)]; got != "B" {
			t.Errorf("y/%d ran on %q, want once on B", i, got)
		}
	}
}

// testClaimsByLabel: instances of a job that requires a label run only on
// the nodes that have it; a kind with no requirement runs anywhere; an
// instance whose label no node has waits, Scheduled, until a node with it
// starts.
func testClaimsByLabel(t *testing.T, e *env) {
	var mu sync.Mutex
	ranOn := map[string]string{}
	mk := func(node, kind string, opts ...job.JobOption) *job.Job {
		return mustJob(t, append([]job.JobOption{job.WithKind(kind), job.WithMaxRetries(0), job.WithExecutor(func(i int) {
			mu.Lock()
			ranOn[fmt.Sprintf("%s/%d", kind, i)] += node
			mu.Unlock()
		})}, opts...)...)
	}
	gpu := e.manager(t, []*job.Job{mk("G", "render", job.WithRequiredLabels("gpu")), mk("G", "any")}, job.WithLabels("gpu", "region=eu"), job.WithWorkers(2))
	cpu := e.manager(t, []*job.Job{mk("C", "render", job.WithRequiredLabels("gpu")), mk("C", "any"), mk("C", "tpu", job.WithRequiredLabels("tpu"))}, job.WithWorkers(2))
	start(t, gpu)
	start(t, cpu)
	const n = 40
	for i := range n {
		schedule(t, cpu, "render", job.WithArguments(i))
	}
	waiting := schedule(t, cpu, "tpu", job.WithArguments(0))
	if got := waiting.Labels; !slices.Equal(got, []string{"tpu"}) {
		t.Errorf("instance labels %q, want [tpu]", got)
	}
	waitFor(t, 30*time.Second, "every render instance to complete", func() bool {
		done, err := cpu.LookupInstances(context.Background(), job.NewQuery(job.WithQueryKind("render"), job.WithQueryState(job.Completed)))
		if err != nil {
			t.Fatal(err)
		}
		return len(done) == n
	})
	mu.Lock()
	for i := range n {
		if got := ranOn[fmt.Sprintf("render/%d", i)]; got != "G" {
			t.Errorf("render/%d ran on %q, want once on the node labelled gpu", i, got)
		}
	}
	mu.Unlock()
	if ji, err := cpu.GetInstance(context.Background(), waiting.ID); err != nil || ji.State != job.Scheduled {
		t.Fatalf("instance requiring tpu: %v (%v), want scheduled: it waits for a node labelled tpu", ji, err)
	}
	tpu := e.manager(t, []*job.Job{mk("T", "tpu", job.WithRequiredLabels("tpu"))}, job.WithLabels("tpu"))
	start(t, tpu)
	waitState(t, tpu, waiting.ID, job.Completed, deadline)
	mu.Lock()
	defer mu.Unlock()
	if got := ranOn["tpu/0"]; got != "T" {
		t.Errorf("tpu/0 ran on %q, want once on the node labelled tpu", got)
	}
}

func testLogs(t *testing.T, e *env) {
	j := mustJob(t, job.WithKind("l"), job.WithExecutor(func(ji job.Instance, n int) {
		ji.Debugf("debug %d", n)
		ji.Infof("info %d", n)
		ji.Warnf("warn %d", n)
		ji.Errorf("error %d", n)
	}))
	m := e.manager(t, []*job.Job{j})
	start(t, m)
	a := schedule(t, m, "l", job.WithArguments(1))
	b := schedule(t, m, "l", job.WithArguments(2))
	waitIdle(t, m, deadline)
	logs, err := m.LookupInstanceLogs(context.Background(), job.NewQuery(job.WithQueryInstance(a)))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, l := range logs {
		msgs = append(msgs, l.Level.String()+":"+l.Message)
		if l.Attempt != 1 || l.Kind != "l" || l.Node != m.NodeID() {
			t.Errorf("log record %+v: want attempt 1, kind l, node %s", l, m.NodeID())
		}
	}
	if want := []string{"debug:debug 1", "info:info 1", "warn:warn 1", "error:error 1"}; !slices.Equal(msgs, want) {
		t.Errorf("logs of a: %v, want %v", msgs, want)
	}
	warn, err := m.LookupInstanceLogs(context.Background(), job.NewQuery(job.WithQueryKind("l"), job.WithQueryLevel(job.LogWarn, job.LogError)))
	if err != nil || len(warn) != 4 {
		t.Errorf("warn+error logs of kind l: %d (%v), want 4", len(warn), err)
	}
	one, err := m.LookupInstanceLogs(context.Background(), job.NewQuery(job.WithQueryInstance(b), job.WithQueryLimit(1)))
	if err != nil || len(one) != 1 || one[0].Message != "debug 2" {
		t.Errorf("first log of b: %+v (%v)", one, err)
	}
}

func testRetention(t *testing.T, e *env) {
	j := mustJob(t, job.WithKind("k"), job.WithExecutor(func(ji job.Instance) { ji.Infof("hello") }))
	m := e.manager(t, []*job.Job{j}, job.WithRetention(0, 3), job.WithPruneInterval(time.Hour))
	start(t, m)
	var ids []string
	for range 8 {
		ji := schedule(t, m, "k")
		ids = append(ids, ji.ID)
		waitState(t, m, ji.ID, job.Completed, deadline)
	}
	waitIdle(t, m, deadline)
	pending := schedule(t, m, "k", job.WithScheduleAfter(time.Hour))
	res, err := m.Admin().Prune(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Instances != 5 {
		t.Errorf("pruned %d instances, want 5", res.Instances)
	}
	left, err := m.LookupInstances(context.Background(), job.NewQuery(job.WithQueryKind("k")))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range left {
		got = append(got, l.ID)
	}
	want := []string{pending.ID, ids[7], ids[6], ids[5]}
	if !slices.Equal(got, want) {
		t.Errorf("kept %v, want the pending one and the newest three %v", got, want)
	}
	if h := states(t, m, ids[0]); len(h) != 0 {
		t.Errorf("history of a pruned instance survived: %v", h)
	}
	logs, _ := m.LookupInstanceLogs(context.Background(), job.NewQuery(job.WithQueryInstanceID(ids[0])))
	if len(logs) != 0 {
		t.Errorf("logs of a pruned instance survived: %d", len(logs))
	}
}

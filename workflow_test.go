package job_test

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
	"github.com/jobkit/job/store/memdbstore"
)

// wfLog records when each task started and ended, and how often each ran.
type wfLog struct {
	mu     sync.Mutex
	start  map[string]time.Time
	end    map[string]time.Time
	runs   map[string]int
	events []string
}

func newWfLog() *wfLog {
	return &wfLog{start: map[string]time.Time{}, end: map[string]time.Time{}, runs: map[string]int{}}
}

func (l *wfLog) begin(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.start[name] = time.Now()
	l.runs[name]++
	l.events = append(l.events, "start "+name)
}

func (l *wfLog) done(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.end[name] = time.Now()
	l.events = append(l.events, "end "+name)
}

// before fails unless every one of deps ended before task started.
func (l *wfLog) before(t *testing.T, task string, deps ...string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.start[task]
	if !ok {
		t.Fatalf("task %s never started; events: %v", task, l.events)
	}
	for _, d := range deps {
		e, ok := l.end[d]
		if !ok || !e.Before(s) {
			t.Fatalf("task %s started before its dependency %s ended (early release); events: %v", task, d, l.events)
		}
	}
}

func (l *wfLog) ranOnce(t *testing.T, names ...string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range names {
		if l.runs[n] != 1 {
			t.Fatalf("task %s ran %d times, want once; events: %v", n, l.runs[n], l.events)
		}
	}
}

func waitWorkflow(t *testing.T, m *job.Manager, id string, want job.WorkflowState) *job.WorkflowInfo {
	t.Helper()
	var info *job.WorkflowInfo
	waitFor(t, fmt.Sprintf("workflow %s %s", id, want), func() bool {
		var err error
		info, err = m.GetWorkflow(context.Background(), id)
		if err != nil {
			t.Fatalf("GetWorkflow: %v", err)
		}
		return info.State == want
	})
	return info
}

func wfManager(t *testing.T, st store.Store, jobs ...*job.Job) *job.Manager {
	t.Helper()
	m := newManager(t, job.WithStore(st), job.WithPollInterval(50*time.Millisecond), job.WithShardRecheck(time.Minute))
	for _, j := range jobs {
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestWorkflowDAG: a fan-out and fan-in; each task runs once, after its
// dependencies, reading their results typed.
func TestWorkflowDAG(t *testing.T) {
	t.Parallel()
	log := newWfLog()
	download := mustJob(t, job.WithKind("download"), job.WithExecutor(func(ji job.Instance, url string) (string, error) {
		log.begin(ji.Info().Task)
		defer log.done(ji.Info().Task)
		return "/tmp/" + url, nil
	}))
	resize := mustJob(t, job.WithKind("resize"), job.WithExecutor(func(ctx context.Context, ji job.Instance, width int) (string, error) {
		log.begin(ji.Info().Task)
		defer log.done(ji.Info().Task)
		var path string
		if err := job.DependencyResultsInto(ctx, ji, "download", &path); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s@%d", path, width), nil
	}))
	publish := mustJob(t, job.WithKind("publish"), job.WithExecutor(func(ctx context.Context, ji job.Instance) ([]string, error) {
		log.begin(ji.Info().Task)
		defer log.done(ji.Info().Task)
		var small, large string
		if err := job.DependencyResultsInto(ctx, ji, "small", &small); err != nil {
			return nil, err
		}
		if err := job.DependencyResultsInto(ctx, ji, "large", &large); err != nil {
			return nil, err
		}
		// Not a dependency: refused, naming the fix.
		var x string
		if err := job.DependencyResultsInto(ctx, ji, "download", &x); !errors.Is(err, job.ErrWorkflow) || !strings.Contains(err.Error(), "After(") {
			return nil, fmt.Errorf("results of a task that is not a dependency: %v, want ErrWorkflow naming After", err)
		}
		// Into the wrong type: refused.
		var n int
		if err := job.DependencyResultsInto(ctx, ji, "small", &n); !errors.Is(err, job.ErrInvalidResults) {
			return nil, fmt.Errorf("results into the wrong type: %v, want ErrInvalidResults", err)
		}
		return []string{small, large}, nil
	}))
	st := newMemdb(t)
	m := wfManager(t, st, download, resize, publish)
	ctx := context.Background()
	wf := job.NewWorkflow("images").
		Add("publish", "publish", job.After("small", "large")).
		Add("download", "download", job.WithArguments("cat.png")).
		Add("small", "resize", job.WithArguments(64), job.After("download")).
		Add("large", "resize", job.WithArguments(1024), job.After("download"))
	info, err := m.ScheduleWorkflow(ctx, wf)
	if err != nil {
		t.Fatalf("ScheduleWorkflow: %v", err)
	}
	if len(info.Tasks) != 4 || info.End == nil || info.State != job.WorkflowPending {
		t.Fatalf("ScheduleWorkflow returned %d tasks, end %v, state %s; want 4, an end, pending", len(info.Tasks), info.End, info.State)
	}
	done := waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
	log.ranOnce(t, "download", "small", "large", "publish")
	log.before(t, "small", "download")
	log.before(t, "large", "download")
	log.before(t, "publish", "small", "large")
	if done.Name != "images" || len(done.Tasks) != 4 {
		t.Fatalf("GetWorkflow: name %q, %d tasks; want images, 4", done.Name, len(done.Tasks))
	}
	var out []string
	if err := done.Task("publish").ResultsInto(&out); err != nil {
		t.Fatal(err)
	}
	if want := []string{"/tmp/cat.png@64", "/tmp/cat.png@1024"}; !slices.Equal(out, want) {
		t.Fatalf("publish's results: %v, want %v", out, want)
	}
	for _, ti := range done.Tasks {
		if ti.State != job.Completed || ti.Workflow != info.ID {
			t.Fatalf("task %s: %s in workflow %q; want completed in %s", ti.Task, ti.State, ti.Workflow, info.ID)
		}
	}
	// A repeat with the same ID stores nothing new.
	again, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("images", job.WithWorkflowID(info.ID)).
		Add("publish", "publish", job.After("small", "large")).
		Add("download", "download", job.WithArguments("cat.png")).
		Add("small", "resize", job.WithArguments(64), job.After("download")).
		Add("large", "resize", job.WithArguments(1024), job.After("download")))
	if err != nil || again.State != job.WorkflowCompleted {
		t.Fatalf("repeated ScheduleWorkflow: %v, %v; want the completed workflow", again, err)
	}
	log.ranOnce(t, "download", "small", "large", "publish")
}

// TestWorkflowFailurePolicies: a failed task cancels its dependents (the
// default), runs a DepRun one, and a DepCancelWorkflow one cancels the
// whole workflow.
func TestWorkflowFailurePolicies(t *testing.T) {
	t.Parallel()
	var ranAnyway, ranCanceled atomic.Int32
	fail := mustJob(t, job.WithKind("fail"), job.WithMaxRetries(0), job.WithExecutor(func() error { return errors.New("disk full") }))
	ok := mustJob(t, job.WithKind("ok"), job.WithExecutor(func(ji job.Instance) (string, error) {
		if ji.Info().Task == "anyway" {
			ranAnyway.Add(1)
		} else {
			ranCanceled.Add(1)
		}
		return "ok", nil
	}))
	slow := mustJob(t, job.WithKind("slow"), job.WithExecutor(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}))
	m := wfManager(t, newMemdb(t), fail, ok, slow)
	ctx := context.Background()

	info, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("policies").
		Add("a", "fail").
		Add("b", "ok", job.After("a")).
		Add("c", "ok", job.After("b")).
		Add("anyway", "ok", job.After("a"), job.WithDepFailure(job.DepRun)))
	if err != nil {
		t.Fatal(err)
	}
	done := waitWorkflow(t, m, info.ID, job.WorkflowFailed)
	if b := done.Task("b"); b.State != job.Canceled || !strings.Contains(b.Error, `task "a"`) || !strings.Contains(b.Error, "disk full") {
		t.Fatalf("b: %s %q; want canceled naming task \"a\" and its error", b.State, b.Error)
	}
	if c := done.Task("c"); c.State != job.Canceled || !strings.Contains(c.Error, `task "b"`) {
		t.Fatalf("c: %s %q; want canceled naming task \"b\"", c.State, c.Error)
	}
	if a := done.Task("anyway"); a.State != job.Completed || ranAnyway.Load() != 1 {
		t.Fatalf("anyway: %s, ran %d times; want completed once", a.State, ranAnyway.Load())
	}
	if ranCanceled.Load() != 0 {
		t.Fatalf("a canceled dependent ran %d times", ranCanceled.Load())
	}
	if !strings.Contains(done.End.Error, `task "c"`) {
		t.Fatalf("the workflow's end: %q, want it to name the failed tasks", done.End.Error)
	}

	// DepCancelWorkflow: the slow task, unrelated, is canceled too.
	info, err = m.ScheduleWorkflow(ctx, job.NewWorkflow("cancel-all").
		Add("a", "fail").
		Add("b", "ok", job.After("a"), job.WithDepFailure(job.DepCancelWorkflow)).
		Add("x", "slow"))
	if err != nil {
		t.Fatal(err)
	}
	done = waitWorkflow(t, m, info.ID, job.WorkflowCanceled)
	waitFor(t, "x canceled", func() bool {
		w, err := m.GetWorkflow(ctx, info.ID)
		return err == nil && w.Task("x").State == job.Canceled
	})
	if b := done.Task("b"); b.State != job.Canceled && b.State != job.Processing {
		t.Fatalf("b: %s, want canceled", b.State)
	}
}

// TestWorkflowDynamicFanOut: a task adds one task per item it found; its
// dependent waits for all of them and reads their results in order.
func TestWorkflowDynamicFanOut(t *testing.T) {
	t.Parallel()
	log := newWfLog()
	scan := mustJob(t, job.WithKind("scan"), job.WithExecutor(func(ctx context.Context, ji job.Instance) (int, error) {
		log.begin("scan")
		defer log.done("scan")
		var tasks []*job.TaskSpec
		for i := range 6 {
			tasks = append(tasks, job.NewTask(fmt.Sprint("file-", i), "measure", job.WithArguments(i)))
		}
		if err := job.AddTasks(ctx, ji, tasks...); err != nil {
			return 0, err
		}
		if err := job.AddTasks(ctx, ji, job.NewTask("again", "measure", job.WithArguments(9))); !errors.Is(err, job.ErrWorkflow) {
			return 0, fmt.Errorf("a second AddTasks: %v, want ErrWorkflow", err)
		}
		return len(tasks), nil
	}))
	measure := mustJob(t, job.WithKind("measure"), job.WithExecutor(func(ji job.Instance, i int) (int, error) {
		log.begin(ji.Info().Task)
		defer log.done(ji.Info().Task)
		time.Sleep(time.Duration(6-i) * 5 * time.Millisecond) // end out of order
		return i * 10, nil
	}))
	var got []int
	sum := mustJob(t, job.WithKind("sum"), job.WithExecutor(func(ctx context.Context, ji job.Instance) (int, error) {
		log.begin("sum")
		defer log.done("sum")
		var n int
		if err := job.DependencyResultsInto(ctx, ji, "scan", &n); err != nil {
			return 0, err
		}
		if err := job.AddedResultsInto(ctx, ji, "scan", &got); err != nil {
			return 0, err
		}
		total := 0
		for _, v := range got {
			total += v
		}
		return total, nil
	}))
	m := wfManager(t, newMemdb(t), scan, measure, sum)
	info, err := m.ScheduleWorkflow(context.Background(), job.NewWorkflow("fan").
		Add("scan", "scan").
		Add("sum", "sum", job.After("scan")))
	if err != nil {
		t.Fatal(err)
	}
	done := waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
	if want := []int{0, 10, 20, 30, 40, 50}; !slices.Equal(got, want) {
		t.Fatalf("sum read %v, want %v in the order added", got, want)
	}
	var files []string
	for i := range 6 {
		files = append(files, fmt.Sprintf("scan/file-%d", i))
	}
	log.ranOnce(t, append(files, "scan", "sum")...)
	log.before(t, "sum", append(files, "scan")...)
	if len(done.Tasks) != 8 || done.Task("scan/file-3") == nil {
		t.Fatalf("GetWorkflow: %d tasks (want 8, the added ones included)", len(done.Tasks))
	}
}

// TestWorkflowBadInput: each mistake is refused before anything is
// stored, with an error naming the task and the fix.
func TestWorkflowBadInput(t *testing.T) {
	t.Parallel()
	noop := mustJob(t, job.WithKind("noop"), job.WithExecutor(func() error { return nil }))
	add := mustJob(t, job.WithKind("add"), job.WithExecutor(func(a, b int) int { return a + b }))
	st := newMemdb(t)
	m := wfManager(t, st, noop, add)
	ctx := context.Background()
	big := job.NewWorkflow("big")
	for i := range job.MaxWorkflowTasks + 1 {
		big.Add(fmt.Sprint("t", i), "noop")
	}
	cases := []struct {
		name string
		wf   *job.Workflow
		want []string
		is   error
	}{
		{"cycle", job.NewWorkflow("w").Add("a", "noop", job.After("c")).Add("b", "noop", job.After("a")).Add("c", "noop", job.After("b")),
			[]string{"cycle", "a -> b -> c -> a", "remove one"}, job.ErrWorkflow},
		{"self", job.NewWorkflow("w").Add("a", "noop", job.After("a")), []string{`"a" depends on itself`}, job.ErrWorkflow},
		{"unknown dep", job.NewWorkflow("w").Add("a", "noop", job.After("nope")), []string{`task "a" depends on "nope"`, "Add it"}, job.ErrWorkflow},
		{"duplicate", job.NewWorkflow("w").Add("a", "noop").Add("a", "noop"), []string{`two tasks are named "a"`}, job.ErrWorkflow},
		{"unknown kind", job.NewWorkflow("w").Add("a", "noop").Add("b", "nokind"), []string{`task "b"`, "nokind"}, job.ErrUnknownKind},
		{"bad args", job.NewWorkflow("w").Add("a", "add", job.WithArguments("x", 1)), []string{`task "a"`}, job.ErrInvalidArguments},
		{"dollar", job.NewWorkflow("w").Add("a$b", "noop"), []string{"'$'"}, job.ErrWorkflow},
		{"empty", job.NewWorkflow("w"), []string{"no tasks"}, job.ErrWorkflow},
		{"too many", big, []string{"100001 tasks", "MaxWorkflowTasks"}, job.ErrWorkflow},
		{"shards", job.NewWorkflow("w").Add("a", "noop", job.WithShards(2)), []string{`task "a"`, "WithShards"}, job.ErrInvalidOption},
		{"run time on a dependent", job.NewWorkflow("w").Add("a", "noop").Add("b", "noop", job.After("a"), job.WithScheduleAfter(time.Hour)),
			[]string{`task "b"`, "run time"}, job.ErrInvalidOption},
		{"bad policy", job.NewWorkflow("w", job.WithDepFailure(7)).Add("a", "noop"), []string{"WithDepFailure(7)"}, job.ErrInvalidOption},
	}
	for _, tc := range cases {
		_, err := m.ScheduleWorkflow(ctx, tc.wf)
		if err == nil || !errors.Is(err, tc.is) {
			t.Fatalf("%s: ScheduleWorkflow: %v, want an error wrapping %v", tc.name, err, tc.is)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
	all, err := m.LookupInstances(ctx, job.NewQuery())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Fatalf("refused workflows stored %d instances", len(all))
	}
	if _, err := m.ScheduleJob(ctx, "noop", job.After("x")); !errors.Is(err, job.ErrInvalidOption) || !strings.Contains(err.Error(), "ScheduleWorkflow") {
		t.Fatalf("ScheduleJob with After: %v, want ErrInvalidOption naming ScheduleWorkflow", err)
	}
	if _, err := m.GetWorkflow(ctx, "no-such"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("GetWorkflow(unknown): %v, want ErrNotFound", err)
	}
	if err := job.AddTasks(ctx, nil); !errors.Is(err, job.ErrWorkflow) {
		t.Fatalf("AddTasks outside a workflow task: %v, want ErrWorkflow", err)
	}
}

// TestWorkflowCancel: canceling a workflow cancels its pending and
// running tasks, and its state is canceled.
func TestWorkflowCancel(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	slow := mustJob(t, job.WithKind("slow"), job.WithExecutor(func(ctx context.Context) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}))
	noop := mustJob(t, job.WithKind("noop"), job.WithExecutor(func() error { return nil }))
	m := wfManager(t, newMemdb(t), slow, noop)
	ctx := context.Background()
	info, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("c").Add("slow", "slow").Add("after", "noop", job.After("slow")))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := m.CancelWorkflow(ctx, info.ID); err != nil {
		t.Fatalf("CancelWorkflow: %v", err)
	}
	waitFor(t, "every task canceled", func() bool {
		w, err := m.GetWorkflow(ctx, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		return w.State == job.WorkflowCanceled && w.Task("slow").State == job.Canceled && w.Task("after").State == job.Canceled
	})
}

// TestWorkflowFanInManyManagers: a join of many parents, run by several
// managers on one store, is released once and never early.
func TestWorkflowFanInManyManagers(t *testing.T) {
	t.Parallel()
	const parents = 60
	log := newWfLog()
	var joinRuns atomic.Int32
	work := mustJob(t, job.WithKind("work"), job.WithExecutor(func(ji job.Instance, i int) int {
		log.begin(ji.Info().Task)
		log.done(ji.Info().Task)
		return i
	}))
	join := mustJob(t, job.WithKind("join"), job.WithExecutor(func(ji job.Instance) int {
		joinRuns.Add(1)
		log.begin("join")
		return len(ji.Info().DependsOn)
	}))
	st := newMemdb(t)
	var ms []*job.Manager
	for range 3 {
		ms = append(ms, wfManager(t, st, mustJob(t, job.WithKind("work"), job.WithExecutor(func(ji job.Instance, i int) int {
			log.begin(ji.Info().Task)
			log.done(ji.Info().Task)
			return i
		})), mustJob(t, job.WithKind("join"), job.WithExecutor(func(ji job.Instance) int {
			joinRuns.Add(1)
			log.begin("join")
			return len(ji.Info().DependsOn)
		}))))
	}
	_, _ = work, join
	wf := job.NewWorkflow("fan-in")
	var names []string
	for i := range parents {
		n := fmt.Sprint("p", i)
		names = append(names, n)
		wf.Add(n, "work", job.WithArguments(i))
	}
	wf.Add("join", "join", job.After(names...))
	info, err := ms[1].ScheduleWorkflow(context.Background(), wf)
	if err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, ms[0], info.ID, job.WorkflowCompleted)
	if n := joinRuns.Load(); n != 1 {
		t.Fatalf("the join ran %d times, want once", n)
	}
	log.ranOnce(t, names...)
	log.before(t, "join", names...)
}

// dropWakes is a memdb store whose Wake fails: the release is lost, as
// when a manager dies between a task's end and the wake-up.
type dropWakes struct {
	*memdbstore.Store
	dropped atomic.Int32
}

func (s *dropWakes) Wake(ctx context.Context, p *store.WakeParams) error {
	s.dropped.Add(1)
	return errors.New("wake lost (test)")
}

// TestWorkflowLostWakeRecheck: with every wake-up lost, dependents still
// run, after the recheck interval.
func TestWorkflowLostWakeRecheck(t *testing.T) {
	t.Parallel()
	st := &dropWakes{Store: newMemdb(t)}
	noop := mustJob(t, job.WithKind("noop"), job.WithExecutor(func() error { return nil }))
	m := newManager(t, job.WithStore(st), job.WithPollInterval(20*time.Millisecond), job.WithShardRecheck(200*time.Millisecond))
	if err := m.RegisterJob(noop); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, err := m.ScheduleWorkflow(context.Background(), job.NewWorkflow("lost").Add("a", "noop").Add("b", "noop", job.After("a")))
	if err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
	if st.dropped.Load() == 0 {
		t.Fatal("no wake-up was attempted (and lost); the test proves nothing")
	}
}

// TestWorkflowRetryRearms: retrying a failed task re-arms the dependents
// its failure canceled, and the workflow completes.
func TestWorkflowRetryRearms(t *testing.T) {
	t.Parallel()
	var tries atomic.Int32
	flaky := mustJob(t, job.WithKind("flaky"), job.WithMaxRetries(0), job.WithExecutor(func() error {
		if tries.Add(1) == 1 {
			return errors.New("first try fails")
		}
		return nil
	}))
	var ran atomic.Int32
	ok := mustJob(t, job.WithKind("ok"), job.WithExecutor(func() { ran.Add(1) }))
	m := wfManager(t, newMemdb(t), flaky, ok)
	ctx := context.Background()
	info, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("retry").Add("a", "flaky").Add("b", "ok", job.After("a")).Add("c", "ok", job.After("b")))
	if err != nil {
		t.Fatal(err)
	}
	failed := waitWorkflow(t, m, info.ID, job.WorkflowFailed)
	if ran.Load() != 0 {
		t.Fatalf("dependents of a failed task ran %d times", ran.Load())
	}
	if _, err := m.RetryInstance(ctx, failed.Task("a").ID); err != nil {
		t.Fatalf("RetryInstance(a): %v", err)
	}
	done := waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
	if ran.Load() != 2 || done.Task("c").State != job.Completed {
		t.Fatalf("after the retry: dependents ran %d times (want 2), c %s", ran.Load(), done.Task("c").State)
	}
}

// slowRearm holds a Retry of several instances (the re-arm of a retried
// task's dependents) until the instance first has completed, so the
// retried task ends before its dependents wait for it again.
type slowRearm struct {
	store.Store
	first atomic.Value // string: the retried task's ID
}

func (s *slowRearm) Retry(ctx context.Context, p *store.RetryParams) ([]store.AdminResult, error) {
	if id, _ := s.first.Load().(string); id != "" && !slices.Contains(p.IDs, id) {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			got, err := s.Store.LookupInstances(ctx, &store.Query{IDs: []string{id}, Limit: 1})
			if err == nil && len(got) == 1 && got[0].State == store.Completed {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return s.Store.Retry(ctx, p)
}

// TestWorkflowRetryRearmsAfterTheTaskEnded: the retried task runs and
// ends before its dependents are re-armed; they still run at once, not
// after the recheck interval (a minute here).
func TestWorkflowRetryRearmsAfterTheTaskEnded(t *testing.T) {
	t.Parallel()
	var tries atomic.Int32
	flaky := mustJob(t, job.WithKind("flaky"), job.WithMaxRetries(0), job.WithExecutor(func() error {
		if tries.Add(1) == 1 {
			return errors.New("first try fails")
		}
		return nil
	}))
	ok := mustJob(t, job.WithKind("ok"), job.WithExecutor(func() {}))
	st := &slowRearm{Store: newMemdb(t)}
	m := wfManager(t, st, flaky, ok)
	ctx := context.Background()
	info, err := m.ScheduleWorkflow(ctx, job.NewWorkflow("late").Add("a", "flaky").Add("b", "ok", job.After("a")))
	if err != nil {
		t.Fatal(err)
	}
	failed := waitWorkflow(t, m, info.ID, job.WorkflowFailed)
	a := failed.Task("a").ID
	st.first.Store(a)
	if _, err := m.RetryInstance(ctx, a); err != nil {
		t.Fatalf("RetryInstance(a): %v", err)
	}
	waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
}

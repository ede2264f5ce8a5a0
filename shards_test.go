package job_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/fakeclock"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// shardEnv is a memdb store shared by the managers of one sharding test.
type shardEnv struct {
	t  *testing.T
	st *memdbstore.Store
}

func newShardEnv(t *testing.T, opts ...memdbstore.Option) *shardEnv {
	t.Helper()
	st, err := memdbstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &shardEnv{t: t, st: st}
}

// manager starts a manager on the env's store running jobs; opts come
// after the env's own (a store of their own included).
func (e *shardEnv) manager(jobs []*job.Job, opts ...job.ManagerOption) *job.Manager {
	e.t.Helper()
	m := newManager(e.t, append([]job.ManagerOption{job.WithStore(e.st), job.WithPollInterval(50 * time.Millisecond)}, opts...)...)
	for _, j := range jobs {
		if err := m.RegisterJob(j); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := m.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// lookup returns the stored instance id.
func lookup(t *testing.T, m *job.Manager, id string) *job.InstanceInfo {
	t.Helper()
	got, err := m.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatalf("GetInstance(%s): %v", id, err)
	}
	return got
}

// shardsOf returns the shards of parent by index.
func shardsOf(t *testing.T, m *job.Manager, parent string, n int) []*job.InstanceInfo {
	t.Helper()
	got, err := m.LookupInstances(context.Background(), job.NewQuery(job.WithQueryParent(parent)))
	if err != nil {
		t.Fatalf("LookupInstances(parent %s): %v", parent, err)
	}
	if len(got) != n {
		t.Fatalf("LookupInstances(parent %s): %d shards, want %d", parent, len(got), n)
	}
	out := make([]*job.InstanceInfo, n)
	for _, s := range got {
		i, count := s.ShardIndex, s.ShardCount
		if count != n || i < 0 || i >= n || out[i] != nil || s.Parent != parent {
			t.Fatalf("shard %s: Shard() = (%d, %d), Parent() = %q; want a distinct index of %d under %s", s.ID, i, count, s.Parent, n, parent)
		}
		out[i] = s
	}
	return out
}

func waitState(t *testing.T, m *job.Manager, id string, want job.State) *job.InstanceInfo {
	t.Helper()
	var got *job.InstanceInfo
	waitFor(t, fmt.Sprintf("instance %s %v", id, want), func() bool {
		got = lookup(t, m, id)
		return got.State == want
	})
	return got
}

// TestShardsComplete: four shards each learn their index and count, run,
// and the parent completes with their results in shard order, woken by the
// last shard's end (its recheck is an hour away).
func TestShardsComplete(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	var mu sync.Mutex
	var parentResults [][]any
	j := mustJob(t, job.WithKind("sq"),
		job.WithExecutor(func(ctx context.Context, ji job.Instance, base int) (int, string, error) {
			i, n := ji.Info().ShardIndex, ji.Info().ShardCount
			return base*100 + i*10 + n, ji.Info().Parent, nil
		}),
		job.WithCompleteProcessor(func(ji job.Instance, res []any) {
			if ji.Info().Parent == "" {
				mu.Lock()
				parentResults = append(parentResults, res)
				mu.Unlock()
			}
		}))
	m := e.manager([]*job.Job{j}, job.WithShardRecheck(time.Hour))
	ctx := context.Background()
	p, err := m.ScheduleJob(ctx, "sq", job.WithArguments(7), job.WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	if i, n := p.ShardIndex, p.ShardCount; i != 0 || n != 4 || p.Parent != "" {
		t.Fatalf("parent: Shard() = (%d, %d), Parent() = %q; want (0, 4) and none", i, n, p.Parent)
	}
	got := waitState(t, m, p.ID, job.Completed)
	want := make([][]any, 4)
	for i := range 4 {
		var v int
		var parent string
		rs := got.Results()
		if len(rs) != 4 {
			t.Fatalf("parent results %v, want 4 (one per shard)", rs)
		}
		shard, ok := rs[i].([]any)
		if !ok || len(shard) != 2 {
			t.Fatalf("parent result %d = %#v, want the shard's two results", i, rs[i])
		}
		if _, err := fmt.Sscan(fmt.Sprint(shard[0]), &v); err != nil || v != 700+i*10+4 {
			t.Fatalf("shard %d's result %v, want %d", i, shard[0], 700+i*10+4)
		}
		if parent, _ = shard[1].(string); parent != p.ID {
			t.Fatalf("shard %d saw Parent() %q, want %s", i, parent, p.ID)
		}
		want[i] = []any{700 + i*10 + 4, p.ID}
	}
	var typed [4][]any
	if err := got.ResultsInto(&typed[0], &typed[1], &typed[2], &typed[3]); err != nil {
		t.Fatalf("ResultsInto one slice per shard: %v", err)
	}
	if got.Attempt != 1 {
		t.Errorf("parent attempt %d, want 1: waiting must not count attempts", got.Attempt)
	}
	for i, s := range shardsOf(t, m, p.ID, 4) {
		if s.State != job.Completed || s.Attempt != 1 {
			t.Errorf("shard %d: %v attempt %d, want completed at attempt 1", i, s.State, s.Attempt)
		}
	}
	waitFor(t, "the parent's complete handler", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(parentResults) == 1
	})
	mu.Lock()
	res := parentResults[0]
	mu.Unlock()
	if len(res) != 4 {
		t.Fatalf("complete handler of the parent got %v, want 4 results", res)
	}
	for i, r := range res {
		s, ok := r.([]any)
		if !ok || len(s) != 2 || fmt.Sprint(s[0]) != fmt.Sprint(want[i][0]) {
			t.Fatalf("complete handler result %d = %#v, want %v", i, r, want[i])
		}
	}
}

// TestShardFailsParent: a shard that runs out of retries fails the parent
// at once, naming it; the shards still running are canceled.
func TestShardFailsParent(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	var runs [4]atomic.Int32
	j := mustJob(t, job.WithKind("f"), job.WithMaxRetries(1), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
		job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
			i, _ := ji.Info().ShardIndex, ji.Info().ShardCount
			runs[i].Add(1)
			switch i {
			case 2:
				return errors.New("shard two breaks")
			case 3:
				<-ctx.Done() // runs until canceled
				return context.Cause(ctx)
			}
			return nil
		}))
	m := e.manager([]*job.Job{j}, job.WithWorkers(4), job.WithShardRecheck(time.Hour))
	p, err := m.ScheduleJob(context.Background(), "f", job.WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	got := waitState(t, m, p.ID, job.Terminated)
	msg := got.Error
	if !strings.Contains(msg, "shard 2 ") || !strings.Contains(msg, "shard two breaks") || !strings.Contains(msg, job.ErrShardFailed.Error()) ||
		strings.Contains(msg, "shard 0 ") || strings.Contains(msg, "shard 1 ") {
		t.Fatalf("parent error %q, want it to name shard 2 (and its error) only", msg)
	}
	waitFor(t, "shard 3 canceled, every shard final", func() bool {
		sh := shardsOf(t, m, p.ID, 4)
		return sh[3].State == job.Canceled && sh[0].State.Final() && sh[1].State.Final()
	})
	shards := shardsOf(t, m, p.ID, 4)
	if s := shards[2]; s.State != job.Terminated || s.Attempt != 2 || runs[2].Load() != 2 {
		t.Errorf("shard 2: %v at attempt %d after %d runs, want terminated after 2 (its own retry)", s.State, s.Attempt, runs[2].Load())
	}
	for _, i := range []int{0, 1} {
		// Completed, unless shard 2 failed for good before it ran.
		if s := shards[i]; s.State != job.Completed && s.State != job.Canceled {
			t.Errorf("shard %d: %v, want completed (or canceled, had it not run when shard 2 failed)", i, s.State)
		}
	}
}

// TestShardRetriedOnItsOwn: a shard whose first attempt fails is retried
// alone; the others run once, and the parent completes.
func TestShardRetriedOnItsOwn(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	var runs [3]atomic.Int32
	j := mustJob(t, job.WithKind("r"), job.WithMaxRetries(2), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
		job.WithExecutor(func(ji job.Instance) (int, error) {
			i, _ := ji.Info().ShardIndex, ji.Info().ShardCount
			if runs[i].Add(1) == 1 && i == 1 {
				return 0, errors.New("first try of shard 1 fails")
			}
			return i, nil
		}))
	m := e.manager([]*job.Job{j}, job.WithShardRecheck(time.Hour))
	p, err := m.ScheduleJob(context.Background(), "r", job.WithShards(3))
	if err != nil {
		t.Fatal(err)
	}
	got := waitState(t, m, p.ID, job.Completed)
	var r0, r1, r2 []int
	if err := got.ResultsInto(&r0, &r1, &r2); err != nil || !slices.Equal(r0, []int{0}) || !slices.Equal(r1, []int{1}) || !slices.Equal(r2, []int{2}) {
		t.Fatalf("parent results %v %v %v (%v), want [0] [1] [2]", r0, r1, r2, err)
	}
	for i, s := range shardsOf(t, m, p.ID, 3) {
		want := 1
		if i == 1 {
			want = 2
		}
		if s.Attempt != want || runs[i].Load() != int32(want) {
			t.Errorf("shard %d: attempt %d after %d runs, want %d", i, s.Attempt, runs[i].Load(), want)
		}
	}
}

// TestShardsCancelParent: canceling the parent cancels its running and
// pending shards.
func TestShardsCancelParent(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	var started, stopped atomic.Int32
	j := mustJob(t, job.WithKind("c"), job.WithExecutor(func(ctx context.Context) error {
		started.Add(1)
		<-ctx.Done()
		stopped.Add(1)
		return context.Cause(ctx)
	}))
	m := e.manager([]*job.Job{j}, job.WithWorkers(2), job.WithShardRecheck(time.Hour))
	p, err := m.ScheduleJob(context.Background(), "c", job.WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two shards running", func() bool { return started.Load() == 2 })
	got, err := m.CancelInstance(context.Background(), p.ID)
	if err != nil || got.State != job.Canceled {
		t.Fatalf("CancelInstance(parent): %v, %v; want canceled", got, err)
	}
	waitFor(t, "every shard canceled", func() bool {
		for _, s := range shardsOf(t, m, p.ID, 4) {
			if s.State != job.Canceled {
				return false
			}
		}
		return true
	})
	if started.Load() != 2 || stopped.Load() != 2 {
		t.Errorf("%d shards started and %d stopped, want the 2 running ones stopped and no other started", started.Load(), stopped.Load())
	}
	if got := lookup(t, m, p.ID); got.State != job.Canceled {
		t.Errorf("parent %v, want canceled", got.State)
	}
}

// wakeLost is a store whose Wake is lost, as when the manager that ended
// a task's last shard dies before it wakes the parent.
type wakeLost struct {
	store.Store
	lost atomic.Int32
}

func (s *wakeLost) Wake(context.Context, *store.WakeParams) error {
	s.lost.Add(1)
	return errors.New("wake lost: the manager died")
}

// TestShardsRecheckAfterLostWake: the manager that ends the last shard
// dies before it wakes the parent; a fresh manager completes the parent
// at its recheck.
func TestShardsRecheckAfterLostWake(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC))
	e := newShardEnv(t, memdbstore.WithClock(clk.Now)) // the store judges liveness on the same clock
	quiet := job.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	newJob := func() *job.Job {
		return mustJob(t, job.WithKind("w"), job.WithExecutor(func(ji job.Instance) int { i, _ := ji.Info().ShardIndex, ji.Info().ShardCount; return i }))
	}
	lossy := &wakeLost{Store: e.st}
	a := e.manager([]*job.Job{newJob()}, job.WithStore(lossy), job.WithClock(clk), job.WithShardRecheck(time.Minute), quiet)
	ctx := context.Background()
	p, err := a.ScheduleJob(ctx, "w", job.WithShards(2))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both shards completed", func() bool {
		for _, s := range shardsOf(t, a, p.ID, 2) {
			if s.State != job.Completed {
				return false
			}
		}
		return true
	})
	waitFor(t, "the wake-up lost", func() bool { return lossy.lost.Load() > 0 })
	if got := lookup(t, a, p.ID); got.State != job.Scheduled || !got.RunAt.Equal(p.CreatedAt.Add(time.Minute)) {
		t.Fatalf("parent %v due %v, want still waiting for its recheck at %v", got.State, got.RunAt, p.CreatedAt.Add(time.Minute))
	}
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.Stop(stop); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	b := e.manager([]*job.Job{newJob()}, job.WithClock(clk), job.WithShardRecheck(time.Minute), quiet)
	waitFor(t, "b's claim loop asleep until the recheck", func() bool { return clk.Timers() > 0 })
	if got := lookup(t, b, p.ID); got.State != job.Scheduled {
		t.Fatalf("parent %v before its recheck, want scheduled", got.State)
	}
	clk.Advance(time.Minute)
	got := waitState(t, b, p.ID, job.Completed)
	var r0, r1 []int
	if err := got.ResultsInto(&r0, &r1); err != nil || !slices.Equal(r0, []int{0}) || !slices.Equal(r1, []int{1}) {
		t.Fatalf("parent results %v %v (%v), want [0] [1]", r0, r1, err)
	}
}

// TestShardsBadInput: shard counts out of range, shards with a unique
// key, WithShards where it does not apply.
func TestShardsBadInput(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	j := mustJob(t, job.WithKind("b"), job.WithExecutor(func() {}))
	m := e.manager([]*job.Job{j}, job.WithWorkers(0))
	ctx := context.Background()
	for _, n := range []int{0, -1, store.MaxShards + 1} {
		if _, err := m.ScheduleJob(ctx, "b", job.WithShards(n)); !errors.Is(err, job.ErrInvalidOption) || !strings.Contains(err.Error(), "MaxShards") {
			t.Errorf("WithShards(%d): %v, want ErrInvalidOption naming the limit", n, err)
		}
	}
	// A unique key is the task's: held by the parent, none by the shards.
	p, err := m.ScheduleJob(ctx, "b", job.WithShards(3), job.WithUniqueKey("nightly", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if p.UniqueKey != "nightly" {
		t.Errorf("parent unique key %q, want nightly", p.UniqueKey)
	}
	for i, s := range shardsOf(t, m, p.ID, 3) {
		if s.UniqueKey != "" {
			t.Errorf("shard %d holds unique key %q, want none", i, s.UniqueKey)
		}
	}
	dup, err := m.ScheduleJob(ctx, "b", job.WithShards(3), job.WithUniqueKey("nightly", time.Hour))
	if !errors.Is(err, job.ErrDuplicate) || dup == nil || dup.ID != p.ID {
		t.Fatalf("second task with the key: %v, %v; want ErrDuplicate and the first parent", dup, err)
	}
	all, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("b")))
	if err != nil || len(all) != 4 {
		t.Fatalf("instances of b: %d (%v), want the parent and its 3 shards only", len(all), err)
	}
	// An idempotency key's repeat returns the task stored first.
	q, err := m.ScheduleJob(ctx, "b", job.WithShards(2), job.WithIdempotencyKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	q2, err := m.ScheduleJob(ctx, "b", job.WithShards(2), job.WithIdempotencyKey("k1"))
	if err != nil || q2.ID != q.ID {
		t.Fatalf("repeat with the idempotency key: %v, %v; want the first task", q2, err)
	}
	shardsOf(t, m, q.ID, 2)
	// Not in a batch, not on a recurring job.
	res, err := m.ScheduleJobs(ctx, job.BatchItem{Kind: "b", Options: []job.ScheduleOption{job.WithShards(2)}})
	if err != nil || len(res) != 1 || !errors.Is(res[0].Err, job.ErrInvalidOption) {
		t.Errorf("ScheduleJobs with WithShards: %v, %v; want the item refused with ErrInvalidOption", res, err)
	}
	if _, err := job.NewJob(job.WithKind("rec"), job.WithExecutor(func() {}), job.WithInterval(time.Minute, job.WithShards(2))); !errors.Is(err, job.ErrInvalidJob) {
		t.Errorf("recurring job with WithShards: %v, want ErrInvalidJob", err)
	}
	if _, err := job.NewManager(job.WithShardRecheck(0)); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("WithShardRecheck(0): %v, want ErrInvalidOption", err)
	}
}

// TestShardsRequiredLabels: the shards of a kind with required labels run
// only on managers with the labels; the parent completes there too.
func TestShardsRequiredLabels(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	var mu sync.Mutex
	ranOn := map[string]int{}
	newJob := func(node string) *job.Job {
		return mustJob(t, job.WithKind("gpu-work"), job.WithRequiredLabels("gpu"), job.WithExecutor(func() {
			mu.Lock()
			ranOn[node]++
			mu.Unlock()
		}))
	}
	e.manager([]*job.Job{newJob("plain")}, job.WithNodeID("plain"))
	gpu := e.manager([]*job.Job{newJob("gpu")}, job.WithNodeID("gpu"), job.WithLabels("gpu"), job.WithShardRecheck(time.Hour))
	p, err := gpu.ScheduleJob(context.Background(), "gpu-work", job.WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Labels, []string{"gpu"}) {
		t.Errorf("parent labels %q, want [gpu]", p.Labels)
	}
	waitState(t, gpu, p.ID, job.Completed)
	for i, s := range shardsOf(t, gpu, p.ID, 4) {
		if !slices.Equal(s.Labels, []string{"gpu"}) {
			t.Errorf("shard %d labels %q, want [gpu]", i, s.Labels)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if ranOn["plain"] != 0 || ranOn["gpu"] != 4 {
		t.Errorf("shards ran %v, want all 4 on gpu", ranOn)
	}
}

// gatedClaims holds a manager's claims until the test lets them through:
// allow claims that take something pass (negative: all), the others wait.
type gatedClaims struct {
	store.Store
	mu      sync.Mutex
	allow   int
	changed chan struct{}
}

func newGatedClaims(s store.Store) *gatedClaims {
	return &gatedClaims{Store: s, changed: make(chan struct{})}
}

func (g *gatedClaims) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	for {
		g.mu.Lock()
		if g.allow != 0 {
			res, err := g.Store.Claim(ctx, p) // one claim loop: none runs meanwhile
			if g.allow > 0 && err == nil && len(res.Instances) > 0 {
				g.allow--
			}
			g.mu.Unlock()
			return res, err
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (g *gatedClaims) set(n int) {
	g.mu.Lock()
	g.allow = n
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// handedBack reports whether the history of instance id records a
// hand-back that spread it over nodes.
func handedBack(t *testing.T, m *job.Manager, id string) bool {
	t.Helper()
	hist, err := m.LookupInstanceHistory(context.Background(), job.NewQuery(job.WithQueryInstanceID(id)))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hist {
		if h.State == job.Scheduled && strings.Contains(h.Error, "spreading the shards") {
			return true
		}
	}
	return false
}

// TestShardsSpread: a manager that claimed both shards of a task while
// another node had a free worker runs one and hands the other back
// (attempt not counted), and the other node runs it. The claims are
// gated so the test decides who claims when; the decision to hand back is
// the manager's own, from the node registry.
func TestShardsSpread(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	var mu sync.Mutex
	ranOn := map[string][]int{}
	release := make(chan struct{})
	newJob := func(node string) *job.Job {
		return mustJob(t, job.WithKind("spread"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
			i, _ := ji.Info().ShardIndex, ji.Info().ShardCount
			mu.Lock()
			ranOn[node] = append(ranOn[node], i)
			mu.Unlock()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
	}
	gA, gB := newGatedClaims(e.st), newGatedClaims(e.st)
	b := e.manager([]*job.Job{newJob("b")}, job.WithStore(gB), job.WithNodeID("b"), job.WithShardRecheck(time.Hour))
	a := e.manager([]*job.Job{newJob("a")}, job.WithStore(gA), job.WithNodeID("a"), job.WithShardRecheck(time.Hour))
	t.Cleanup(func() { gA.set(-1); gB.set(-1) }) // before the managers stop
	_ = b
	waitFor(t, "a sees b live in the registry", func() bool {
		nodes, err := a.Admin().ListNodes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(nodes, func(n *store.NodeInfo) bool { return n.ID == "b" && n.Status == store.NodeLive })
	})
	p, err := a.ScheduleJob(context.Background(), "spread", job.WithShards(2))
	if err != nil {
		t.Fatal(err)
	}
	gA.set(1) // a claims both shards in one claim
	var back string
	waitFor(t, "a runs one shard and hands the other back", func() bool {
		for _, s := range shardsOf(t, a, p.ID, 2) {
			if handedBack(t, a, s.ID) {
				back = s.ID
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return back != "" && len(ranOn["a"]) == 1
	})
	gB.set(-1)
	waitFor(t, "b runs the shard a handed back", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ranOn["b"]) == 1
	})
	close(release)
	waitState(t, a, p.ID, job.Completed)
	mu.Lock()
	defer mu.Unlock()
	if len(ranOn["a"]) != 1 || len(ranOn["b"]) != 1 || ranOn["a"][0] == ranOn["b"][0] {
		t.Fatalf("shards ran %v, want one on each node", ranOn)
	}
	if s := lookup(t, a, back); s.Attempt != 1 || s.State != job.Completed {
		t.Errorf("handed-back shard: %v at attempt %d, want completed at attempt 1 (a hand-back is not counted)", s.State, s.Attempt)
	}
}

// TestShardsNoPeerNoHandBack: a manager alone runs every shard it claims,
// with no hand-back.
func TestShardsNoPeerNoHandBack(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	var started atomic.Int32
	all := make(chan struct{})
	j := mustJob(t, job.WithKind("alone"), job.WithExecutor(func(ctx context.Context) error {
		if started.Add(1) == 4 {
			close(all)
		}
		select {
		case <-all: // the four run at once, here
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	m := e.manager([]*job.Job{j}, job.WithWorkers(4), job.WithShardRecheck(time.Hour))
	p, err := m.ScheduleJob(context.Background(), "alone", job.WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, m, p.ID, job.Completed)
	for i, s := range shardsOf(t, m, p.ID, 4) {
		if handedBack(t, m, s.ID) || s.Attempt != 1 {
			t.Errorf("shard %d: handed back %v, attempt %d; want run at once, attempt 1", i, handedBack(t, m, s.ID), s.Attempt)
		}
	}
}

// TestShardsSpreadFourIdle: four idle managers, a task of four shards.
// Claims race, so which manager claims what is not decided here; what is
// guaranteed is that every shard runs once and completes at attempt 1
// (hand-backs are not counted) and the task completes. How the shards
// spread is logged (go test -v -run TestShardsSpreadFourIdle -count 20).
func TestShardsSpreadFourIdle(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	var mu sync.Mutex
	ranOn := map[string]int{}
	var started atomic.Int32
	all := make(chan struct{})
	var ms []*job.Manager
	for _, node := range []string{"n1", "n2", "n3", "n4"} {
		j := mustJob(t, job.WithKind("four"), job.WithExecutor(func(ctx context.Context) error {
			mu.Lock()
			ranOn[node]++
			mu.Unlock()
			if started.Add(1) == 4 {
				close(all)
			}
			select {
			case <-all:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		ms = append(ms, e.manager([]*job.Job{j}, job.WithNodeID(node), job.WithShardRecheck(time.Hour)))
	}
	waitFor(t, "every manager live in the registry", func() bool {
		nodes, err := ms[0].Admin().ListNodes(context.Background())
		return err == nil && len(nodes) == 4
	})
	p, err := ms[0].ScheduleJob(context.Background(), "four", job.WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, ms[0], p.ID, job.Completed)
	backs := 0
	for i, s := range shardsOf(t, ms[0], p.ID, 4) {
		if s.Attempt != 1 {
			t.Errorf("shard %d at attempt %d, want 1", i, s.Attempt)
		}
		if handedBack(t, ms[0], s.ID) {
			backs++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("spread: %d managers ran the 4 shards %v; %d shards were handed back", len(ranOn), ranOn, backs)
}

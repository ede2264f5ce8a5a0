package job_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/fakeclock"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

func memStore(t *testing.T) *memdbstore.Store {
	t.Helper()
	s, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDefinitionPolicyOnSchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t, job.WithStore(memStore(t)), job.WithWorkers(0))
	d, err := m.Admin().PutDefinition(ctx, job.Definition{
		Kind: "report", Queue: "reports", Priority: 5, MaxRetries: job.RetryForever, Timeout: time.Minute,
		Unique: &store.UniquePolicy{By: store.UniqueByArgs, TTL: time.Hour},
	}, 0)
	if err != nil || d.Version != 1 {
		t.Fatalf("PutDefinition: %+v, %v; want version 1", d, err)
	}
	a, err := m.ScheduleJob(ctx, "report", job.WithArguments("2026-11", map[string]int{"b": 2, "a": 1}))
	if err != nil {
		t.Fatal(err)
	}
	if a.Queue != "reports" || a.Priority != 5 || a.MaxRetries != job.RetryForever || a.Timeout != time.Minute {
		t.Errorf("instance: queue %q priority %v retries %d timeout %v; want the definition's", a.Queue, a.Priority, a.MaxRetries, a.Timeout)
	}
	if !strings.HasPrefix(a.UniqueKey, "report:args:") {
		t.Errorf("unique key %q, want one derived from kind and arguments", a.UniqueKey)
	}
	// The same arguments: a duplicate, whatever order the map was built in.
	holder, err := m.ScheduleJob(ctx, "report", job.WithArguments("2026-11", map[string]int{"a": 1, "b": 2}))
	if !errors.Is(err, job.ErrDuplicate) || holder == nil || holder.ID != a.ID {
		t.Fatalf("same arguments: %v, %v; want ErrDuplicate held by %s", holder, err, a.ID)
	}
	// Other arguments, and options overriding the definition.
	b, err := m.ScheduleJob(ctx, "report", job.WithArguments("2026-12", nil), job.WithQueue("urgent"), job.WithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	if b.Queue != "urgent" || b.MaxRetries != 0 || b.Priority != 5 {
		t.Errorf("overridden instance: queue %q retries %d priority %v", b.Queue, b.MaxRetries, b.Priority)
	}
	// A key given at schedule time replaces the arguments' key.
	if _, err := m.ScheduleJob(ctx, "report", job.WithArguments("2026-11", map[string]int{"a": 1, "b": 2}), job.WithUniqueKey("k", 0)); err != nil {
		t.Fatalf("same arguments with a key of its own: %v", err)
	}
	// Arguments JSON cannot encode are refused before anything is stored.
	if _, err := m.ScheduleJob(ctx, "report", job.WithArguments(func() {})); !errors.Is(err, job.ErrInvalidArguments) {
		t.Fatalf("undecodable argument: %v, want ErrInvalidArguments", err)
	}
	if insts, _ := m.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("report"))); len(insts) != 3 {
		t.Fatalf("%d instances stored, want 3", len(insts))
	}
}

func TestDefinitionUniqueByKeyTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := fakeclock.New(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	m := newManager(t, job.WithStore(memStore(t)), job.WithWorkers(0), job.WithClock(clk))
	if _, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "k", Unique: &store.UniquePolicy{By: store.UniqueByKey, TTL: time.Minute}}, 0); err != nil {
		t.Fatal(err)
	}
	// Without a key, not unique.
	for range 2 {
		if _, err := m.ScheduleJob(ctx, "k"); err != nil {
			t.Fatalf("schedule without a key: %v", err)
		}
	}
	if _, err := m.ScheduleJob(ctx, "k", job.WithUniqueKey("x", 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ScheduleJob(ctx, "k", job.WithUniqueKey("x", 0)); !errors.Is(err, job.ErrDuplicate) {
		t.Fatalf("same key within the policy's TTL: %v, want ErrDuplicate", err)
	}
	clk.Advance(time.Minute + time.Second) // the policy's TTL, not DefaultUniqueTTL
	if _, err := m.ScheduleJob(ctx, "k", job.WithUniqueKey("x", 0)); err != nil {
		t.Fatalf("same key after the policy's TTL: %v", err)
	}
}

// A definition changed or deleted by another manager takes effect once
// the cached one is DefinitionCacheTTL old; one changed through this
// manager, at once.
func TestDefinitionCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memStore(t)
	clk := fakeclock.New(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	m := newManager(t, job.WithStore(s), job.WithWorkers(0), job.WithClock(clk))
	other := newManager(t, job.WithStore(s), job.WithWorkers(0))
	put := func(mgr *job.Manager, queue string) {
		t.Helper()
		if _, err := mgr.Admin().PutDefinition(ctx, job.Definition{Kind: "c", Queue: queue}, store.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	queueOf := func() string {
		t.Helper()
		ji, err := m.ScheduleJob(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		return ji.Queue
	}
	put(other, "a")
	if q := queueOf(); q != "a" {
		t.Fatalf("queue %q, want a", q)
	}
	put(other, "b")
	if q := queueOf(); q != "a" {
		t.Fatalf("queue %q right after another manager's change, want the cached a", q)
	}
	clk.Advance(job.DefinitionCacheTTL)
	if q := queueOf(); q != "b" {
		t.Fatalf("queue %q after DefinitionCacheTTL, want b", q)
	}
	put(m, "c")
	if q := queueOf(); q != "c" {
		t.Fatalf("queue %q after this manager's change, want c at once", q)
	}
	if err := other.Admin().DeleteDefinition(ctx, "c", 0); err != nil {
		t.Fatal(err)
	}
	clk.Advance(job.DefinitionCacheTTL)
	if _, err := m.ScheduleJob(ctx, "c"); !errors.Is(err, job.ErrUnknownKind) || !strings.Contains(err.Error(), "PutDefinition") {
		t.Fatalf("schedule after the definition was deleted: %v, want ErrUnknownKind naming the fix", err)
	}
	// A miss is not remembered.
	put(other, "d")
	if q := queueOf(); q != "d" {
		t.Fatalf("queue %q right after a miss and a new definition, want d", q)
	}
}

func TestDefinitionManagement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t, job.WithStore(memStore(t)), job.WithWorkers(0))
	bad := []job.Definition{
		{Kind: ""},
		{Kind: "k", MaxRetries: -2},
		{Kind: "k", Backoff: store.Backoff{Kind: "linear"}},
		{Kind: "k", Backoff: store.Backoff{Kind: store.BackoffExponential, Base: time.Second, Limit: time.Minute, Jitter: 2}},
		{Kind: "k", Labels: []string{"a b"}},
	}
	for _, d := range bad {
		_, err := m.Admin().PutDefinition(ctx, d, 0)
		if !errors.Is(err, job.ErrInvalidJob) || !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutDefinition(%+v): %v, want ErrInvalidJob and store.ErrInvalid", d, err)
		}
	}
	if ds, err := m.Admin().ListDefinitions(ctx, "", 0); err != nil || len(ds.Items) != 0 {
		t.Fatalf("after invalid puts: %d definitions, %v; want none", len(ds.Items), err)
	}
	d1, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "k", Description: "first"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d1.Queue != job.DefaultQueue || d1.Version != 1 {
		t.Fatalf("stored %+v; want the default queue, version 1", d1)
	}
	if _, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "k"}, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("create twice: %v, want ErrConflict", err)
	}
	if _, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "k", Description: "second"}, d1.Version); err != nil {
		t.Fatal(err)
	}
	got, err := m.Admin().GetDefinition(ctx, "k")
	if err != nil || got.Version != 2 || got.Description != "second" {
		t.Fatalf("Definition: %+v, %v", got, err)
	}
	if err := m.Admin().DeleteDefinition(ctx, "k", 1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete at a stale version: %v, want ErrConflict", err)
	}
	if err := m.Admin().DeleteDefinition(ctx, "k", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admin().GetDefinition(ctx, "k"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("Definition after delete: %v, want ErrNotFound", err)
	}
}

func TestPublishDefinitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memStore(t)
	def := job.Definition{
		Kind: "pub", Queue: "q", Priority: 3, MaxRetries: 7, Timeout: time.Second,
		Backoff: store.Backoff{Kind: store.BackoffExponential, Base: time.Second, Limit: time.Hour, Jitter: 0.25},
		Unique:  &store.UniquePolicy{By: store.UniqueByArgs, TTL: time.Minute},
		Labels:  []string{"gpu"}, Description: "published",
	}
	pub := mustJob(t, job.WithDefinition(def), job.WithExecutor(func() {}))
	custom := mustJob(t, job.WithKind("custom"), job.WithExecutor(func() {}), job.WithBackoff(func(int) time.Duration { return time.Second }))
	m := newManager(t, job.WithStore(s), job.WithPublishDefinitions())
	for _, j := range []*job.Job{pub, custom} {
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Admin().GetDefinition(ctx, "pub"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("published before Start: %v", err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := m.Admin().GetDefinition(ctx, "pub")
	if err != nil {
		t.Fatal(err)
	}
	got.Version, got.CreatedAt, got.UpdatedAt = 0, time.Time{}, time.Time{}
	if !equalDefs(got, &def) {
		t.Errorf("published %+v,\nwant %+v", got, def)
	}
	c, err := m.Admin().GetDefinition(ctx, "custom")
	if err != nil || c.Backoff != (store.Backoff{}) || c.Queue != job.DefaultQueue || c.MaxRetries != job.DefaultMaxRetries {
		t.Errorf("job with a func backoff published as %+v, %v; want the default backoff, queue and retries", c, err)
	}
	// Registered while running: published at once.
	if err := m.RegisterJob(mustJob(t, job.WithKind("late"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admin().GetDefinition(ctx, "late"); err != nil {
		t.Fatalf("job registered while running: %v", err)
	}
}

func equalDefs(a, b *job.Definition) bool {
	return a.Kind == b.Kind && a.Queue == b.Queue && a.Priority == b.Priority && a.MaxRetries == b.MaxRetries &&
		a.Timeout == b.Timeout && a.Backoff == b.Backoff && a.Description == b.Description &&
		(a.Unique == nil) == (b.Unique == nil) && (a.Unique == nil || *a.Unique == *b.Unique) &&
		strings.Join(a.Labels, ",") == strings.Join(b.Labels, ",")
}

// failingDefs is a store whose definition writes fail.
type failingDefs struct{ store.Store }

func (failingDefs) PutDefinition(context.Context, *store.PutDefinitionParams) (*store.Definition, error) {
	return nil, errors.New("store down")
}

func TestPublishFailureFailsStart(t *testing.T) {
	t.Parallel()
	m := newManager(t, job.WithStore(failingDefs{memStore(t)}), job.WithPublishDefinitions())
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("Start: %v, want the publish error", err)
	}
	if err := m.Stop(context.Background()); !errors.Is(err, job.ErrNotRunning) {
		t.Fatalf("Stop after a failed Start: %v, want ErrNotRunning", err)
	}
}

func TestBackoffFromDefinition(t *testing.T) {
	t.Parallel()
	c := job.BackoffOf(store.Backoff{Kind: store.BackoffConstant, Base: 3 * time.Second})
	for a := 1; a < 5; a++ {
		if d := c(a); d != 3*time.Second {
			t.Fatalf("constant backoff at attempt %d: %v, want 3s", a, d)
		}
	}
	e := job.BackoffOf(store.Backoff{Kind: store.BackoffExponential, Base: time.Second, Limit: 10 * time.Second, Jitter: 0.5})
	for a, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 60: 10 * time.Second} {
		for range 50 {
			if d := e(a); d < want/2 || d > want {
				t.Fatalf("exponential backoff at attempt %d: %v, want within [%v, %v]", a, d, want/2, want)
			}
		}
	}
	if d := job.BackoffOf(store.Backoff{})(1); d < 500*time.Millisecond || d > time.Second {
		t.Fatalf("default backoff at attempt 1: %v, want the engine default (0.5s to 1s)", d)
	}
}

func TestZeroWorkersSetWorkers(t *testing.T) {
	t.Parallel()
	m := newManager(t, job.WithWorkers(0))
	if size, _ := m.Workers(); size != 0 {
		t.Fatalf("WithWorkers(0): %d workers", size)
	}
	if err := m.SetWorkers(0); err != nil {
		t.Fatalf("SetWorkers(0): %v", err)
	}
}

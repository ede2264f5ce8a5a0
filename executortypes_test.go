package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// echoType is an executor type for the engine's tests: its config names
// a prefix, and it returns the prefix and its arguments joined. A config
// {"fail": "..."} fails every attempt with that message, {"retry_after":
// "1h"} asks for a retry no sooner than that; a config that is not an
// object with a prefix is unusable.
type echoType struct{ name string }

func (e echoType) Type() string { return e.name }

func (e echoType) New(d *job.Definition) (job.DataExecutor, error) {
	var cfg struct {
		Prefix     string `json:"prefix"`
		Fail       string `json:"fail"`
		RetryAfter string `json:"retry_after"`
	}
	if err := json.Unmarshal(d.Executor.Config, &cfg); err != nil || cfg.Prefix == "" {
		return nil, fmt.Errorf("config %s: want {\"prefix\": \"...\"}", d.Executor.Config)
	}
	return func(ctx context.Context, inst job.Instance, args []json.RawMessage) (any, error) {
		if cfg.Fail != "" {
			err := errors.New(cfg.Fail)
			if cfg.RetryAfter != "" {
				d, _ := time.ParseDuration(cfg.RetryAfter)
				err = job.RetryAfter(err, d)
			}
			return nil, err
		}
		inst.Infof("echo %d args", len(args))
		parts := []string{cfg.Prefix}
		for _, a := range args {
			parts = append(parts, string(a))
		}
		return strings.Join(parts, " "), nil
	}, nil
}

func echoDef(kind, config string) job.Definition {
	return job.Definition{Kind: kind, MaxRetries: 2, Executor: &store.ExecutorSpec{Type: "wasm", Config: json.RawMessage(config)}}
}

func waitInstance(t *testing.T, m *job.Manager, id string, states ...job.State) *job.InstanceInfo {
	t.Helper()
	var got *job.InstanceInfo
	waitFor(t, fmt.Sprintf("instance %s in %v", id, states), func() bool {
		i, err := m.GetInstance(context.Background(), id)
		if err == nil && slices.Contains(states, i.State) {
			got = i
			return true
		}
		return false
	})
	return got
}

func TestExecutorTypeRunsStoredDefinitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memStore(t)
	// A producer without the type stores the definition before the
	// worker starts; the worker adopts it at Start.
	prod := newManager(t, job.WithStore(s), job.WithWorkers(0))
	if _, err := prod.Admin().PutDefinition(ctx, echoDef("greet", `{"prefix":"hello"}`), 0); err != nil {
		t.Fatal(err)
	}
	w := newManager(t, job.WithStore(s), job.WithWorkers(4), job.WithExecutorTypes(echoType{"wasm"}), job.WithExecutorSync(20*time.Millisecond))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.ExecutorTypes(); !slices.Equal(got, []string{"wasm"}) {
		t.Fatalf("ExecutorTypes = %v", got)
	}
	if !slices.Contains(w.RegisteredKinds(), "greet") {
		t.Fatalf("RegisteredKinds = %v, want greet listed", w.RegisteredKinds())
	}
	if j, err := w.GetJob("greet"); err != nil || j.ExecutorType() != "wasm" {
		t.Fatalf("LookupJob(greet) = %v, %v; want the wasm type", j, err)
	}
	a, err := prod.ScheduleJob(ctx, "greet", job.WithArguments("world", 42))
	if err != nil {
		t.Fatal(err)
	}
	done := waitInstance(t, w, a.ID, job.Completed)
	var res string
	if err := done.ResultsInto(&res); err != nil || res != `hello "world" 42` {
		t.Fatalf("result %q, %v", res, err)
	}
	logs, _ := w.LookupInstanceLogs(ctx, job.NewQuery(job.WithQueryInstanceID(a.ID)))
	if len(logs) == 0 || !strings.Contains(logs[0].Message, "echo 2 args") {
		t.Fatalf("instance logs %+v, want the executor's line", logs)
	}

	// Created at run time by another process: picked up by the sync.
	if _, err := prod.Admin().PutDefinition(ctx, echoDef("later", `{"prefix":"late"}`), 0); err != nil {
		t.Fatal(err)
	}
	b, err := prod.ScheduleJob(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	waitInstance(t, w, b.ID, job.Completed)

	// Changed: the next attempt runs the new config.
	if _, err := prod.Admin().PutDefinition(ctx, echoDef("greet", `{"prefix":"bye"}`), 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the changed definition adopted", func() bool {
		c, err := prod.ScheduleJob(ctx, "greet")
		if err != nil {
			t.Fatal(err)
		}
		var r string
		return waitInstance(t, w, c.ID, job.Completed).ResultsInto(&r) == nil && r == "bye"
	})

	// Deleted: unregistered.
	if err := prod.Admin().DeleteDefinition(ctx, "later", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted definition's kind unregistered", func() bool { return !slices.Contains(w.RegisteredKinds(), "later") })

	// A definition naming a type this manager does not enable is left
	// to others.
	if _, err := prod.Admin().PutDefinition(ctx, job.Definition{Kind: "other", Executor: &store.ExecutorSpec{Type: "command"}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.GetJob("other"); !errors.Is(err, job.ErrUnknownKind) {
		t.Fatalf("kind of a type not enabled here: LookupJob = %v, want ErrUnknownKind", err)
	}
}

func TestExecutorTypeFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memStore(t)
	w := newManager(t, job.WithStore(s), job.WithWorkers(2), job.WithExecutorTypes(echoType{"wasm"}), job.WithExecutorSync(20*time.Millisecond))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// A config the type refuses: PutDefinition through a manager with the
	// type refuses it...
	if _, err := w.Admin().PutDefinition(ctx, echoDef("bad", `{"no":"prefix"}`), 0); !errors.Is(err, job.ErrInvalidJob) {
		t.Fatalf("PutDefinition of an unusable config = %v, want ErrInvalidJob", err)
	}
	// ...and one stored by a manager without it ends each instance with
	// the config's error, not a retry loop.
	other := newManager(t, job.WithStore(s), job.WithWorkers(0))
	if _, err := other.Admin().PutDefinition(ctx, echoDef("bad", `{"no":"prefix"}`), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bad definition adopted", func() bool { return slices.Contains(w.RegisteredKinds(), "bad") })
	a, err := w.ScheduleJob(ctx, "bad")
	if err != nil {
		t.Fatal(err)
	}
	got := waitInstance(t, w, a.ID, job.Terminated)
	if got.Attempt != 1 || !strings.Contains(got.Error, "fix the definition's executor config") {
		t.Fatalf("attempt %d, error %v; want one attempt ended with the config error", got.Attempt, got.Error)
	}

	// RetryAfter: the retry waits at least what the executor asked.
	if _, err := w.Admin().PutDefinition(ctx, echoDef("busy", `{"prefix":"p","fail":"503 busy","retry_after":"1h"}`), 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b, err := w.ScheduleJob(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failed attempt scheduled again", func() bool {
		i, err := w.GetInstance(ctx, b.ID)
		return err == nil && i.State == job.Scheduled && i.Attempt == 1
	})
	i, _ := w.GetInstance(ctx, b.ID)
	if wait := i.RunAt.Sub(start); wait < time.Hour {
		t.Fatalf("retry due after %v, want at least the hour Retry-After asked for", wait)
	}
}

func TestExecutorTypeConflictsWithGoFunction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memStore(t)
	w := newManager(t, job.WithStore(s), job.WithWorkers(1), job.WithExecutorTypes(echoType{"wasm"}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Admin().PutDefinition(ctx, echoDef("data", `{"prefix":"x"}`), 0); err != nil {
		t.Fatal(err)
	}
	goJob := mustJob(t, job.WithKind("data"), job.WithExecutor(func() {}))
	err := w.RegisterJob(goJob)
	if !errors.Is(err, job.ErrDuplicateKind) || !strings.Contains(err.Error(), "wasm executor") {
		t.Fatalf("RegisterJob of a kind run as data = %v, want ErrDuplicateKind naming the executor", err)
	}
	// The other way round: a Go function first, then a definition naming
	// a type for its kind.
	if err := w.RegisterJob(mustJob(t, job.WithKind("code"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	_, err = w.Admin().PutDefinition(ctx, echoDef("code", `{"prefix":"x"}`), 0)
	if !errors.Is(err, job.ErrDuplicateKind) || !strings.Contains(err.Error(), "Go function") {
		t.Fatalf("PutDefinition naming a type for a Go kind = %v, want ErrDuplicateKind", err)
	}
	// A manager with the type enabled but the definition stored before
	// RegisterJob (by another manager) refuses the registration too.
	w2 := newManager(t, job.WithStore(s), job.WithWorkers(0), job.WithExecutorTypes(echoType{"wasm"}))
	if err := w2.RegisterJob(mustJob(t, job.WithKind("data"), job.WithExecutor(func() {}))); !errors.Is(err, job.ErrDuplicateKind) {
		t.Fatalf("RegisterJob before Start of a kind stored as data = %v, want ErrDuplicateKind", err)
	}
	if _, err := job.NewManager(job.WithExecutorTypes(echoType{"a"}, echoType{"a"})); !errors.Is(err, job.ErrInvalidOption) {
		t.Fatalf("two types of one name: %v", err)
	}
}

// TestExecutorTypeRequiredLabels: a definition's required labels pick the
// node that runs it, as for a Go kind.
func TestExecutorTypeRequiredLabels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memStore(t)
	plain := newManager(t, job.WithStore(s), job.WithWorkers(4), job.WithNodeID("plain"), job.WithExecutorTypes(echoType{"wasm"}))
	gpu := newManager(t, job.WithStore(s), job.WithWorkers(4), job.WithNodeID("gpu"), job.WithLabels("gpu"), job.WithExecutorTypes(echoType{"wasm"}))
	d := echoDef("render", `{"prefix":"r"}`)
	d.Labels = []string{"gpu"}
	if _, err := plain.Admin().PutDefinition(ctx, d, 0); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*job.Manager{plain, gpu} {
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for range 10 {
		a, err := plain.ScheduleJob(ctx, "render")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	for _, id := range ids {
		waitInstance(t, plain, id, job.Completed)
		hist, err := plain.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstanceID(id)))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hist {
			if h.State == job.Processing && h.Node != "gpu" {
				t.Fatalf("instance %s claimed by %q, want the node with the gpu label", id, h.Node)
			}
		}
	}
}

// TestCheckDefinition: CheckDefinition refuses what PutDefinition
// refuses, with the same errors, returns what it would store, and stores
// nothing.
func TestCheckDefinition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newManager(t, job.WithStore(memStore(t)), job.WithWorkers(0), job.WithExecutorTypes(echoType{"wasm"}))
	got, err := w.Admin().CheckDefinition(ctx, echoDef("data", `{ "prefix" : "x" }`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Queue != job.DefaultQueue || string(got.Executor.Config) != `{"prefix":"x"}` {
		t.Fatalf("checked definition: queue %q config %s, want the default queue and canonical JSON", got.Queue, got.Executor.Config)
	}
	if _, err := w.Admin().GetDefinition(ctx, "data"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after CheckDefinition, Definition = %v, want ErrNotFound (nothing stored)", err)
	}
	// A config the type refuses: the error PutDefinition gives.
	bad := echoDef("data", `{"other": 1}`)
	_, checkErr := w.Admin().CheckDefinition(ctx, bad)
	_, putErr := w.Admin().PutDefinition(ctx, bad, 0)
	if !errors.Is(checkErr, job.ErrInvalidJob) || !errors.Is(putErr, job.ErrInvalidJob) ||
		!strings.Contains(checkErr.Error(), `want {"prefix"`) || !strings.Contains(putErr.Error(), `want {"prefix"`) {
		t.Fatalf("a config the type refuses: check %v, put %v; want both ErrInvalidJob naming the fix", checkErr, putErr)
	}
	// A field the store refuses.
	neg := echoDef("data", `{"prefix":"x"}`)
	neg.MaxRetries = -5
	if _, err := w.Admin().CheckDefinition(ctx, neg); !errors.Is(err, job.ErrInvalidJob) || !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("max retries -5: %v, want ErrInvalidJob and store.ErrInvalid", err)
	}
	// A kind registered here as a Go function.
	if err := w.RegisterJob(mustJob(t, job.WithKind("code"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Admin().CheckDefinition(ctx, echoDef("code", `{"prefix":"x"}`)); !errors.Is(err, job.ErrDuplicateKind) {
		t.Fatalf("a Go kind: %v, want ErrDuplicateKind", err)
	}
}

package jobtest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

func init() {
	register("ExecutorKindConflictsWithGoFunction", testExecutorKindConflict)
}

// execDef is a definition of kind run by the webhook executor type (no
// manager here enables it: the conflict is decided without it).
func execDef(kind string) job.Definition {
	return job.Definition{Kind: kind, Executor: &store.ExecutorSpec{Type: store.ExecutorWebhook, Config: json.RawMessage(`{"url":"https://example.com/hook","unsigned":true}`)}}
}

// A kind is either a Go function or a definition run by an executor type,
// on every manager, whether or not it enables executor types: RegisterJob
// of a kind stored with an executor fails, storing an executor definition
// for a kind a live node runs as a Go function fails, and a manager whose
// Go kind gained an executor definition before it started does not start.
// Each error names the kind and both sides.
func testExecutorKindConflict(t *testing.T, e *env) {
	ctx := context.Background()
	admin := e.manager(t, nil, job.WithWorkers(0))
	start(t, admin)

	// Stored as data first: a Go function of the kind is refused on a
	// plain manager (no executor types enabled).
	if _, err := admin.Admin().PutDefinition(ctx, execDef("xk-data"), 0); err != nil {
		t.Fatal(err)
	}
	plain := e.manager(t, nil)
	err := plain.RegisterJob(mustJob(t, job.WithKind("xk-data"), job.WithExecutor(func() {})))
	if !errors.Is(err, job.ErrDuplicateKind) || !strings.Contains(err.Error(), `"xk-data"`) || !strings.Contains(err.Error(), "webhook executor") || !strings.Contains(err.Error(), "Go function") {
		t.Fatalf("RegisterJob of a kind stored as data = %v; want ErrDuplicateKind naming the kind, the webhook executor and the Go function", err)
	}
	if slices.Contains(plain.RegisteredKinds(), "xk-data") {
		t.Fatal("the refused kind was registered")
	}

	// A Go function on a running node first: storing an executor
	// definition for its kind is refused, naming the node.
	worker := e.manager(t, []*job.Job{mustJob(t, job.WithKind("xk-go"), job.WithExecutor(func() {}))})
	start(t, worker)
	waitFor(t, deadline, "the worker's node to list xk-go", func() bool {
		nodes, err := admin.Admin().ListNodes(ctx)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.ID == worker.NodeID() && slices.Contains(n.Kinds, "xk-go") {
				return true
			}
		}
		return false
	})
	_, err = admin.Admin().PutDefinition(ctx, execDef("xk-go"), 0)
	if !errors.Is(err, job.ErrDuplicateKind) || !strings.Contains(err.Error(), `"xk-go"`) || !strings.Contains(err.Error(), worker.NodeID()) || !strings.Contains(err.Error(), "webhook executor") {
		t.Fatalf("PutDefinition with an executor for a kind a node runs as a Go function = %v; want ErrDuplicateKind naming the kind, the node and the executor", err)
	}
	if _, err := admin.Admin().GetDefinition(ctx, "xk-go"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused definition was stored: %v", err)
	}
	// A definition without an executor (the kind's policy) is fine.
	if _, err := admin.Admin().PutDefinition(ctx, job.Definition{Kind: "xk-go"}, 0); err != nil {
		t.Fatalf("a policy-only definition of a Go kind: %v", err)
	}
	// ... and turning it into an executor definition is refused too.
	d, _ := admin.Admin().GetDefinition(ctx, "xk-go")
	d.Executor = execDef("xk-go").Executor
	if _, err := admin.Admin().PutDefinition(ctx, *d, d.Version); !errors.Is(err, job.ErrDuplicateKind) {
		t.Fatalf("adding an executor to the definition of a Go kind = %v, want ErrDuplicateKind", err)
	}

	// Registered before the definition was stored, and not started yet
	// (so no node lists it): Start refuses.
	late := e.manager(t, []*job.Job{mustJob(t, job.WithKind("xk-late"), job.WithExecutor(func() {}))})
	if _, err := admin.Admin().PutDefinition(ctx, execDef("xk-late"), 0); err != nil {
		t.Fatal(err)
	}
	err = late.Start(ctx)
	if !errors.Is(err, job.ErrDuplicateKind) || !strings.Contains(err.Error(), `"xk-late"`) || !strings.Contains(err.Error(), "webhook executor") {
		t.Fatalf("Start with a Go kind stored as data = %v, want ErrDuplicateKind naming the kind and the executor", err)
	}
}

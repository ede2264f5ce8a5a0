package job_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// A trigger must name a kind something can run: one registered on this
// manager, one a live node runs, or one the store defines. A trigger of a
// kind nothing knows would leave an instance Scheduled forever at each
// tick, so PutTrigger refuses it, naming the fixes, and stores nothing.
func TestPutTriggerUnknownKind(t *testing.T) {
	ctx := context.Background()
	s := newMemdb(t)
	m := newManager(t, job.WithStore(s), job.WithNodeID("a"), job.WithLogger(quietLogger()))
	if err := m.RegisterJob(mustJob(t, job.WithKind("local"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}

	bad := &store.Trigger{Name: "bad2", Kind: "nosuch", Cron: "* * * * *"}
	_, err := m.Admin().PutTrigger(ctx, bad, 0)
	if !errors.Is(err, job.ErrUnknownKind) || !strings.Contains(err.Error(), `"nosuch"`) || !strings.Contains(err.Error(), "definition") {
		t.Fatalf("PutTrigger of kind nosuch: %v; want ErrUnknownKind naming the kind and how to define it", err)
	}
	if _, err := m.Admin().GetTrigger(ctx, "bad2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused trigger was stored: %v", err)
	}

	// Registered here.
	if _, err := m.Admin().PutTrigger(ctx, &store.Trigger{Name: "t-local", Kind: "local", Cron: "* * * * *"}, 0); err != nil {
		t.Fatalf("PutTrigger of a registered kind: %v", err)
	}
	// Defined in the store.
	if _, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "defined"}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admin().PutTrigger(ctx, &store.Trigger{Name: "t-defined", Kind: "defined", Cron: "* * * * *"}, 0); err != nil {
		t.Fatalf("PutTrigger of a defined kind: %v", err)
	}
	// Run by another live node only (a producer with no job of its own).
	other := newManager(t, job.WithStore(s), job.WithNodeID("b"), job.WithLogger(quietLogger()))
	if err := other.RegisterJob(mustJob(t, job.WithKind("remote"), job.WithExecutor(func() {}))); err != nil {
		t.Fatal(err)
	}
	if err := other.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node b to show as live with kind remote", func() bool {
		nodes, err := m.Admin().ListNodes(ctx)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.ID == "b" && n.Status == store.NodeLive {
				return true
			}
		}
		return false
	})
	if _, err := m.Admin().PutTrigger(ctx, &store.Trigger{Name: "t-remote", Kind: "remote", Cron: "* * * * *"}, 0); err != nil {
		t.Fatalf("PutTrigger of a kind a live node runs: %v", err)
	}
}

// Deleting the definition of a kind a stored trigger fires is refused,
// naming the trigger, as deleting a calendar in use is; once the trigger
// is gone the definition can be deleted.
func TestDeleteDefinitionUsedByTrigger(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, job.WithStore(newMemdb(t)), job.WithLogger(quietLogger()))
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "slowjob"}, 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"slow-min", "slow-hour"} {
		if _, err := m.Admin().PutTrigger(ctx, &store.Trigger{Name: name, Kind: "slowjob", Cron: "* * * * *"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	err := m.Admin().DeleteDefinition(ctx, "slowjob", 0)
	if !errors.Is(err, job.ErrDefinitionInUse) || !strings.Contains(err.Error(), `trigger "slow-hour"`) || !strings.Contains(err.Error(), `trigger "slow-min"`) {
		t.Fatalf("DeleteDefinition of a kind two triggers fire: %v; want ErrDefinitionInUse naming both", err)
	}
	if _, err := m.Admin().GetDefinition(ctx, "slowjob"); err != nil {
		t.Fatalf("the definition is gone after a refused delete: %v", err)
	}
	for _, name := range []string{"slow-min", "slow-hour"} {
		if err := m.Admin().DeleteTrigger(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Admin().DeleteDefinition(ctx, "slowjob", 0); err != nil {
		t.Fatalf("DeleteDefinition once no trigger fires it: %v", err)
	}
}

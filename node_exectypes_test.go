package job_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jobkit/job"
)

// TestNodeRegistryExecutorTypes checks that a node's heartbeat names the
// executor types it enables, sorted, and that a node with none names
// none.
func TestNodeRegistryExecutorTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memStore(t)
	m := newManager(t, job.WithStore(s), job.WithNodeID("typed"), job.WithExecutorTypes(echoType{"wasm"}, echoType{"command"}))
	plain := newManager(t, job.WithStore(s), job.WithNodeID("plain"))
	for _, x := range []*job.Manager{m, plain} {
		if err := x.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both nodes in the registry", func() bool {
		ns, err := m.Admin().ListNodes(ctx)
		return err == nil && len(ns) == 2
	})
	ns, err := m.Admin().ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		want := []string(nil)
		if n.ID == "typed" {
			want = []string{"command", "wasm"}
		}
		if !slices.Equal(n.ExecutorTypes, want) {
			t.Errorf("node %s: ExecutorTypes %q, want %q", n.ID, n.ExecutorTypes, want)
		}
	}
}

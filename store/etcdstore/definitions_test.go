package etcdstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// A definition that cannot be decoded is ErrCorrupt for that kind alone:
// listing returns the others with the error, a versioned write refuses to
// guess, and a plain delete clears it.
func TestCorruptDefinition(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	cleanup(t, ns)
	s := open(t, ns)
	ctx := context.Background()
	for _, k := range []string{"a", "c"} {
		if _, err := s.PutDefinition(ctx, &store.PutDefinitionParams{Definition: &store.Definition{Kind: k, Queue: "q"}, Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	cli := newClient(t, testserver.Etcd(t))
	if _, err := cli.Put(ctx, keyPrefix(ns)+"d/b", "{garbage"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetDefinition(ctx, "b"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("GetDefinition of a garbage record: %v, want ErrCorrupt", err)
	}
	ds, err := s.ListDefinitions(ctx, nil)
	if !errors.Is(err, store.ErrCorrupt) || len(ds) != 2 || ds[0].Kind != "a" || ds[1].Kind != "c" {
		t.Fatalf("ListDefinitions: %d definitions, %v; want a and c with ErrCorrupt", len(ds), err)
	}
	_, err = s.PutDefinition(ctx, &store.PutDefinitionParams{Definition: &store.Definition{Kind: "b", Queue: "q"}, IfVersion: 1, Now: t0})
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("PutDefinition over a garbage record: %v, want ErrCorrupt", err)
	}
	if err := s.DeleteDefinition(ctx, &store.DeleteDefinitionParams{Kind: "b"}); err != nil {
		t.Fatalf("DeleteDefinition of a garbage record: %v", err)
	}
	if ds, err := s.ListDefinitions(ctx, nil); err != nil || len(ds) != 2 {
		t.Fatalf("after the delete: %d definitions, %v", len(ds), err)
	}
}

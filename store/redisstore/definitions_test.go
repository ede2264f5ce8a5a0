package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store"
)

// A definition that cannot be decoded is ErrCorrupt for that kind alone:
// listing returns the others with the error, a write refuses to guess, and
// a delete without a version clears it.
func TestCorruptDefinition(t *testing.T) {
	c := client(t)
	ns := "defs-corrupt-" + time.Now().Format("150405.000000")
	s := newStore(t, c, ns)
	ctx := context.Background()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, k := range []string{"a", "c"} {
		if _, err := s.PutDefinition(ctx, &store.PutDefinitionParams{Definition: &store.Definition{Kind: k, Queue: "q"}, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	p := s.Keys().Prefix
	if err := c.HSet(ctx, p+"defs", "b", "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctx, p+"defk", redis.Z{Member: "b"}).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), p+"defs", p+"defk") })
	if _, err := s.GetDefinition(ctx, "b"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("GetDefinition of a garbage record: %v, want ErrCorrupt", err)
	}
	ds, err := s.ListDefinitions(ctx, nil)
	if !errors.Is(err, store.ErrCorrupt) || len(ds) != 2 || ds[0].Kind != "a" || ds[1].Kind != "c" {
		t.Fatalf("ListDefinitions: %d definitions, %v; want a and c with ErrCorrupt", len(ds), err)
	}
	for _, v := range []int64{store.AnyVersion, 1} {
		_, err = s.PutDefinition(ctx, &store.PutDefinitionParams{Definition: &store.Definition{Kind: "b", Queue: "q"}, IfVersion: v, Now: now})
		if !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("PutDefinition over a garbage record (IfVersion %d): %v, want ErrCorrupt", v, err)
		}
	}
	if err := s.DeleteDefinition(ctx, &store.DeleteDefinitionParams{Kind: "b", IfVersion: 1}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("DeleteDefinition at a version of a garbage record: %v, want ErrCorrupt", err)
	}
	if err := s.DeleteDefinition(ctx, &store.DeleteDefinitionParams{Kind: "b"}); err != nil {
		t.Fatalf("DeleteDefinition of a garbage record: %v", err)
	}
	if ds, err := s.ListDefinitions(ctx, nil); err != nil || len(ds) != 2 {
		t.Fatalf("after the delete: %d definitions, %v", len(ds), err)
	}
}

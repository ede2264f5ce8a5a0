package pgstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/pgstore"
)

// A schema name the store cannot use is refused with store.ErrInvalid by
// Migrate and New before any statement runs, and any other name, however
// unusual for SQL, works: the store quotes it everywhere.
func TestSchemaNames(t *testing.T) {
	u := testserver.Postgres(t)
	pool, err := pgxpool.New(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, name := range []string{"", "o'brien", "a\x00b", "x" + string(make([]byte, 50))} {
		if err := pgstore.Migrate(t.Context(), pool, pgstore.WithSchema(name)); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Migrate, schema %q: %v, want store.ErrInvalid", name, err)
		}
		if _, err := pgstore.New(t.Context(), pool, pgstore.WithSchema(name)); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("New, schema %q: %v, want store.ErrInvalid", name, err)
		}
	}
	odd := fmt.Sprintf(`Jobs-Test "%d".x`, time.Now().UnixNano()%1e9)
	t.Cleanup(func() {
		_, _ = pool.Exec(t.Context(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{odd}.Sanitize()+" CASCADE")
	})
	if err := pgstore.Migrate(t.Context(), pool, pgstore.WithSchema(odd)); err != nil {
		t.Fatalf("Migrate, schema %q: %v", odd, err)
	}
	s, err := pgstore.New(t.Context(), pool, pgstore.WithSchema(odd))
	if err != nil {
		t.Fatalf("New, schema %q: %v", odd, err)
	}
	defer s.Close()
	now := time.Now()
	in := &store.Instance{ID: "odd-1", Kind: "k", Queue: "q", RunAt: now, CreatedAt: now}
	if res, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{in}, Node: "n1", Now: now}); err != nil || res[0].Err != nil {
		t.Fatalf("Enqueue, schema %q: %v, %v", odd, res, err)
	}
	got, err := s.Claim(t.Context(), &store.ClaimParams{Queue: "q", Owner: "n1", Limit: 1, Now: now.Add(time.Millisecond), LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(got.Instances) != 1 || got.Instances[0].ID != "odd-1" {
		t.Fatalf("Claim, schema %q: %v, %v; want odd-1", odd, got, err)
	}
}

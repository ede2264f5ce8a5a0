package pgstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// TestClaimKeepsItsGenericPlan: once PostgreSQL has planned the claim
// statement five times for a connection, it runs the generic plan it
// keeps for it instead of planning each call again. With the claim's
// LIMIT and readiness time as parameters the planner priced the generic
// plan for a tenth of the ready rows and every custom plan for the
// rows asked: the custom plans looked cheaper and each claim was planned
// anew (1.3-8 ms of server CPU a claim, more than running it, on the
// benchmark's 100,000-job backlog).
func TestClaimKeepsItsGenericPlan(t *testing.T) {
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(testserver.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = 1, 1 // every statement on one connection, whose prepared statements we read
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := fmt.Sprintf("jk_cplan_%d", time.Now().UnixNano())
	defer func() { _, _ = pool.Exec(t.Context(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") }()
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	for b := range 10 {
		var ins []*store.Instance
		for i := range 1000 {
			ins = append(ins, &store.Instance{ID: uuidLike(fmt.Sprint(b), i), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now})
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+s.t("instances")); err != nil {
		t.Fatal(err)
	}
	const claims = 20
	for i := range claims {
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Kinds: []string{"k"}, Limit: 16 + i%3*16, Now: now,
			LeaseUntil: now.Add(time.Hour), ClaimSeq: uint64(i + 1)})
		if err != nil || len(res.Instances) != 16+i%3*16 {
			t.Fatalf("claim %d: %d instances, %v", i+1, len(res.Instances), err)
		}
	}
	var generic, custom int64
	if err := pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
		s.stmt().claim).Scan(&generic, &custom); err != nil {
		t.Fatalf("the claim statement among the connection's prepared statements: %v", err)
	}
	if custom > 5 || generic != claims-custom {
		t.Fatalf("%d claims on one connection: %d custom plans, %d runs of the generic plan; want at most 5 custom, the rest generic", claims, custom, generic)
	}
}

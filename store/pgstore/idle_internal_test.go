package pgstore

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// statementCounter is a pgx tracer that counts the statements a pool
// sends, by their first words.
type statementCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := strings.Join(strings.Fields(d.SQL), " ")
	switch {
	case strings.Contains(key, "ref AS (SELECT least(now.t"):
		key = "rescue nodes"
	case strings.Contains(key, "old AS (SELECT status FROM"):
		key = "heartbeat"
	}
	c.n[key]++
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// An idle manager heartbeats and then looks for dead nodes to rescue,
// five times a second by default. The heartbeat's statement answers the
// rescue's question (a live node silent too long, a dead one holding
// attempts), so a rescue
// after a heartbeat that found nothing costs no statement; once a node
// is silent for longer than deadAfter, the next rescue after a heartbeat
// declares it dead and takes its attempts, as before.
func TestIdleRescueAfterHeartbeat(t *testing.T) {
	ctx := t.Context()
	_, schema := internalPool(t, "idle")
	cfg, err := pgxpool.ParseConfig(testserver.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	tr := &statementCounter{n: map[string]int{}}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const deadAfter = 300 * time.Millisecond
	beat := func(node string) {
		t.Helper()
		if _, err := s.Heartbeat(ctx, &store.HeartbeatParams{Node: store.NodeInfo{ID: node}, Now: time.Now(), DeadAfter: deadAfter}); err != nil {
			t.Fatal(err)
		}
	}
	rescue := func() *store.RescueNodesResult {
		t.Helper()
		res, err := s.RescueNodes(ctx, &store.RescueNodesParams{Node: "a", Now: time.Now(), DeadAfter: deadAfter, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	beat("b")
	now := time.Now().UTC()
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Now: now, Instances: []*store.Instance{{ID: "j", Kind: "k", Queue: "q", RunAt: now, CreatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "b", Limit: 1, Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil || len(res.Instances) != 1 {
		t.Fatalf("claim: %+v, %v", res, err)
	}

	// a's rounds while b beats: no rescue after a's heartbeat asks the
	// database.
	for range 10 {
		beat("b")
		beat("a")
		if res := rescue(); len(res.Dead) != 0 || len(res.Rescued) != 0 {
			t.Fatalf("rescue while every node beats: %+v", res)
		}
	}
	if got := tr.count("rescue nodes"); got != 0 {
		t.Errorf("%d rescue statements in 10 rounds of heartbeat and rescue while no node was silent, want none", got)
	}
	if got := tr.count("heartbeat"); got != 21 {
		t.Errorf("%d heartbeat statements, want 21", got)
	}
	// Two rescues in a row: the second asks the database again.
	rescue()
	if got := tr.count("rescue nodes"); got != 1 {
		t.Errorf("%d rescue statements after a second rescue without a heartbeat between, want 1", got)
	}

	// b falls silent: within a few of a's rounds b is declared dead and
	// its attempt rescued.
	deadline := time.Now().Add(10 * time.Second)
	for {
		beat("a")
		res := rescue()
		if len(res.Dead) == 1 && res.Dead[0] == "b" {
			if len(res.Rescued) != 1 || res.Rescued[0].ID != "j" {
				t.Fatalf("b declared dead, rescued %+v, want j", res.Rescued)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b, silent, was not declared dead within 10 s of a's heartbeats and rescues")
		}
		time.Sleep(50 * time.Millisecond) // a's heartbeat interval
	}
}

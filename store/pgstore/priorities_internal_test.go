package pgstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// bufNode is a plan node with what it read (EXPLAIN (ANALYZE, BUFFERS,
// FORMAT JSON)).
type bufNode struct {
	Type  string    `json:"Node Type"`
	Index string    `json:"Index Name"`
	Hit   int       `json:"Shared Hit Blocks"`
	Read  int       `json:"Shared Read Blocks"`
	Rows  int       `json:"Actual Rows"`
	Loops int       `json:"Actual Loops"`
	Plans []bufNode `json:"Plans"`
}

// TestClaimReadsOnlyReadyEntries: a claim that takes less than its limit
// reads the ready entries of each priority its queue holds, not the
// entries scheduled for later behind them (10,000 delayed over three
// priorities, six ready: the claim's scan of instances_ready read 87
// buffers before the queue kept its priorities, migration 0009). The
// claim still takes what is ready in claim order.
func TestClaimReadsOnlyReadyEntries(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "prio")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	prios := []int{0, 5, 10}
	for b := range 10 {
		var ins []*store.Instance
		for i := range 1000 {
			ins = append(ins, &store.Instance{ID: fmt.Sprintf("late-%d-%04d", b, i), Kind: "k", Queue: "q",
				Priority: prios[i%3], RunAt: now.Add(time.Hour + time.Duration(i)*time.Second), CreatedAt: now})
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	var ready []*store.Instance
	for i := range 6 {
		ready = append(ready, &store.Instance{ID: fmt.Sprintf("ready-%d", i), Kind: "k", Queue: "q",
			Priority: prios[i%3], RunAt: now.Add(-time.Duration(i) * time.Second), CreatedAt: now})
	}
	for _, in := range ready { // one call each: the statement path
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+s.t("instances")); err != nil {
		t.Fatal(err)
	}
	plan := explainClaim(t, pool, s, now)
	var doc []struct{ Plan bufNode }
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	bufs := 0
	var walk func(nd *bufNode)
	walk = func(nd *bufNode) {
		if nd.Index == "instances_ready" {
			bufs += nd.Hit + nd.Read
		}
		for i := range nd.Plans {
			walk(&nd.Plans[i])
		}
	}
	walk(&doc[0].Plan)
	t.Logf("the claim read %d buffers of instances_ready", bufs)
	if bufs > 30 {
		t.Fatalf("the claim of 6 ready among 10,000 waiting read %d buffers of instances_ready; want at most 30. Plan: %s", bufs, plan)
	}
	// Claim order: priority, then readiness.
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 32, Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range res.Instances {
		got = append(got, in.ID)
	}
	if want := "ready-5 ready-2 ready-4 ready-1 ready-3 ready-0"; strings.Join(got, " ") != want {
		t.Fatalf("claimed %v; want %s", got, want)
	}
	if want := now.Add(time.Hour); !res.NextRunAt.Equal(want) {
		t.Fatalf("NextRunAt %v; want %v", res.NextRunAt, want)
	}
}

// TestUpgradeFromVersion8: migration 0009 lists the priorities of the
// instances stored before it, so the claim still finds them, and a
// priority a later enqueue brings is added (the statement's path and
// COPY's).
func TestUpgradeFromVersion8(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "up8")
	q := pgx.Identifier{schema}.Sanitize()
	migrateToVersion(t, pool, schema, 8)
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i, prio := range []int{3, -2, 7} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+q+`.instances (ns, id, kind, queue, priority, run_at, state, created_at, updated_at)
			VALUES ('up', $1, 'k', 'q', $2, $3, 2, $3, $3)`, fmt.Sprintf("old-%d", i), prio, nanos(now)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+q+".queues (ns, name) VALUES ('up', 'q')"); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema), WithNamespace("up"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	one := &store.Instance{ID: "new-1", Kind: "k", Queue: "q", Priority: 5, RunAt: now, CreatedAt: now}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{one}, Now: now}); err != nil {
		t.Fatal(err)
	}
	var batch []*store.Instance
	for i := range copyMin {
		batch = append(batch, &store.Instance{ID: fmt.Sprintf("copy-%02d", i), Kind: "k", Queue: "q", Priority: 9 - 20*(i%2), RunAt: now, CreatedAt: now})
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: batch, Now: now}); err != nil {
		t.Fatal(err)
	}
	var prios []int64
	if err := pool.QueryRow(ctx, "SELECT prios FROM "+q+".queues WHERE ns = 'up' AND name = 'q'").Scan(&prios); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(prios) != "[9 7 5 3 -2 -11]" {
		t.Fatalf("the queue's priorities: %v; want [9 7 5 3 -2 -11]", prios)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 100, Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, in := range res.Instances {
		if len(got) == 0 || got[len(got)-1] != in.Priority {
			got = append(got, in.Priority)
		}
	}
	if len(res.Instances) != 4+copyMin || fmt.Sprint(got) != "[9 7 5 3 -2 -11]" {
		t.Fatalf("claimed %d instances, priorities in turn %v; want %d, [9 7 5 3 -2 -11]", len(res.Instances), got, 4+copyMin)
	}
}

// TestClaimManyPriorities: a queue whose instances had more than maxPrios
// priorities keeps no list, whichever way they came (one batch, or one
// at a time), and its claims still take what is ready in claim order.
func TestClaimManyPriorities(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "many")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	n := maxPrios + 4
	var batch []*store.Instance
	for i := range n {
		batch = append(batch, &store.Instance{ID: fmt.Sprintf("b-%02d", i), Kind: "k", Queue: "batch", Priority: i, RunAt: now, CreatedAt: now})
		one := &store.Instance{ID: fmt.Sprintf("o-%02d", i), Kind: "k", Queue: "one", Priority: i, RunAt: now, CreatedAt: now}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{one}, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: batch, Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"batch", "one"} {
		var none bool
		if err := pool.QueryRow(ctx, "SELECT prios IS NULL FROM "+s.t("queues")+" WHERE ns = '' AND name = $1", q).Scan(&none); err != nil || !none {
			t.Fatalf("queue %s with %d priorities keeps a list (%v)", q, n, err)
		}
		// One more instance at a known priority changes nothing.
		in := &store.Instance{ID: q + "-again", Kind: "k", Queue: q, Priority: -1, RunAt: now, CreatedAt: now}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: q, Owner: "w", Limit: 100, Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Instances) != n+1 {
			t.Fatalf("queue %s: claimed %d; want %d", q, len(res.Instances), n+1)
		}
		for i, in := range res.Instances {
			if want := n - 1 - i; in.Priority != want && !(i == n && in.Priority == -1) {
				t.Fatalf("queue %s: claim %d has priority %d; want %d", q, i, in.Priority, want)
			}
		}
	}
}

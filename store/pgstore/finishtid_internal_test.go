package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestFinishFindsRowsByTID: the finish of attempts this Store claimed
// finds their rows by the tuple IDs the claim returned (a TID scan), in
// the generic plan the store gets after a few calls, with statistics
// taken while the table was empty (a fresh install, or any table before
// autoanalyze). With the IDs as an array that plan scanned every
// primary-key entry of the namespace and filtered by ID: some 500
// buffers a statement at 150 jobs/s in the benchmark's steady runs.
func TestFinishFindsRowsByTID(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "ftid")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+s.t("instances")); err != nil { // statistics of the empty table
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	for b := range 5 {
		var ins []*store.Instance
		for i := range 1000 {
			ins = append(ins, &store.Instance{ID: fmt.Sprintf("j-%d-%04d", b, i), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now})
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 2, Now: now, LeaseUntil: now.Add(time.Hour)})
	if err != nil || len(res.Instances) != 2 {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	ids := []string{res.Instances[0].ID, res.Instances[1].ID}
	atts := []int32{int32(res.Instances[0].Attempt), int32(res.Instances[1].Attempt)}
	tids := s.tids.take(ids, atts)
	if tids == nil {
		t.Fatal("the claim left no tuple IDs for its attempts")
	}
	n := len(ids)
	args := []any{s.cfg.ns, ids, atts, []int16{int16(store.Completed), int16(store.Completed)}, make([]int64, n), make([]bool, n),
		make([][]byte, n), make([]string, n), "w", nanos(now), s.channel, "0:", tids}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Prepare(ctx, "jk_finish", s.stmt().finishTID+fewSuffix); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	params := make([]string, len(args))
	for i, a := range args {
		params[i] = sqlLiteral(t, a)
	}
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE jk_finish("+strings.Join(params, ", ")+")").Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc []struct{ Plan node }
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	var tid, index bool
	var walk func(nd *node)
	walk = func(nd *node) {
		tid = tid || nd.Type == "Tid Scan" && nd.Alias == "i"
		index = index || nd.Alias == "i" && strings.Contains(nd.Type, "Index")
		for i := range nd.Plans {
			walk(&nd.Plans[i])
		}
	}
	walk(&doc[0].Plan)
	if !tid || index {
		t.Fatalf("the finish's update: TID scan %v, index scan %v; want the TID scan only. Plan: %s", tid, index, plan)
	}
	if !strings.Contains(string(plan), `"Actual Rows": 2`) {
		t.Fatalf("the finish applied no outcome, or not both. Plan: %s", plan)
	}
}

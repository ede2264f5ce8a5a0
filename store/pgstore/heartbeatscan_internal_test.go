package pgstore

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestHeartbeatReadsNoRunningRows: with no node declared dead, a
// heartbeat's statement reads no instance row. It asked whether a dead
// node holds attempts by reading every running row (the owner has no
// index): with 2,000 running, hundreds of buffers a heartbeat, once a
// second per node.
func TestHeartbeatReadsNoRunningRows(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "hbscan")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var ins []*store.Instance
	for i := range 2000 {
		ins = append(ins, &store.Instance{ID: uuidLike("h", i), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now})
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w1", Limit: 2000, Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil || len(res.Instances) != 2000 {
		t.Fatalf("claim: %v", err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+s.t("instances")); err != nil {
		t.Fatal(err)
	}
	hb := &store.HeartbeatParams{Node: store.NodeInfo{ID: "w1"}, Now: now, DeadAfter: time.Minute}
	if _, err := s.Heartbeat(ctx, hb); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var plan []map[string]any
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+s.heartbeatSQL(),
		s.cfg.ns, "w1", []byte(`{}`), int16(store.NodeLive), nanos(now), int64(hb.RetainOrDefault()), int64(hb.DeadAfter)).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	root := plan[0]["Plan"].(map[string]any)
	if hit := root["Shared Hit Blocks"].(float64) + root["Shared Read Blocks"].(float64); hit > 40 {
		b, _ := json.MarshalIndent(plan, "", " ")
		t.Fatalf("a heartbeat with 2,000 attempts running and no dead node read %v buffers; want no instance row read (a few buffers of nodes)\n%s", hit, b)
	}
}

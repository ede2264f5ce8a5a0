package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/pgstore"
)

// depthQueues holds, per depth, the schema whose namespace "depth" was
// filled by this process: the testing package calls a benchmark once
// with b.N = 1 before the measured call, and the fill of 1M must not run
// twice.
var depthQueues sync.Map // int -> string (schema)

// BenchmarkClaimDepth measures the claim-of-64 and finish cycle at a
// queue depth that stays constant: each sub-benchmark fills a schema of
// its own with depth Scheduled instances through store.Enqueue (batches
// of 1,000 from 4 goroutines), then claims and finishes b.N instances 64
// at a time, enqueuing 64 new ones after each cycle (outside the timed
// part) so the depth does not fall. It reports the claim and finish cost
// per instance and the schema's pg_total_relation_size per pending job
// after the fill (after a VACUUM ANALYZE). With JOBKIT_BENCH_EXPLAIN=1 it
// logs EXPLAIN (ANALYZE, BUFFERS) of the claim statement, through
// auto_explain on a store.Claim of its own in a rolled-back transaction,
// after the cycles: the first (custom) plan and the seventh (the one a
// prepared statement keeps).
//
//	JOBKIT_PG_URL=... go test -run '^$' -bench ClaimDepth -benchtime 20000x -timeout 60m ./store/pgstore/
func BenchmarkClaimDepth(b *testing.B) {
	for _, depth := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) { benchClaimDepth(b, depth) })
	}
}

func benchClaimDepth(b *testing.B, depth int) {
	p := testPool(b)
	ctx := b.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	inst := func(prefix string, i int) *store.Instance {
		return &store.Instance{ID: fmt.Sprintf("%s-%09d", prefix, i), Kind: "k", Queue: "q", Args: []byte(`[1]`),
			RunAt: now, CreatedAt: now, MaxRetries: 3}
	}
	schema := fmt.Sprintf("jobkit_depth_%d", depth)
	_, filled := depthQueues.Load(depth)
	if !filled {
		if _, err := p.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			b.Fatal(err)
		}
		if err := pgstore.Migrate(ctx, p, pgstore.WithSchema(schema)); err != nil {
			b.Fatal(err)
		}
	}
	s, err := pgstore.New(ctx, p, pgstore.WithSchema(schema), pgstore.WithNamespace("depth"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if !filled {
		t0 := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				for {
					lo := int(next.Add(1000)) - 1000
					if lo >= depth {
						return
					}
					var ins []*store.Instance
					for j := lo; j < min(lo+1000, depth); j++ {
						ins = append(ins, inst("f", j))
					}
					if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		fill := time.Since(t0)
		if _, err := p.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{schema, "instances"}.Sanitize()); err != nil {
			b.Fatal(err)
		}
		var size int64
		if err := p.QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid))::int8 FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, schema).Scan(&size); err != nil {
			b.Fatal(err)
		}
		b.Logf("depth %d: filled in %v (%.0f jobs/s); %d bytes in the schema's tables, %.0f per pending job",
			depth, fill.Round(time.Millisecond), float64(depth)/fill.Seconds(), size, float64(size)/float64(depth))
		depthQueues.Store(depth, schema)
	}
	var seq atomic.Uint64
	seq.Store(uint64(time.Now().UnixNano())) // above any ClaimSeq of an earlier call
	b.ResetTimer()
	var claimT, finishT time.Duration
	refill := 0
	for done := 0; done < b.N; {
		t0 := time.Now()
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 64, Now: now, LeaseUntil: now.Add(time.Minute), ClaimSeq: seq.Add(1)})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		outs := make([]store.Outcome, len(res.Instances))
		for i, in := range res.Instances {
			outs[i] = store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed}
		}
		if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: now, Outcomes: outs}); err != nil {
			b.Fatal(err)
		}
		claimT += t1.Sub(t0)
		finishT += time.Since(t1)
		done += len(res.Instances)
		if len(res.Instances) == 0 {
			b.Fatalf("queue empty after %d", done)
		}
		b.StopTimer()
		ins := make([]*store.Instance, len(res.Instances))
		for i := range ins {
			ins[i] = inst(fmt.Sprintf("r%d", seq.Load()), refill)
			refill++
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(claimT.Microseconds())/float64(b.N), "claim-µs/inst")
	b.ReportMetric(float64(finishT.Microseconds())/float64(b.N), "finish-µs/inst")
	if b.N > 1 && os.Getenv("JOBKIT_BENCH_EXPLAIN") == "1" {
		b.StopTimer()
		explainClaim(b, s, now)
	}
}

// explainClaim runs seven store.Claim calls of 64 in a transaction of a
// connection of its own with auto_explain on, rolls it back, and logs the
// plans auto_explain sent of the first and the seventh claim statement.
func explainClaim(b *testing.B, s *pgstore.Store, now time.Time) {
	cfg, err := pgx.ParseConfig(dbURL(b))
	if err != nil {
		b.Fatal(err)
	}
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.Contains(n.Message, "picked") {
			plans = append(plans, n.Message)
		}
	}
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, q := range []string{"LOAD 'auto_explain'", "SET LOCAL auto_explain.log_min_duration = 0", "SET LOCAL auto_explain.log_analyze = on",
		"SET LOCAL auto_explain.log_buffers = on", "SET LOCAL client_min_messages = log"} {
		if _, err := tx.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	for range 7 {
		if _, err := s.Claim(pgstore.WithTx(ctx, tx), &store.ClaimParams{Queue: "q", Owner: "explain", Limit: 64, Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
			b.Fatal(err)
		}
	}
	if len(plans) < 7 {
		b.Fatalf("auto_explain sent %d plans of the claim statement, want 7", len(plans))
	}
	b.Logf("claim plan, first call:\n%s\nclaim plan, seventh call:\n%s", plans[0], plans[6])
}

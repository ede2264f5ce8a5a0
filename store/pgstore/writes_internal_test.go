package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// internalPool returns a pool on JOBKIT_PG_URL and a fresh schema name,
// dropped when t ends.
func internalPool(t *testing.T, prefix string) (*pgxpool.Pool, string) {
	t.Helper()
	u := testserver.Postgres(t)
	pool, err := pgxpool.New(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf("jk_%s_%d", prefix, time.Now().UnixNano())
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	})
	return pool, schema
}

// nextEvent returns the next event of ch within 10 s.
func nextEvent(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok || e.Err != nil {
			t.Fatalf("feed ended: open %v, %v", ok, e.Err)
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return store.Event{}
}

// TestEnqueueOneHistoryRow: an enqueue writes no history row, and one row
// of enqueued for the whole statement (migration 0012; one history row per
// instance from migration 0007 to 11), which the history lookups and the
// event feed read as the two records the contract asks for per instance,
// Created then Scheduled, each with a Seq and a cursor of its own.
func TestEnqueueOneHistoryRow(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "fold")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema), WithNamespace("fold"), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cur, err := s.EventCursor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	const n = 50
	var ins []*store.Instance
	for i := range n {
		ins = append(ins, &store.Instance{ID: fmt.Sprintf("j-%02d", i), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now})
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	var rows, batches int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+s.t("history")+" WHERE ns = 'fold'), (SELECT count(*) FROM "+
		s.t("enqueued")+" WHERE ns = 'fold')").Scan(&rows, &batches); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || batches != 1 {
		t.Fatalf("%d history rows and %d enqueued rows after enqueuing %d instances in one call; want none and one", rows, batches, n)
	}

	hist, err := s.LookupHistory(ctx, &store.Query{InstanceID: "j-07"})
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].State != store.Created || hist[1].State != store.Scheduled ||
		hist[0].Seq >= hist[1].Seq || hist[0].Node != "n1" || !hist[0].Time.Equal(now) || hist[0].Attempt != 0 {
		t.Fatalf("history of j-07: %+v; want Created then Scheduled by n1 at %v, Seqs increasing", records(hist), now)
	}
	created, err := s.LookupHistory(ctx, &store.Query{States: []store.State{store.Created}})
	if err != nil || len(created) != n || slices.ContainsFunc(created, func(h *store.HistoryRecord) bool { return h.State != store.Created }) {
		t.Fatalf("Created records: %d, %v; want %d, all Created", len(created), err, n)
	}
	sched, err := s.LookupHistory(ctx, &store.Query{States: []store.State{store.Scheduled}, Limit: 3})
	if err != nil || len(sched) != 3 || slices.ContainsFunc(sched, func(h *store.HistoryRecord) bool { return h.State != store.Scheduled }) {
		t.Fatalf("Scheduled records, limit 3: %+v, %v; want 3 Scheduled", records(sched), err)
	}
	lim, err := s.LookupHistory(ctx, &store.Query{Limit: 3})
	if err != nil || len(lim) != 3 || lim[0].State != store.Created || lim[1].State != store.Scheduled || lim[2].State != store.Created {
		t.Fatalf("records, limit 3: %+v, %v; want Created, Scheduled, Created", records(lim), err)
	}

	// The feed: 2n events in order; following from a Created event's
	// cursor delivers its Scheduled event next.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := s.Follow(fctx, &store.FollowParams{Cursor: cur})
	if err != nil {
		t.Fatal(err)
	}
	var evs []store.Event
	for range 2 * n {
		evs = append(evs, nextEvent(t, ch))
	}
	for i, e := range evs {
		want := store.Created
		if i%2 == 1 {
			want = store.Scheduled
		}
		if e.InstanceID != ins[i/2].ID || e.State != want || i > 0 && e.Seq <= evs[i-1].Seq {
			t.Fatalf("event %d: %s %v Seq %d (previous Seq %d); want %s %v, Seqs increasing", i, e.InstanceID, e.State, e.Seq, evs[max(i-1, 0)].Seq, ins[i/2].ID, want)
		}
	}
	cancel()
	ch2, err := s.Follow(ctx, &store.FollowParams{Cursor: evs[10].Cursor})
	if err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, ch2); e.InstanceID != evs[11].InstanceID || e.State != store.Scheduled || e.Seq != evs[11].Seq {
		t.Fatalf("after the cursor of %s Created: %s %v Seq %d; want %s Scheduled Seq %d", evs[10].InstanceID, e.InstanceID, e.State, e.Seq, evs[11].InstanceID, evs[11].Seq)
	}

	// A prune counts both records of a row.
	res, err := s.Prune(ctx, &store.PruneParams{Now: now, HistoryBefore: now.Add(time.Second), Limit: 1000})
	if err != nil || res.History != 2*n {
		t.Fatalf("prune of the history: %+v, %v; want %d records", res, err, 2*n)
	}
}

func records(hs []*store.HistoryRecord) []string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%s:%v@%d", h.InstanceID, h.State, h.Seq))
	}
	return out
}

// TestUpgradeFromVersion6: history written by version 6 (one row per
// record) reads the same after migration 0007, and an event cursor given
// out then ("pg1-") follows from where it was.
func TestUpgradeFromVersion6(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "up6")
	q := pgx.Identifier{schema}.Sanitize()
	migrateToVersion(t, pool, schema, 6)
	// What version 6 wrote for an enqueue and a claim: one row per record.
	var pos []int64
	for _, st := range []int{1, 2, 3} {
		var p int64
		if err := pool.QueryRow(ctx, "INSERT INTO "+q+".history (ns, instance_id, kind, queue, state, attempt, t, node) VALUES ('up', 'old', 'k', 'q', $1, $2, 1000, 'n1') RETURNING pos",
			st, max(st-2, 0)).Scan(&p); err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema), WithNamespace("up"), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hist, err := s.LookupHistory(ctx, &store.Query{InstanceID: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if got := records(hist); !slices.Equal(got, []string{
		"old:created@" + strconv.FormatInt(2*pos[0]+1, 10),
		"old:scheduled@" + strconv.FormatInt(2*pos[1]+1, 10),
		"old:processing@" + strconv.FormatInt(2*pos[2]+1, 10),
	}) {
		t.Fatalf("history of version 6 after the migration: %v", got)
	}
	old := "pg1-" + s.cursorTag() + "-" + strconv.FormatInt(pos[0], 10)
	ch, err := s.Follow(ctx, &store.FollowParams{Cursor: old})
	if err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, ch); e.InstanceID != "old" || e.State != store.Scheduled || e.Seq != uint64(2*pos[1]+1) {
		t.Fatalf("first event after the version 6 cursor %s: %s %v Seq %d; want old Scheduled Seq %d", old, e.InstanceID, e.State, e.Seq, 2*pos[1]+1)
	}
	if e := nextEvent(t, ch); e.State != store.Processing {
		t.Fatalf("second event: %s %v; want old Processing", e.InstanceID, e.State)
	}
	var owner bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q+".instances_owner").Scan(&owner); err != nil || owner {
		t.Fatalf("instances_owner still there after migration 0007 (%v)", err)
	}
}

// TestEnqueueCopyStoresWhatTheStatementStores: a batch stored with COPY
// (enqueueCopy) reads back field for field as the same batch stored by
// the one-statement path, Seqs increase in batch order, an ID stored
// already makes the batch take the statement path (that instance
// Existed), and the claim's label filter sees the COPY's label_expr.
func TestEnqueueCopyStoresWhatTheStatementStores(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "copy")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	open := func(ns string) *Store {
		s, err := New(ctx, pool, WithSchema(schema), WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	batch := func() []*store.Instance {
		var ins []*store.Instance
		for i := range 2 * copyMin {
			in := &store.Instance{ID: fmt.Sprintf("j-%03d", i), Kind: fmt.Sprintf("k%d", i%3), Queue: fmt.Sprintf("q%d", i%2),
				Priority: i % 5, RunAt: now.Add(time.Duration(i) * time.Millisecond), CreatedAt: now.Add(-time.Second),
				MaxRetries: i % 4, Timeout: time.Duration(i) * time.Second}
			if i%2 == 0 {
				in.Args = []byte(fmt.Sprintf(`{"n":%d}`, i))
			}
			switch i % 4 {
			case 1:
				in.Labels = []string{"region=eu", "gpu"}
			case 2:
				in.Labels = []string{"!gpu"}
			case 3:
				in.Metadata = map[string]string{"tenant": "t" + strconv.Itoa(i), "z": "\u0000"}
				in.ID, in.Parent, in.ShardIndex, in.ShardCount = store.ShardID("p", i), "p", i, 200
			}
			ins = append(ins, in)
		}
		return ins
	}
	copied, stated := open("copy"), open("stmt")
	p := &store.EnqueueParams{Instances: batch(), Now: now, Node: "n1"}
	if !canCopy(ctx, p) {
		t.Fatal("canCopy refuses a plain batch of 2*copyMin")
	}
	res, err := copied.enqueueCopy(ctx, p) // what Enqueue runs for p
	if err != nil {
		t.Fatal(err)
	}
	res0 := res
	for i := range res {
		if res[i].Err != nil || res[i].Existed || res[i].ID != p.Instances[i].ID || i > 0 && res[i].Seq <= res[i-1].Seq {
			t.Fatalf("result %d: %+v (previous Seq %d); want stored, Seqs increasing", i, res[i], res[max(i-1, 0)].Seq)
		}
	}
	all := batch()
	for i := 0; i < len(all); i += 10 {
		if _, err := stated.Enqueue(ctx, &store.EnqueueParams{Instances: all[i:min(i+10, len(all))], Now: now, Node: "n1"}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := copied.LookupInstances(ctx, &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := stated.LookupInstances(ctx, &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(all) || len(b) != len(all) {
		t.Fatalf("%d instances stored with COPY, %d with the statement; want %d each", len(a), len(b), len(all))
	}
	for i := range a {
		x, y := *a[i], *b[i]
		x.Seq, y.Seq = 0, 0
		if fmt.Sprintf("%+v", x) != fmt.Sprintf("%+v", y) {
			t.Fatalf("stored with COPY:\n%+v\nwith the statement:\n%+v", x, y)
		}
	}
	ha, err := copied.LookupHistory(ctx, &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := stated.LookupHistory(ctx, &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ha) != 2*len(all) || len(hb) != len(ha) {
		t.Fatalf("history: %d records after COPY, %d after the statement; want %d each", len(ha), len(hb), 2*len(all))
	}
	for i, in := range p.Instances {
		c, sc := ha[2*i], ha[2*i+1]
		if c.InstanceID != in.ID || sc.InstanceID != in.ID || c.State != store.Created || sc.State != store.Scheduled ||
			c.Node != "n1" || !c.Time.Equal(now) || c.Seq >= sc.Seq || i > 0 && c.Seq <= ha[2*i-1].Seq {
			t.Fatalf("history records %d and %d after COPY: %+v, %+v; want %s Created then Scheduled by n1, in batch order", 2*i, 2*i+1, *c, *sc, in.ID)
		}
	}
	ca, err := copied.Counts(ctx, &store.CountsParams{})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := stated.Counts(ctx, &store.CountsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ca) != 6 || fmt.Sprint(ca) != fmt.Sprint(cb) {
		t.Fatalf("counts after COPY %v, after the statement %v; want the same, 6 groups", ca, cb)
	}
	// Label expressions: "!gpu" (every fourth, from j-002) is taken by a
	// claimer without gpu, "region=eu,gpu" is not.
	cl, err := copied.Claim(ctx, &store.ClaimParams{Queue: "q0", Owner: "w", Limit: 1000, Now: now.Add(time.Hour),
		LeaseUntil: now.Add(2 * time.Hour), Labels: []string{"region=us"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range cl.Instances {
		if slices.Contains(in.Labels, "gpu") || slices.Contains(in.Labels, "region=eu") {
			t.Fatalf("claim without gpu took %s with labels %v", in.ID, in.Labels)
		}
	}
	if len(cl.Instances) != copyMin {
		t.Fatalf("claim of q0 without gpu took %d; want %d (the even ones: no labels, or !gpu)", len(cl.Instances), copyMin)
	}

	// A batch holding a stored ID goes the statement's way.
	again := batch()[:copyMin]
	again = append(again, &store.Instance{ID: "new", Kind: "k", Queue: "q0", RunAt: now, CreatedAt: now})
	pa := &store.EnqueueParams{Instances: again, Now: now}
	if _, err := copied.enqueueCopy(ctx, pa); !errors.Is(err, errCopyConflict) {
		t.Fatalf("COPY of a batch holding stored IDs: %v; want errCopyConflict", err)
	}
	res, err = copied.Enqueue(ctx, pa)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:copyMin] {
		if !r.Existed || r.Seq != res0[i].Seq {
			t.Fatalf("result %d of a repeated batch: %+v; want Existed with the stored Seq", i, r)
		}
	}
	if r := res[copyMin]; r.Existed || r.Err != nil || r.Seq == 0 {
		t.Fatalf("the new instance of a repeated batch: %+v; want stored", r)
	}
}

// TestClaimFindsRowsByTID: the claim's update finds the rows its pick
// locked by their tuple IDs (a TID scan), not by walking down the primary
// key once per row, in the generic plan the store gets after a few calls,
// behind a queue of 10,000 waiting instances.
func TestClaimFindsRowsByTID(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "tid")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	for b := range 11 {
		var ins []*store.Instance
		for i := range 1000 {
			at := now.Add(time.Hour) // waiting
			if b == 0 && i < 64 {
				at = now // ready
			}
			ins = append(ins, &store.Instance{ID: fmt.Sprintf("j-%d-%04d", b, i), Kind: "k", Queue: "q", RunAt: at, CreatedAt: now})
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+s.t("instances")); err != nil {
		t.Fatal(err)
	}
	plan := explainClaim(t, pool, s, now)
	var doc []struct{ Plan node }
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	var tid, pkey bool
	var walk func(nd *node)
	walk = func(nd *node) {
		tid = tid || nd.Type == "Tid Scan" && nd.Alias == "i"
		pkey = pkey || nd.Alias == "i" && strings.Contains(nd.Type, "Index")
		for i := range nd.Plans {
			walk(&nd.Plans[i])
		}
	}
	walk(&doc[0].Plan)
	if !tid || pkey {
		t.Fatalf("the claim's update: TID scan %v, index scan %v; want the TID scan only. Plan: %s", tid, pkey, plan)
	}
}

// TestPruneHistoryLimitCountsRecords: Prune's Limit bounds the history
// records a call removes, and a row holds two (Created and Scheduled):
// a limit that ends inside such a row removes its Created record alone.
func TestPruneHistoryLimitCountsRecords(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "prune")
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i := range 4 {
		in := &store.Instance{ID: fmt.Sprintf("j-%d", i), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now.Add(time.Duration(i) * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
	}
	left := func() []string {
		hs, err := s.LookupHistory(ctx, &store.Query{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range hs {
			out = append(out, h.InstanceID+":"+h.State.String())
		}
		return out
	}
	before := now.Add(time.Hour)
	for _, c := range []struct {
		limit int
		want  []string
	}{
		{3, []string{"j-1:scheduled", "j-2:created", "j-2:scheduled", "j-3:created", "j-3:scheduled"}},
		{1, []string{"j-2:created", "j-2:scheduled", "j-3:created", "j-3:scheduled"}},
		{1, []string{"j-2:scheduled", "j-3:created", "j-3:scheduled"}},
		{2, []string{"j-3:scheduled"}},
	} {
		res, err := s.Prune(ctx, &store.PruneParams{Now: now, HistoryBefore: before, Limit: c.limit})
		if err != nil {
			t.Fatal(err)
		}
		got := left()
		removed := res.History
		if removed > c.limit || !slices.Equal(got, c.want) {
			t.Fatalf("prune with limit %d: removed %d, left %v; want at most %d removed, %v left", c.limit, removed, got, c.limit, c.want)
		}
	}
}

// explainClaim runs s's claim of up to 32 instances of queue "q" at now
// as the store runs it (a prepared statement's generic plan) under
// EXPLAIN (ANALYZE, BUFFERS) in a transaction it rolls back, and returns
// the plan as JSON.
func explainClaim(t *testing.T, pool *pgxpool.Pool, s *Store, now time.Time) []byte {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Prepare(ctx, "jk_claim", s.stmt().claim); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	args := []any{s.cfg.ns, "q", nanos(now), int64(32), []string{}, []string{}, "w", nanos(now.Add(time.Minute)), int64(0), []string{}, []string{}}
	params := make([]string, len(args))
	for i, a := range args {
		params[i] = sqlLiteral(t, a)
	}
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE jk_claim("+strings.Join(params, ", ")+")").Scan(&plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

// migrateToVersion builds schema as version n of the code left it: the
// first n migrations and the version row, for the upgrade tests to write
// what that version wrote before Migrate takes the schema on.
func migrateToVersion(t *testing.T, pool *pgxpool.Pool, schema string, n int) {
	t.Helper()
	q := pgx.Identifier{schema}.Sanitize()
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), "CREATE SCHEMA "+q+"; CREATE TABLE "+q+".jobkit_version (version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return err
		}
		for _, m := range migrations()[:n] {
			if _, err := tx.Exec(t.Context(), strings.ReplaceAll(m.sql, "SCHEMA.", q+".")); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
		}
		_, err := tx.Exec(t.Context(), "INSERT INTO "+q+".jobkit_version (version) VALUES ($1)", n)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

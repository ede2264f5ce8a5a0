package pgstore

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// claimRecordStorage reports how owner's claim record holds its IDs:
// their compression ("" when none) and whether the claims table's toast
// table holds any row.
func claimRecordStorage(t *testing.T, s *Store, owner string) (compression string, toasted int) {
	t.Helper()
	ctx := t.Context()
	var c *string
	if err := s.pool.QueryRow(ctx, `SELECT pg_column_compression(ids) FROM `+s.t("claims")+` WHERE ns = $1 AND owner = $2`,
		s.cfg.ns, owner).Scan(&c); err != nil {
		t.Fatal(err)
	}
	var toast string
	if err := s.pool.QueryRow(ctx, `SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = $1::regclass`, s.t("claims")).Scan(&toast); err != nil {
		t.Fatal(err)
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+toast).Scan(&toasted); err != nil {
		t.Fatal(err)
	}
	if c != nil {
		compression = *c
	}
	return compression, toasted
}

// uuidLike returns 36-character IDs, as job.NewID makes.
func uuidLike(prefix string, i int) string {
	return fmt.Sprintf("%08d-0000-4000-8000-%s%s", i, prefix, strings.Repeat("0", 12-len(prefix)))
}

// TestClaimRecordStaysInline: the claim record of a claim of 64
// instances (IDs of 36 characters, over PostgreSQL's 2 kB toast
// threshold) is written on its row as it is: no compression, no toast
// row (migration 0015). Before, each such claim compressed the IDs
// (pglz), and the repeat of a claim decompressed them.
func TestClaimRecordStaysInline(t *testing.T) {
	ctx := t.Context()
	pool, schema := internalPool(t, "cinl")
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
	for i := range 200 {
		ins = append(ins, &store.Instance{ID: uuidLike("a", i), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now})
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
		t.Fatal(err)
	}
	for seq := range uint64(3) {
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 64, Now: now, LeaseUntil: now.Add(time.Hour), ClaimSeq: seq + 1})
		if err != nil || len(res.Instances) != 64 {
			t.Fatalf("claim %d: %d instances, %v; want 64", seq+1, len(res.Instances), err)
		}
		if c, n := claimRecordStorage(t, s, "w"); c != "" || n != 0 {
			t.Fatalf("after claim %d of 64: the claim record's IDs compressed %q, %d rows in the toast table; want neither", seq+1, c, n)
		}
	}
	// The repeat of the last claim answers from the record.
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 64, Now: now, LeaseUntil: now.Add(time.Hour), ClaimSeq: 3})
	if err != nil || len(res.Instances) != 64 || res.Instances[0].ID != uuidLike("a", 128) {
		t.Fatalf("repeat of claim 3: %d instances, %v; want the 64 it took, from %s", len(res.Instances), err, uuidLike("a", 128))
	}
}

// TestUpgradeFromVersion14: a database of version 14 whose claim record
// was stored compressed (a claim of 80 instances)
// upgrades to 15 with its jobs in every state: the repeat of that claim
// still answers from the record, the next claim writes the record inline,
// and the waiting, running and finished jobs run and read as before.
func TestUpgradeFromVersion14(t *testing.T) {
	ctx := t.Context()
	old := newOldSchema(t, "up14", 11)
	now := time.Now().UTC().Truncate(time.Millisecond)
	old.writeJobs(now, true)
	old.exec(`INSERT INTO ` + old.q + `.counts VALUES ('up', 'q', 'k', 2, 2), ('up', 'q', 'k', 4, 1)`)
	old.exec(`INSERT INTO ` + old.q + `.queues (ns, name, prios) VALUES ('up', 'q', '{0}')`)
	// Versions 12 to 14 over it, as Migrate would have applied them.
	for _, m := range migrations()[11:14] {
		old.exec(strings.ReplaceAll(m.sql, "SCHEMA.", old.q+"."))
	}
	old.exec(`INSERT INTO ` + old.q + `.jobkit_version (version) VALUES (14)`)
	// w1's claim 7 took run and 79 more that have ended since.
	ids, atts := []string{"run"}, []int32{1}
	for i := range 79 {
		ids, atts = append(ids, uuidLike("gone", i)), append(atts, 1)
	}
	old.exec(`INSERT INTO `+old.q+`.claims (ns, owner, seq, until, ids, attempts) VALUES ('up', 'w1', 7, $1, $2, $3)`,
		nanos(now.Add(time.Hour)), ids, atts)

	if err := Migrate(ctx, old.pool, WithSchema(old.name)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, old.pool, WithSchema(old.name), WithNamespace("up"), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if c, _ := claimRecordStorage(t, s, "w1"); c != "pglz" {
		t.Fatalf("version 14's claim record: compression %q; want pglz (the fixture is not what it says)", c)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w1", Limit: 80, Now: now, LeaseUntil: now.Add(time.Hour), ClaimSeq: 7})
	if err != nil || len(res.Instances) != 1 || res.Instances[0].ID != "run" {
		t.Fatalf("repeat of version 14's claim: %+v, %v; want run, the one it took still running", res, err)
	}
	later := now.Add(time.Second)
	res, err = s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w1", Limit: 80, Now: later, LeaseUntil: later.Add(time.Hour), ClaimSeq: 8})
	if err != nil || len(res.Instances) != 1 || res.Instances[0].ID != "pend" {
		t.Fatalf("claim after the upgrade: %+v, %v; want pend", res, err)
	}
	if c, n := claimRecordStorage(t, s, "w1"); c != "" || n != 0 {
		t.Fatalf("the claim record after a claim of version 15: compression %q, %d toast rows; want inline", c, n)
	}
	r, err := s.Finish(ctx, &store.FinishParams{Owner: "w1", Now: later.Add(time.Second), Outcomes: []store.Outcome{
		{ID: "run", Attempt: 1, State: store.Completed}, {ID: "pend", Attempt: 1, State: store.Completed}}})
	if err != nil || len(r) != 2 || r[0].Err != nil || r[1].Err != nil || r[0].State != store.Completed || r[1].State != store.Completed {
		t.Fatalf("finish of run and pend after the upgrade: %+v, %v", r, err)
	}
	for id, want := range map[string][]string{
		"pend": {"pend:created", "pend:scheduled", "pend:processing", "pend:completed"},
		"run":  {"run:created", "run:scheduled", "run:processing", "run:completed"},
		"done": {"done:created", "done:scheduled", "done:processing", "done:completed"},
	} {
		hist, err := s.LookupHistory(ctx, &store.Query{InstanceID: id})
		if err != nil {
			t.Fatal(err)
		}
		if got := stateNames(hist); !slices.Equal(got, want) {
			t.Fatalf("history of %s: %v; want %v", id, records(hist), want)
		}
	}
}

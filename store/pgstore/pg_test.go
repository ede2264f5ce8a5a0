package pgstore_test

// PostgreSQL-specific behaviour: migrations, schema checks, the caller's
// pool, transactional scheduling, statement timeouts, corrupt rows and the
// listening connection.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/pgstore"
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freshSchema returns a schema name no test used, dropped when t ends.
func freshSchema(t *testing.T) string {
	t.Helper()
	name := "jk_" + randHex(6)
	p := testPool(t)
	t.Cleanup(func() {
		_, _ = p.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	return name
}

// waitFor polls cond every 10 ms until it holds or 20 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20 s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	p := testPool(t)
	schema := freshSchema(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() { errs[i] = pgstore.Migrate(t.Context(), p, pgstore.WithSchema(schema)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate %d: %v", i, err)
		}
	}
	if err := pgstore.Migrate(t.Context(), p, pgstore.WithSchema(schema)); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	var rows, version int
	if err := p.QueryRow(t.Context(), "SELECT count(*), max(version) FROM "+pgx.Identifier{schema}.Sanitize()+".jobkit_version").Scan(&rows, &version); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || version != pgstore.SchemaVersion() {
		t.Fatalf("version table has %d rows, version %d; want 1 row at %d", rows, version, pgstore.SchemaVersion())
	}
	if _, err := pgstore.New(t.Context(), p, pgstore.WithSchema(schema)); err != nil {
		t.Fatalf("New on the migrated schema: %v", err)
	}
}

func TestNewRefusesMissingOlderNewerSchema(t *testing.T) {
	p := testPool(t)
	schema := freshSchema(t)
	_, err := pgstore.New(t.Context(), p, pgstore.WithSchema(schema))
	if !errors.Is(err, pgstore.ErrSchema) || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("New on a missing schema: %v; want ErrSchema telling to run Migrate", err)
	}
	if err := pgstore.Migrate(t.Context(), p, pgstore.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	vt := pgx.Identifier{schema}.Sanitize() + ".jobkit_version"
	if _, err := p.Exec(t.Context(), "UPDATE "+vt+" SET version = 0"); err != nil {
		t.Fatal(err)
	}
	_, err = pgstore.New(t.Context(), p, pgstore.WithSchema(schema))
	if !errors.Is(err, pgstore.ErrSchema) || !strings.Contains(err.Error(), "version 0") || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("New on an older schema: %v; want ErrSchema naming version 0 and Migrate", err)
	}
	if _, err := p.Exec(t.Context(), "UPDATE "+vt+" SET version = 99"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("version 99, migrated by a newer release; this code knows versions up to %d", pgstore.SchemaVersion())
	_, err = pgstore.New(t.Context(), p, pgstore.WithSchema(schema))
	if !errors.Is(err, pgstore.ErrSchema) || !strings.Contains(err.Error(), want) {
		t.Fatalf("New on a newer schema: %v; want ErrSchema saying %q", err, want)
	}
	err = pgstore.Migrate(t.Context(), p, pgstore.WithSchema(schema))
	if !errors.Is(err, pgstore.ErrSchema) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Migrate of a newer schema: %v; want ErrSchema saying %q", err, want)
	}
}

func TestNewUnreachableDatabase(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := pgxpool.New(t.Context(), fmt.Sprintf("postgres://nobody@127.0.0.1:%d/x?sslmode=disable&connect_timeout=2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = pgstore.New(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "reachable") {
		t.Fatalf("New on an unreachable database: %v; want an error asking whether it is reachable", err)
	}
}

func TestStoreNeverClosesPool(t *testing.T) {
	p := testPool(t)
	s, err := pgstore.New(t.Context(), p, pgstore.WithSchema(testSchema), pgstore.WithNamespace("close-"+randHex(4)))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := s.Subscribe(t.Context(), "q") // starts the listening connection
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-sub:
		if ok {
			<-sub
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a subscription outlived Close")
	}
	if err := p.Ping(t.Context()); err != nil {
		t.Fatalf("the pool after the store's Close: %v; the store must not close its caller's pool", err)
	}
}

// runs counts the executions of each instance.
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) add(id string) {
	r.mu.Lock()
	r.n[id]++
	r.mu.Unlock()
}

func (r *runs) get(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// startManager starts a manager on s running kind "work" (two ints,
// counted in r) and returns it; it stops when t ends.
func startManager(t *testing.T, s store.Store, r *runs) *job.Manager {
	t.Helper()
	m, err := job.NewManager(job.WithStore(s), job.WithWorkers(4), job.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("work"), job.WithExecutor(func(ctx context.Context, ji job.Instance, a, b int) (int, error) {
		r.add(ji.Info().ID)
		return a + b, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	return m
}

func stateOf(t testing.TB, m *job.Manager, id string) job.State {
	t.Helper()
	ji, err := m.GetInstance(t.Context(), id)
	if err != nil {
		return 0
	}
	return ji.State
}

// TestScheduleInCallerTx: a job scheduled in the caller's transaction is
// never seen, nor run, while the transaction is open; a rollback leaves
// nothing; a commit runs it.
func TestScheduleInCallerTx(t *testing.T) {
	p := testPool(t)
	s := open(t, "tx-"+randHex(4))
	r := &runs{n: map[string]int{}}
	m := startManager(t, s, r)

	rolled, err := p.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(pgstore.WithTx(t.Context(), rolled), "work", job.WithArguments(1, 2))
	if err != nil {
		t.Fatalf("ScheduleJob in a transaction: %v", err)
	}
	rolledID := ji.ID
	// Roll it back, then show the workers run other jobs and never the
	// rolled-back one.
	if err := rolled.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	other, err := m.ScheduleJob(t.Context(), "work", job.WithArguments(3, 4))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the job scheduled outside the transaction to complete", func() bool { return stateOf(t, m, other.ID) == job.Completed })
	if _, err := m.GetInstance(t.Context(), rolledID); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("LookupInstance of the rolled-back job: %v; want ErrNotFound", err)
	}
	if n := r.get(rolledID); n != 0 {
		t.Fatalf("the rolled-back job ran %d times", n)
	}
	hist, err := s.LookupHistory(t.Context(), &store.Query{InstanceID: rolledID})
	if err != nil || len(hist) != 0 {
		t.Fatalf("history of the rolled-back job: %d records, %v; want none", len(hist), err)
	}

	committed, err := p.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ji, err = m.ScheduleJob(pgstore.WithTx(t.Context(), committed), "work", job.WithArguments(5, 6))
	if err != nil {
		t.Fatal(err)
	}
	// Not visible outside the transaction before the commit.
	var n int
	if err := p.QueryRow(t.Context(), "SELECT count(*) FROM "+testSchema+".instances WHERE id = $1", ji.ID).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the uncommitted job is visible outside its transaction (%d rows, %v)", n, err)
	}
	if err := committed.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the committed job to complete", func() bool { return stateOf(t, m, ji.ID) == job.Completed })
	if n := r.get(ji.ID); n != 1 {
		t.Fatalf("the committed job ran %d times, want 1", n)
	}
}

// TestClaimStatementTimeout: a claim cut by statement_timeout (here
// waiting on its claim record, which another transaction holds) leaks no
// lease: its instance stays Scheduled at attempt 0 and the next claim
// takes it.
func TestClaimStatementTimeout(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "300"
	short, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	ns := "timeout-" + randHex(4)
	s, err := pgstore.New(t.Context(), short, pgstore.WithSchema(testSchema), pgstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	in := &store.Instance{ID: "st-1", Kind: "k", Queue: "q", RunAt: now, CreatedAt: now, MaxRetries: 1}
	if _, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now}); err != nil {
		t.Fatal(err)
	}
	// Another transaction holds the claimer's claim record, which the
	// claim (with a ClaimSeq) locks first: the claim waits, and times out.
	tx, err := testPool(t).Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), "INSERT INTO "+testSchema+".claims (ns, owner, seq, until, ids, attempts) VALUES ($1, 'w1', 0, 0, '{}', '{}')", ns); err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(t.Context(), &store.ClaimParams{Queue: "q", Owner: "w1", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), ClaimSeq: 1})
	if err == nil || !strings.Contains(err.Error(), "statement timeout") {
		t.Fatalf("Claim under a held lock with a 300 ms statement_timeout: %v; want the timeout", err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := s.LookupInstances(t.Context(), &store.Query{InstanceID: "st-1"})
	if err != nil || len(got) != 1 {
		t.Fatalf("lookup: %v %v", got, err)
	}
	if g := got[0]; g.State != store.Scheduled || g.Attempt != 0 || g.LeaseOwner != "" {
		t.Fatalf("after the timed-out claim: state %v attempt %d owner %q; want scheduled, 0, none (no lease leaked)", g.State, g.Attempt, g.LeaseOwner)
	}
	res, err := s.Claim(t.Context(), &store.ClaimParams{Queue: "q", Owner: "w1", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), ClaimSeq: 2})
	if err != nil || len(res.Instances) != 1 || res.Instances[0].Attempt != 1 {
		t.Fatalf("the next claim: %+v, %v; want st-1 at attempt 1", res, err)
	}
}

// TestUndecodableRows: an instance whose stored arguments are not JSON is
// Terminated with the decode error while the rest run; a row whose state
// is not a state is left out of lookups with ErrCorrupt.
func TestUndecodableRows(t *testing.T) {
	p := testPool(t)
	ns := "corrupt-" + randHex(4)
	s := open(t, ns)
	r := &runs{n: map[string]int{}}
	m, err := job.NewManager(job.WithStore(s), job.WithWorkers(2), job.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	j, _ := job.NewJob(job.WithKind("work"), job.WithExecutor(func(ji job.Instance, a, b int) int { r.add(ji.Info().ID); return a + b }))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		ji, err := m.ScheduleJob(t.Context(), "work", job.WithArguments(i, i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ji.ID)
	}
	if _, err := p.Exec(t.Context(), "UPDATE "+testSchema+".instances SET args = '\\xfffe'::bytea WHERE ns = $1 AND id = $2", ns, ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	}()
	waitFor(t, "all three to finish", func() bool {
		return stateOf(t, m, ids[0]).Final() && stateOf(t, m, ids[1]).Final() && stateOf(t, m, ids[2]).Final()
	})
	if st := stateOf(t, m, ids[1]); st != job.Terminated || r.get(ids[1]) != 0 {
		t.Fatalf("the instance with undecodable arguments: %v, ran %d times; want terminated, never run", st, r.get(ids[1]))
	}
	for _, id := range []string{ids[0], ids[2]} {
		if st := stateOf(t, m, id); st != job.Completed {
			t.Fatalf("instance %s: %v, want completed", id, st)
		}
	}
	if _, err := p.Exec(t.Context(), "UPDATE "+testSchema+".instances SET state = 42 WHERE ns = $1 AND id = $2", ns, ids[0]); err != nil {
		t.Fatal(err)
	}
	got, err := s.LookupInstances(t.Context(), &store.Query{})
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), ids[0]) || len(got) != 2 {
		t.Fatalf("lookup with a corrupt row: %d instances, %v; want the 2 others and ErrCorrupt naming %s", len(got), err, ids[0])
	}
}

// TestListenerReconnects: when the listening connection is killed, the
// store reconnects on its own, wakes its subscribers (a notification may
// have been lost), and later notifications arrive again.
func TestListenerReconnects(t *testing.T) {
	p := testPool(t)
	ns := "listen-" + randHex(4)
	a, b := open(t, ns), open(t, ns)
	sub, err := b.Subscribe(t.Context(), "q")
	if err != nil {
		t.Fatal(err)
	}
	listeners := func() []int {
		rows, _ := p.Query(t.Context(), "SELECT pid FROM pg_stat_activity WHERE query = $1", `LISTEN "jobkit_`+testSchema+`"`)
		pids, _ := pgx.CollectRows(rows, pgx.RowTo[int])
		return pids
	}
	before := listeners()
	if len(before) == 0 {
		t.Fatal("no listening connection")
	}
	var killed atomic.Int64
	for _, pid := range before {
		var ok bool
		if err := p.QueryRow(t.Context(), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err == nil && ok {
			killed.Add(1)
		}
	}
	select {
	case <-sub: // the wake-up after the reconnect
	case <-time.After(20 * time.Second):
		t.Fatal("no wake-up after the listening connection was killed and reconnected")
	}
	now := time.Now().UTC()
	i := 0
	waitFor(t, "a notification after the reconnect", func() bool {
		i++
		in := &store.Instance{ID: fmt.Sprintf("l-%d", i), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now}
		if _, err := a.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sub:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
	if i > 1 {
		t.Logf("woken after %d enqueues", i)
	}
}

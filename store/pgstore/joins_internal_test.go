package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// TestBatchUpdatesUnnestOnce: the statements that update instances from
// parallel arrays (Finish, Renew, saveRows) unnest their arrays once, not
// once per instance row (a nested loop with the unnest inside made a
// finish of n instances cost n², 75 of 101 ms at n = 192 in the
// benchmark). Each statement runs under EXPLAIN ANALYZE the way the store
// runs it, in a transaction rolled back after.
func TestBatchUpdatesUnnestOnce(t *testing.T) {
	u := testserver.Postgres(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := fmt.Sprintf("jk_joins_%d", time.Now().UnixNano())
	defer func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}()
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 300
	now := time.Now().UTC().Truncate(time.Millisecond)
	var ins []*store.Instance
	for i := range n {
		ins = append(ins, &store.Instance{ID: fmt.Sprintf("j-%04d", i), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now})
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
		t.Fatal(err)
	}
	// A queue of many more waiting instances, as in a burn-down: the
	// primary key is then the way to the claimed rows.
	for b := range 10 {
		var more []*store.Instance
		for i := range 1000 {
			more = append(more, &store.Instance{ID: fmt.Sprintf("w-%d-%04d", b, i), Kind: "k", Queue: "q", RunAt: now.Add(time.Hour), CreatedAt: now})
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: more, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: n, Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(res.Instances) != n {
		t.Fatalf("claim: %d instances, %v; want %d", len(res.Instances), err, n)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+s.t("instances")); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	atts := make([]int32, n)
	states := make([]int16, n)
	runAt, fin, lease, upd := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	release, cancel := make([]bool, n), make([]bool, n)
	results := make([][]byte, n)
	errs, owners := make([]string, n), make([]string, n)
	for i, in := range res.Instances {
		ids[i], atts[i], states[i] = in.ID, int32(in.Attempt), int16(store.Completed)
		fin[i], upd[i] = nanos(now), nanos(now)
	}
	st := s.stmt()
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"finish", st.finish, []any{s.cfg.ns, ids, atts, states, runAt, release, results, errs, "w", nanos(now), s.channel, "0:"}},
		{"renew", st.renew, []any{s.cfg.ns, ids, atts, "w", nanos(now.Add(time.Hour)), nanos(now)}},
		{"update", st.update, []any{s.cfg.ns, ids, states, atts, runAt, owners, lease, cancel, fin, results, errs, upd}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			// The plan the store gets after a few calls: a generic one,
			// made without the arguments' values.
			if _, err := tx.Prepare(ctx, "jk_"+c.name, c.sql); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
				t.Fatal(err)
			}
			params := make([]string, len(c.args))
			for i, a := range c.args {
				params[i] = sqlLiteral(t, a)
			}
			var plan []byte
			err = hashJoined(ctx, tx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE jk_"+c.name+"("+strings.Join(params, ", ")+")", n, nil, func(rows pgx.Rows) error {
				for rows.Next() {
					if err := rows.Scan(&plan); err != nil {
						return err
					}
				}
				return rows.Err()
			})
			if err != nil {
				t.Fatal(err)
			}
			var doc []struct{ Plan node }
			if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
				t.Fatalf("plan %s: %v", plan, err)
			}
			if strings.Contains(string(plan), `"JIT"`) {
				t.Errorf("%s: the statement was compiled by JIT (seconds for a plan whose cost the disabled nested loops inflate): %s", c.name, plan)
			}
			scans := 0
			var walk func(nd *node)
			walk = func(nd *node) {
				if nd.Type == "Function Scan" {
					scans++
					if nd.Loops > 1 {
						t.Errorf("%s: %s on %s ran %d times, once per instance row; want once (plan: %s)", c.name, nd.Type, nd.Alias, nd.Loops, plan)
					}
				}
				for i := range nd.Plans {
					walk(&nd.Plans[i])
				}
			}

			t.Logf("%s", plan)
			walk(&doc[0].Plan)
			if scans == 0 {
				t.Fatalf("%s: no Function Scan in the plan; the test no longer looks at the unnest: %s", c.name, plan)
			}
		})
	}
}

// node is a plan node of EXPLAIN (FORMAT JSON), as far as the test reads it.
type node struct {
	Type  string `json:"Node Type"`
	Alias string `json:"Alias"`
	Loops int    `json:"Actual Loops"`
	Plans []node `json:"Plans"`
}

// sqlLiteral writes a (the test's arguments) as an SQL constant: EXECUTE
// takes no parameters of the extended protocol.
func sqlLiteral(t *testing.T, a any) string {
	quote := func(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }
	list := func(n int, el func(i int) string, typ string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = el(i)
		}
		return "ARRAY[" + strings.Join(parts, ",") + "]::" + typ
	}
	switch v := a.(type) {
	case string:
		return quote(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case []string:
		return list(len(v), func(i int) string { return quote(v[i]) }, "text[]")
	case []int16:
		return list(len(v), func(i int) string { return strconv.Itoa(int(v[i])) }, "int2[]")
	case []int32:
		return list(len(v), func(i int) string { return strconv.Itoa(int(v[i])) }, "int4[]")
	case []int64:
		return list(len(v), func(i int) string { return strconv.FormatInt(v[i], 10) }, "int8[]")
	case []bool:
		return list(len(v), func(i int) string { return strconv.FormatBool(v[i]) }, "bool[]")
	case [][]byte:
		return list(len(v), func(i int) string {
			if v[i] == nil {
				return "NULL"
			}
			return fmt.Sprintf("'\\x%x'", v[i])
		}, "bytea[]")
	}
	t.Fatalf("no SQL literal for %T", a)
	return ""
}

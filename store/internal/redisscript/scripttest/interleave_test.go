package scripttest

// Lookups by state page through several lists and sets while claims,
// rescues and finishes move instances between them. These tests run a
// store call at an exact point of a lookup (a runner that calls a hook
// before each plain command) and check that an instance in a matching
// state for the whole lookup is returned, once. They drive redisscript.Core
// directly through go-redis, so they live here, in the module that may
// depend on go-redis, and not in redisscript's own module.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	os.Exit(code)
}

// hookRunner is a Runner on go-redis that calls before (when set) ahead
// of each plain command, the commands lookups page with.
type hookRunner struct {
	c       *redis.Client
	scripts map[*redisscript.Script]*redis.Script
	before  func(args []string)
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func strs(v any) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = strs(x[i])
		}
	case []byte:
		return string(x)
	}
	return v
}

func (r *hookRunner) Run(ctx context.Context, s *redisscript.Script, keys, args []string) (any, error) {
	cmd := r.scripts[s].Run(ctx, r.c, keys, anys(args)...)
	if s.ReadOnly {
		cmd = r.scripts[s].RunRO(ctx, r.c, keys, anys(args)...)
	}
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return strs(v), err
}

func (r *hookRunner) Do(ctx context.Context, args ...string) (any, error) {
	if r.before != nil {
		r.before(args)
	}
	v, err := r.c.Do(ctx, anys(args)...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return strs(v), err
}

func (r *hookRunner) Listen(ctx context.Context, _ string, _ func(), _ func(string)) error {
	<-ctx.Done()
	return ctx.Err()
}

// hookCore returns a Core in a namespace of its own on the test binary's
// redis-server, and its runner.
func hookCore(t *testing.T) (*redisscript.Core, *hookRunner) {
	c := redis.NewClient(&redis.Options{Addr: testserver.Redis(t)})
	t.Cleanup(func() { c.Close() })
	r := &hookRunner{c: c, scripts: map[*redisscript.Script]*redis.Script{}}
	for _, s := range redisscript.All {
		r.scripts[s] = redis.NewScript(s.Source)
	}
	core, err := redisscript.NewCore(r, fmt.Sprintf("interleave_%s_%d", t.Name(), time.Now().UnixNano()), "test")
	if err != nil {
		t.Fatal(err)
	}
	return core, r
}

var ibase = time.Date(2026, time.March, 4, 5, 6, 7, 0, time.UTC)

func iinst(id, kind string, runAt time.Time) *store.Instance {
	return &store.Instance{ID: id, Kind: kind, Queue: "q", Args: []byte(`[1]`), RunAt: runAt, CreatedAt: ibase, MaxRetries: 5}
}

func sortedIDs(ins []*store.Instance) []string {
	var out []string
	for _, in := range ins {
		out = append(out, in.ID)
	}
	slices.Sort(out)
	return out
}

// interleave is one store with 200 completed instances (so the plan reads
// lookups of other states from the states' own structures).
type interleave struct {
	t *testing.T
	c *redisscript.Core
	r *hookRunner
}

func newInterleave(t *testing.T) *interleave {
	c, r := hookCore(t)
	e := &interleave{t: t, c: c, r: r}
	var bulk []*store.Instance
	for i := range 200 {
		in := iinst(fmt.Sprintf("done-%03d", i), "k", ibase)
		in.Queue = "bulk"
		bulk = append(bulk, in)
	}
	e.enqueue(ibase, bulk...)
	res := e.claim("bulk", 200, ibase, ibase.Add(time.Hour))
	var outs []store.Outcome
	for _, in := range res {
		outs = append(outs, store.Outcome{ID: in.ID, Attempt: 1, State: store.Completed})
	}
	e.finish(ibase.Add(time.Second), outs...)
	return e
}

func (e *interleave) enqueue(now time.Time, ins ...*store.Instance) {
	e.t.Helper()
	if _, err := e.c.Enqueue(e.t.Context(), &store.EnqueueParams{Node: "n", Now: now, Instances: ins}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *interleave) claim(queue string, limit int, now, until time.Time) []*store.Instance {
	e.t.Helper()
	res, err := e.c.Claim(e.t.Context(), &store.ClaimParams{Queue: queue, Owner: "w", Limit: limit, Now: now, LeaseUntil: until})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Instances
}

func (e *interleave) finish(now time.Time, outs ...store.Outcome) {
	e.t.Helper()
	if _, err := e.c.Finish(e.t.Context(), &store.FinishParams{Owner: "w", Now: now, Outcomes: outs}); err != nil {
		e.t.Fatal(err)
	}
}

// lookup runs LookupInstances(q), calling during once, before the first
// plain command for which at returns true.
func (e *interleave) lookup(q *store.Query, at func(args []string) bool, during func()) []string {
	e.t.Helper()
	fired := false
	e.r.before = func(args []string) {
		if !fired && at(args) {
			fired = true
			during()
		}
	}
	got, err := e.c.LookupInstances(e.t.Context(), q)
	e.r.before = nil
	if err != nil {
		e.t.Fatal(err)
	}
	if !fired {
		e.t.Fatal("the lookup never reached the point the test interleaves at")
	}
	return sortedIDs(got)
}

// A due instance moves from the scheduled set to its ready list while the
// lookup by Scheduled reads the queue.
func TestLookupByStateDueMove(t *testing.T) {
	for _, at := range []string{"ZSCAN", "LRANGE"} {
		t.Run("before "+at, func(t *testing.T) {
			e := newInterleave(t)
			e.enqueue(ibase, iinst("A", "k", ibase), iinst("B", "k", ibase), iinst("X", "k", ibase.Add(10*time.Second)))
			got := e.lookup(&store.Query{States: []store.State{store.Scheduled}},
				func(args []string) bool { return args[0] == at },
				func() {
					// Moves X to the tail of its ready list and claims A.
					if got := sortedIDs(e.claim("q", 1, ibase.Add(20*time.Second), ibase.Add(time.Hour))); !slices.Equal(got, []string{"A"}) {
						t.Fatalf("claim during the lookup: %v, want A", got)
					}
				})
			if !slices.Contains(got, "X") || !slices.Contains(got, "B") {
				t.Fatalf("lookup by Scheduled: %v; X and B were Scheduled throughout", got)
			}
		})
	}
}

// An attempt is rescued (Processing back to Scheduled) while a lookup by
// both states reads the run set.
func TestLookupByStateRescueDuringLookup(t *testing.T) {
	for _, states := range [][]store.State{{store.Scheduled, store.Processing}, {store.Processing, store.Scheduled}} {
		t.Run(fmt.Sprint(states), func(t *testing.T) {
			e := newInterleave(t)
			e.enqueue(ibase, iinst("P", "k", ibase))
			e.claim("q", 1, ibase, ibase.Add(time.Minute))
			got := e.lookup(&store.Query{States: states},
				func(args []string) bool { return args[0] == "SSCAN" },
				func() {
					res, err := e.c.Rescue(t.Context(), &store.RescueParams{Now: ibase.Add(2 * time.Minute), Limit: 10, Node: "n"})
					if err != nil || len(res) != 1 {
						t.Fatalf("rescue during the lookup: %d, %v", len(res), err)
					}
				})
			if !slices.Equal(got, []string{"P"}) {
				t.Fatalf("lookup by %v: %v, want P (in one of the states throughout)", states, got)
			}
		})
	}
}

// An instance is claimed (Scheduled to Processing) while a lookup by both
// states reads the queue, and a retried one goes back to the queue.
func TestLookupByStateClaimDuringLookup(t *testing.T) {
	for _, at := range []string{"SMEMBERS", "ZSCAN", "LRANGE", "SSCAN"} {
		t.Run("before "+at, func(t *testing.T) {
			e := newInterleave(t)
			e.enqueue(ibase, iinst("S", "k", ibase), iinst("R", "k", ibase))
			e.claim("q", 1, ibase, ibase.Add(time.Hour)) // S runs
			got := e.lookup(&store.Query{States: []store.State{store.Processing, store.Scheduled}},
				func(args []string) bool { return args[0] == at },
				func() {
					// S retries later; R is claimed.
					e.finish(ibase.Add(time.Second), store.Outcome{ID: "S", Attempt: 1, State: store.Scheduled, RunAt: ibase.Add(time.Hour), Error: "again"})
					if got := sortedIDs(e.claim("q", 1, ibase.Add(time.Second), ibase.Add(time.Hour))); !slices.Equal(got, []string{"R"}) {
						t.Fatalf("claim during the lookup: %v, want R", got)
					}
				})
			if !slices.Equal(got, []string{"R", "S"}) {
				t.Fatalf("lookup by Processing and Scheduled: %v, want R and S", got)
			}
		})
	}
}

// An attempt that finishes while a lookup by Processing and a final state
// runs is returned in one state or the other.
func TestLookupByStateFinishDuringLookup(t *testing.T) {
	e := newInterleave(t)
	e.enqueue(ibase, iinst("F", "k", ibase))
	e.claim("q", 1, ibase, ibase.Add(time.Hour))
	got := e.lookup(&store.Query{States: []store.State{store.Processing, store.Terminated}},
		func(args []string) bool { return args[0] == "SSCAN" },
		func() {
			e.finish(ibase.Add(time.Second), store.Outcome{ID: "F", Attempt: 1, State: store.Terminated, Error: "boom"})
		})
	if !slices.Equal(got, []string{"F"}) {
		t.Fatalf("lookup by Processing and Terminated: %v, want F", got)
	}
}

// A history lookup by a final state and an end of range finds a record
// timed before its instance's CreatedAt (a finishing clock behind the
// enqueuing one), as the history stream does.
func TestHistoryFinalStateClockBehind(t *testing.T) {
	c, _ := hookCore(t)
	ctx := t.Context()
	created := ibase.Add(10 * time.Second)
	in := iinst("Z", "k", created)
	in.CreatedAt = created
	if _, err := c.Enqueue(ctx, &store.EnqueueParams{Node: "n", Now: created, Instances: []*store.Instance{in}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: created, LeaseUntil: created.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Finish(ctx, &store.FinishParams{Owner: "w", Now: ibase.Add(5 * time.Second), Outcomes: []store.Outcome{{ID: "Z", Attempt: 1, State: store.Completed}}}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*store.Query{
		{States: []store.State{store.Completed}, Until: ibase.Add(8 * time.Second)},                               // by state
		{States: []store.State{store.Completed}, Since: ibase.Add(-time.Hour), Until: ibase.Add(8 * time.Second)}, // the stream
	} {
		got, err := c.LookupHistory(ctx, q)
		if err != nil || len(got) != 1 || got[0].InstanceID != "Z" || !got[0].Time.Equal(ibase.Add(5*time.Second)) {
			t.Fatalf("LookupHistory(%+v): %+v, %v; want Z's Completed record at 5s", *q, got, err)
		}
	}
}

// An ID pruned and enqueued again with another kind stays listed in its
// old kind's bucket while that second has other instances; lookups
// without a kind return it once.
func TestLookupReusedIDOnce(t *testing.T) {
	c, _ := hookCore(t)
	ctx := t.Context()
	mk := func(id, kind string) *store.Instance { return iinst(id, kind, ibase) }
	run := func(now time.Time, complete ...string) {
		t.Helper()
		res, err := c.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 100, Now: now, LeaseUntil: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		var outs []store.Outcome
		for _, in := range res.Instances {
			if slices.Contains(complete, in.ID) {
				outs = append(outs, store.Outcome{ID: in.ID, Attempt: 1, State: store.Completed})
			} else {
				outs = append(outs, store.Outcome{ID: in.ID, Attempt: 1, State: store.Scheduled, RunAt: now.Add(24 * time.Hour)})
			}
		}
		if _, err := c.Finish(ctx, &store.FinishParams{Owner: "w", Now: now, Outcomes: outs}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Enqueue(ctx, &store.EnqueueParams{Node: "n", Now: ibase, Instances: []*store.Instance{mk("D", "k1"), mk("E", "k1")}}); err != nil {
		t.Fatal(err)
	}
	run(ibase, "D")
	if _, err := c.Prune(ctx, &store.PruneParams{Now: ibase.Add(time.Minute), FinishedBefore: ibase.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// D again, of kind k2, with many completed k2 instances besides, so
	// the plan reads the kind buckets.
	later := ibase.Add(100 * time.Second)
	ins := []*store.Instance{mk("D", "k2")}
	all := []string{"D"}
	for i := range 50 {
		in := mk(fmt.Sprintf("L%02d", i), "k2")
		in.RunAt, in.CreatedAt = later, later
		ins = append(ins, in)
		all = append(all, in.ID)
	}
	if _, err := c.Enqueue(ctx, &store.EnqueueParams{Node: "n", Now: later, Instances: ins}); err != nil {
		t.Fatal(err)
	}
	run(later.Add(time.Second), all...)
	got, err := c.LookupInstances(ctx, &store.Query{Until: ibase.Add(time.Second)})
	if err != nil || !slices.Equal(sortedIDs(got), []string{"D", "E"}) {
		t.Fatalf("LookupInstances created in the first second: %v, %v; want D and E once each", sortedIDs(got), err)
	}
	hs, err := c.LookupHistory(ctx, &store.Query{States: []store.State{store.Completed}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, h := range hs {
		if h.InstanceID == "D" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("LookupHistory by Completed: %d records of D, want 1", n)
	}
}

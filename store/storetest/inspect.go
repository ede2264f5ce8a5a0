package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// inspectTests are the Inspector's checks, run by Run.
var inspectTests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"InspectCounts", testInspectCounts},
	{"InspectCountsFilter", testInspectCountsFilter},
	{"InspectLag", testInspectLag},
	{"PageInstancesStable", testPageInstancesStable},
	{"PageHistoryStable", testPageHistoryStable},
	{"PageLogsStable", testPageLogsStable},
	{"PageDefaultSize", testPageDefaultSize},
	{"PageBadCursor", testPageBadCursor},
}

// counts returns the non-zero counts as "queue/kind/state" -> n, and the
// (queue, kind) rows Counts returned, checking that rows are ordered.
func (e *env) groupCounts(s store.Store, p *store.CountsParams) (map[string]int64, []string) {
	e.t.Helper()
	rows, err := s.Counts(e.ctx, p)
	if err != nil {
		e.t.Fatalf("Counts(%+v): %v", *p, err)
	}
	got := map[string]int64{}
	var groups []string
	for _, r := range rows {
		groups = append(groups, r.Queue+"/"+r.Kind)
		for st, n := range r.States {
			if n != 0 {
				got[fmt.Sprintf("%s/%s/%v", r.Queue, r.Kind, store.State(st))] = n
			}
		}
	}
	if !sort.StringsAreSorted(groups) {
		e.t.Fatalf("Counts returned rows %v, want them ordered by queue then kind", groups)
	}
	return got, groups
}

// wantCounts fails unless Counts (unfiltered, from a fresh handle) is
// exactly want ("queue/kind/state" -> n, zero counts left out).
func (e *env) wantCounts(step string, want map[string]int64) {
	e.t.Helper()
	got, _ := e.groupCounts(e.open(), &store.CountsParams{})
	if !mapsEqual(got, want) {
		e.t.Fatalf("after %s: Counts = %v, want %v", step, fmtCounts(got), fmtCounts(want))
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func fmtCounts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return "[" + strings.TrimSpace(b.String()) + "]"
}

// testInspectCounts walks instances through every kind of transition and
// checks the counts after each.
func testInspectCounts(t *testing.T, h Harness) {
	e := setup(t, h)
	e.wantCounts("nothing", map[string]int64{})
	mk := func(id, queue, kind string, retries int) *store.Instance {
		in := inst(id, queue)
		in.Kind, in.MaxRetries = kind, retries
		return in
	}
	future := mk("n-future", "q1", "ka", 3)
	future.RunAt = at(time.Hour)
	e.enqueue(e.s, base,
		mk("n-done", "q1", "ka", 3), mk("n-fail", "q1", "ka", 0), mk("n-retry", "q1", "ka", 3),
		mk("n-timeout", "q1", "ka", 0), mk("n-lost", "q1", "ka", 0), mk("n-lost2", "q1", "ka", 2),
		mk("n-b", "q1", "kb", 3), mk("n-q2", "q2", "ka", 3), mk("n-cancel-run", "q2", "ka", 3), future)
	// A repeated enqueue changes nothing.
	e.enqueue(e.s, base, mk("n-done", "q1", "ka", 3))
	e.wantCounts("enqueue", map[string]int64{
		"q1/ka/scheduled": 7, "q1/kb/scheduled": 1, "q2/ka/scheduled": 2,
	})

	// Claim everything ready in q1 (kind order does not matter here).
	got := e.claim(e.s, "q1", "w1", 20, at(time.Second))
	if len(got.Instances) != 7 {
		t.Fatalf("claimed %v from q1, want the 7 ready ones", ids(got.Instances))
	}
	e.wantCounts("claim", map[string]int64{
		"q1/ka/scheduled": 1, "q1/ka/processing": 6, "q1/kb/processing": 1, "q2/ka/scheduled": 2,
	})

	now := at(2 * time.Second)
	e.finishOK(e.s, "w1", now,
		store.Outcome{ID: "n-done", Attempt: 1, State: store.Completed, Result: []byte(`[1]`)},
		store.Outcome{ID: "n-fail", Attempt: 1, State: store.Terminated, Error: "boom"},
		store.Outcome{ID: "n-retry", Attempt: 1, State: store.Scheduled, RunAt: at(3 * time.Second), Error: "again"},
		store.Outcome{ID: "n-timeout", Attempt: 1, State: store.TimedOut, Error: "slow"},
		store.Outcome{ID: "n-b", Attempt: 1, State: store.Canceled, Error: "by executor"})
	// A repeated finish changes nothing.
	e.finishOK(e.s, "w1", now, store.Outcome{ID: "n-done", Attempt: 1, State: store.Completed, Result: []byte(`[1]`)})
	e.wantCounts("finish", map[string]int64{
		"q1/ka/scheduled": 2, "q1/ka/processing": 2, "q1/ka/completed": 1, "q1/ka/terminated": 1, "q1/ka/timedout": 1,
		"q1/kb/canceled": 1, "q2/ka/scheduled": 2,
	})

	// Rescue: n-lost has no retries left (Terminated), n-lost2 goes back.
	if moved := e.rescue(e.s, at(time.Hour), 10); len(moved) != 2 {
		t.Fatalf("rescued %v, want n-lost and n-lost2", ids(moved))
	}
	e.wantCounts("rescue", map[string]int64{
		"q1/ka/scheduled": 3, "q1/ka/completed": 1, "q1/ka/terminated": 2, "q1/ka/timedout": 1,
		"q1/kb/canceled": 1, "q2/ka/scheduled": 2,
	})

	// Cancel a scheduled one (at once) and a running one (on its finish).
	if _, err := e.s.Cancel(e.ctx, &store.CancelParams{ID: "n-q2", Now: at(time.Hour), Node: "n"}); err != nil {
		t.Fatalf("Cancel(n-q2): %v", err)
	}
	e.claimOne(e.s, "q2", "w2", at(time.Hour), "n-cancel-run")
	if _, err := e.s.Cancel(e.ctx, &store.CancelParams{ID: "n-cancel-run", Now: at(time.Hour), Node: "n"}); err != nil {
		t.Fatalf("Cancel(n-cancel-run): %v", err)
	}
	e.wantCounts("cancel", map[string]int64{
		"q1/ka/scheduled": 3, "q1/ka/completed": 1, "q1/ka/terminated": 2, "q1/ka/timedout": 1,
		"q1/kb/canceled": 1, "q2/ka/canceled": 1, "q2/ka/processing": 1,
	})
	e.finishOK(e.s, "w2", at(time.Hour), store.Outcome{ID: "n-cancel-run", Attempt: 1, State: store.Scheduled, RunAt: at(2 * time.Hour), Error: "retry me"})
	e.wantCounts("finish of a canceled attempt", map[string]int64{
		"q1/ka/scheduled": 3, "q1/ka/completed": 1, "q1/ka/terminated": 2, "q1/ka/timedout": 1,
		"q1/kb/canceled": 1, "q2/ka/canceled": 2,
	})

	// Admin: a retry moves a final instance back to Scheduled (refused
	// ones change nothing); a delete takes one off its state's count,
	// whatever the state.
	rr, err := e.s.Retry(e.ctx, &store.RetryParams{IDs: []string{"n-fail", "n-b", "n-q2", "n-future", "n-unknown"}, Now: at(time.Hour), Node: "n"})
	if err != nil || len(rr) != 5 || rr[0].Err != nil || rr[1].Err != nil || rr[2].Err != nil || rr[3].Err == nil || rr[4].Err == nil {
		t.Fatalf("Retry: %+v, %v; want the first three retried, the others refused", rr, err)
	}
	e.wantCounts("retry", map[string]int64{
		"q1/ka/scheduled": 4, "q1/ka/completed": 1, "q1/ka/terminated": 1, "q1/ka/timedout": 1,
		"q1/kb/scheduled": 1, "q2/ka/scheduled": 1, "q2/ka/canceled": 1,
	})
	e.claimOne(e.s, "q2", "w3", at(2*time.Hour), "n-q2")
	dr, err := e.s.Delete(e.ctx, &store.DeleteParams{IDs: []string{"n-done", "n-future", "n-b", "n-q2", "n-unknown"}, Now: at(2 * time.Hour), Node: "n"})
	if err != nil || len(dr) != 5 || dr[0].Err != nil || dr[1].Err != nil || dr[2].Err != nil || dr[3].Err != nil || dr[4].Err == nil {
		t.Fatalf("Delete: %+v, %v; want the first four deleted, the unknown one refused", dr, err)
	}
	e.wantCounts("delete", map[string]int64{
		"q1/ka/scheduled": 3, "q1/ka/terminated": 1, "q1/ka/timedout": 1, "q2/ka/canceled": 1,
	})

	// Prune every finished instance: the counts drop, the groups stay.
	res, err := e.s.Prune(e.ctx, &store.PruneParams{Now: at(3 * time.Hour), FinishedBefore: at(3 * time.Hour)})
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if res.Instances != 3 {
		t.Fatalf("Prune removed %d instances, want 3 (the others were retried or deleted)", res.Instances)
	}
	e.wantCounts("prune", map[string]int64{"q1/ka/scheduled": 3})
	if _, groups := e.groupCounts(e.s, &store.CountsParams{}); !slices.Equal(groups, []string{"q1/ka", "q1/kb", "q2/ka"}) {
		t.Fatalf("Counts rows after prune: %v, want q1/ka, q1/kb, q2/ka (a pruned group stays seen)", groups)
	}
}

func testInspectCountsFilter(t *testing.T, h Harness) {
	e := setup(t, h)
	var ins []*store.Instance
	for i, g := range []string{"qa/k1", "qa/k2", "qb/k1", "qb/k1"} {
		q, k, _ := strings.Cut(g, "/")
		in := inst(fmt.Sprintf("cf-%d", i), q)
		in.Kind = k
		ins = append(ins, in)
	}
	e.enqueue(e.s, base, ins...)
	for _, c := range []struct {
		p    store.CountsParams
		want map[string]int64
	}{
		{store.CountsParams{Queue: "qa"}, map[string]int64{"qa/k1/scheduled": 1, "qa/k2/scheduled": 1}},
		{store.CountsParams{Kind: "k1"}, map[string]int64{"qa/k1/scheduled": 1, "qb/k1/scheduled": 2}},
		{store.CountsParams{Queue: "qb", Kind: "k1"}, map[string]int64{"qb/k1/scheduled": 2}},
		{store.CountsParams{Queue: "none"}, map[string]int64{}},
	} {
		if got, _ := e.groupCounts(e.s, &c.p); !mapsEqual(got, c.want) {
			t.Errorf("Counts(%+v) = %v, want %v", c.p, fmtCounts(got), fmtCounts(c.want))
		}
	}
	if _, err := e.s.Counts(e.ctx, nil); err == nil {
		t.Errorf("Counts(nil) succeeded, want ErrInvalid")
	}
}

func testInspectLag(t *testing.T, h Harness) {
	e := setup(t, h)
	mk := func(id, queue, kind string, runAt time.Duration) *store.Instance {
		in := inst(id, queue)
		in.Kind, in.RunAt = kind, at(runAt)
		return in
	}
	e.enqueue(e.s, base,
		mk("lg-1", "qa", "k1", time.Minute), mk("lg-2", "qa", "k2", 3*time.Minute),
		mk("lg-3", "qb", "k2", 2*time.Minute), mk("lg-4", "qb", "k2", time.Hour),
		mk("lg-5", "qc", "k3", time.Hour))
	lag := func(p store.LagParams) *store.LagResult {
		t.Helper()
		r, err := e.open().Lag(e.ctx, &p)
		if err != nil {
			t.Fatalf("Lag(%+v): %v", p, err)
		}
		return r
	}
	show := func(ls []store.Lag) string {
		var parts []string
		for _, l := range ls {
			parts = append(parts, fmt.Sprintf("%s:%v", l.Name, l.Age))
		}
		return strings.Join(parts, " ")
	}
	check := func(what string, got []store.Lag, want string) {
		t.Helper()
		if s := show(got); s != want {
			t.Fatalf("%s: lag %q, want %q", what, s, want)
		}
	}
	now := at(5 * time.Minute)
	r := lag(store.LagParams{Now: now})
	check("queues", r.Queues, "qa:4m0s qb:3m0s qc:0s")
	check("kinds", r.Kinds, "k1:4m0s k2:3m0s k3:0s")
	for _, l := range r.Queues {
		if l.Name == "qa" && !l.OldestReady.Equal(at(time.Minute)) {
			t.Fatalf("queue qa oldest ready %v, want %v", l.OldestReady, at(time.Minute))
		}
		if l.Name == "qc" && !l.OldestReady.IsZero() {
			t.Fatalf("queue qc (nothing ready) oldest ready %v, want zero", l.OldestReady)
		}
	}
	r = lag(store.LagParams{Now: now, Kind: "k2"})
	check("queues of kind k2", r.Queues, "qa:2m0s qb:3m0s")
	check("kind k2", r.Kinds, "k2:3m0s")
	r = lag(store.LagParams{Now: now, Queue: "qb"})
	check("queue qb", r.Queues, "qb:3m0s")

	// Claiming the oldest moves the lag to the next ready one.
	e.claimOne(e.s, "qa", "w1", now, "lg-1")
	r = lag(store.LagParams{Now: now})
	check("queues after a claim", r.Queues, "qa:2m0s qb:3m0s qc:0s")
	check("kinds after a claim", r.Kinds, "k1:0s k2:3m0s k3:0s")
	// A retry counts from its new RunAt.
	e.finishOK(e.s, "w1", now, store.Outcome{ID: "lg-1", Attempt: 1, State: store.Scheduled, RunAt: at(4 * time.Minute), Error: "again"})
	r = lag(store.LagParams{Now: now})
	check("kinds after a retry", r.Kinds, "k1:1m0s k2:3m0s k3:0s")
	if _, err := e.s.Lag(e.ctx, &store.LagParams{}); err == nil {
		t.Fatal("Lag without Now succeeded, want ErrInvalid")
	}

	// A kind whose ready instances wait behind many of another kind.
	var deep []*store.Instance
	for i := range 30 {
		deep = append(deep, mk(fmt.Sprintf("lg-deep-%d", i), "qd", "kx", time.Duration(i)*time.Second))
	}
	deep = append(deep, mk("lg-deep-y", "qd", "ky", 40*time.Second))
	e.enqueue(e.s, base, deep...)
	e.claim(e.s, "qd", "w2", 1, at(time.Minute)) // moves the due ones to the ready lists
	r = lag(store.LagParams{Now: at(time.Minute), Queue: "qd"})
	check("queue qd", r.Queues, "qd:59s")
	check("kinds of qd", r.Kinds, "kx:59s ky:20s")
	r = lag(store.LagParams{Now: at(time.Minute), Kind: "ky"})
	check("kind ky", r.Kinds, "ky:20s")
}

// pageAll follows pages of size n through page, calling between before
// every page read but the first, and returns the keys of what the pages
// returned, in order.
func pageAll[T any](t *testing.T, n int, page func(cursor string) ([]T, string, error), key func(T) string, between func(i int)) []string {
	t.Helper()
	var out []string
	cursor := ""
	for i := 0; ; i++ {
		if i > 0 && between != nil {
			between(i)
		}
		recs, next, err := page(cursor)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if len(recs) > n {
			t.Fatalf("page %d has %d items, want at most %d", i, len(recs), n)
		}
		for _, r := range recs {
			out = append(out, key(r))
		}
		if next == "" {
			return out
		}
		if i > 1000 {
			t.Fatal("paging does not end")
		}
		cursor = next
	}
}

// checkPaged fails unless got holds every key of want exactly once, in
// want's order, and nothing but want and the keys extra allows.
func checkPaged(t *testing.T, what string, got, want []string, extra func(string) bool) {
	t.Helper()
	seen := map[string]int{}
	var kept []string
	for _, k := range got {
		seen[k]++
		if seen[k] > 1 {
			t.Fatalf("%s: %s returned twice across pages", what, k)
		}
		if !extra(k) {
			kept = append(kept, k)
		}
	}
	if !slices.Equal(kept, want) {
		t.Fatalf("%s: pages returned %v (without the ones added meanwhile), want %v", what, kept, want)
	}
}

// testPageInstancesStable pages through instances newest first while
// others are enqueued between pages, newer and older than the position,
// several with one CreatedAt.
func testPageInstancesStable(t *testing.T, h Harness) {
	e := setup(t, h)
	var want []string
	var batch []*store.Instance
	for i := range 40 {
		in := inst(fmt.Sprintf("pg-%02d", i), "q-pg")
		in.CreatedAt = at(time.Duration(i/4) * time.Second) // four per time
		batch = append(batch, in)
	}
	e.enqueue(e.s, base, batch...)
	for i := len(batch) - 1; i >= 0; i-- {
		want = append(want, batch[i].ID)
	}
	added := 0
	got := pageAll(t, 7, func(c string) ([]*store.Instance, string, error) {
		p, err := e.open().PageInstances(e.ctx, &store.Query{Queue: "q-pg", Limit: 7, Cursor: c})
		if err != nil {
			return nil, "", err
		}
		return p.Instances, p.Next, nil
	}, func(in *store.Instance) string { return in.ID }, func(i int) {
		// Between pages: one newer than everything, one at a time shared
		// with stored ones, one older than everything.
		var ins []*store.Instance
		for j, d := range []time.Duration{time.Hour, time.Duration(9-i%9) * time.Second, -time.Hour} {
			in := inst(fmt.Sprintf("add-%d-%d", i, j), "q-pg")
			in.CreatedAt = at(d)
			ins = append(ins, in)
		}
		added += len(ins)
		e.enqueue(e.s, base, ins...)
	})
	checkPaged(t, "PageInstances", got, want, func(id string) bool { return strings.HasPrefix(id, "add-") })
	if added == 0 {
		t.Fatal("no instance was added between pages")
	}
}

// testPageHistoryStable pages through history oldest first, by (Time,
// InstanceID, Seq), while instances are enqueued between pages.
func testPageHistoryStable(t *testing.T, h Harness) {
	e := setup(t, h)
	var batch []*store.Instance
	for i := range 12 {
		batch = append(batch, inst(fmt.Sprintf("ph-%02d", i), "q-ph"))
	}
	e.enqueue(e.s, base, batch...)
	e.claim(e.s, "q-ph", "w1", 6, at(time.Second))
	key := func(r *store.HistoryRecord) string { return fmt.Sprintf("%s/%v/%d", r.InstanceID, r.State, r.Attempt) }
	var want []string
	all := e.history(e.s, &store.Query{Kind: "kind-a"})
	slices.SortFunc(all, func(a, b *store.HistoryRecord) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.InstanceID, b.InstanceID), cmp.Compare(a.Seq, b.Seq))
	})
	for _, r := range all {
		want = append(want, key(r))
	}
	if len(want) != 30 {
		t.Fatalf("history has %d records, want 30", len(want))
	}
	n := 0
	got := pageAll(t, 4, func(c string) ([]*store.HistoryRecord, string, error) {
		p, err := e.open().PageHistory(e.ctx, &store.Query{Kind: "kind-a", Limit: 4, Cursor: c})
		if err != nil {
			return nil, "", err
		}
		return p.Records, p.Next, nil
	}, key, func(i int) {
		// Between pages: more enqueues at the time of the stored ones.
		n++
		e.enqueue(e.s, base, inst(fmt.Sprintf("ph-add-%d", n), "q-ph"))
	})
	checkPaged(t, "PageHistory", got, want, func(k string) bool { return strings.HasPrefix(k, "ph-add-") })
}

// testPageLogsStable pages through logs oldest first while logs are added
// between pages, at the position's time and later.
func testPageLogsStable(t *testing.T, h Harness) {
	e := setup(t, h)
	var recs []*store.LogRecord
	var want []string
	for i := range 30 {
		r := &store.LogRecord{InstanceID: fmt.Sprintf("pl-%d", i%3), Kind: "kind-a", Attempt: 1, Level: store.LevelInfo,
			Time: at(time.Duration(i/5) * time.Second), Node: "n", Message: fmt.Sprintf("m%02d", i)}
		recs = append(recs, r)
	}
	if err := e.s.AppendLogs(e.ctx, recs); err != nil {
		t.Fatalf("AppendLogs: %v", err)
	}
	all := e.logs(e.s, &store.Query{})
	slices.SortFunc(all, func(a, b *store.LogRecord) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.InstanceID, b.InstanceID), cmp.Compare(a.Seq, b.Seq))
	})
	for _, l := range all {
		want = append(want, l.Message)
	}
	n := 0
	got := pageAll(t, 4, func(c string) ([]*store.LogRecord, string, error) {
		p, err := e.open().PageLogs(e.ctx, &store.Query{Limit: 4, Cursor: c})
		if err != nil {
			return nil, "", err
		}
		return p.Records, p.Next, nil
	}, func(l *store.LogRecord) string { return l.Message }, func(i int) {
		n++
		add := []*store.LogRecord{{InstanceID: "pl-0", Kind: "kind-a", Level: store.LevelInfo, Time: at(time.Duration(n%6) * time.Second), Message: fmt.Sprintf("add-%d", n)}}
		if err := e.s.AppendLogs(e.ctx, add); err != nil {
			t.Fatalf("AppendLogs: %v", err)
		}
	})
	checkPaged(t, "PageLogs", got, want, func(k string) bool { return strings.HasPrefix(k, "add-") })
}

func testPageDefaultSize(t *testing.T, h Harness) {
	e := setup(t, h)
	var batch []*store.Instance
	for i := range store.DefaultPageSize + 20 {
		in := inst(fmt.Sprintf("pd-%03d", i), "q-pd")
		in.CreatedAt = at(time.Duration(i) * time.Millisecond)
		batch = append(batch, in)
	}
	e.enqueue(e.s, base, batch...)
	p, err := e.s.PageInstances(e.ctx, &store.Query{})
	if err != nil {
		t.Fatalf("PageInstances(no filter, no limit): %v", err)
	}
	if len(p.Instances) != store.DefaultPageSize || p.Next == "" {
		t.Fatalf("PageInstances(no filter, no limit) returned %d instances, next %q; want DefaultPageSize (%d) and a next cursor", len(p.Instances), p.Next, store.DefaultPageSize)
	}
	p, err = e.s.PageInstances(e.ctx, &store.Query{Cursor: p.Next})
	if err != nil {
		t.Fatalf("PageInstances(second page): %v", err)
	}
	if len(p.Instances) != 20 || p.Next != "" {
		t.Fatalf("second page has %d instances, next %q; want the last 20 and no next cursor", len(p.Instances), p.Next)
	}
	if _, err := e.s.PageInstances(e.ctx, &store.Query{Limit: store.MaxPageSize + 1}); err == nil {
		t.Fatalf("PageInstances(Limit MaxPageSize+1) succeeded, want ErrInvalid")
	} else {
		wantErr(t, "PageInstances(Limit MaxPageSize+1)", err, store.ErrInvalid)
	}
	hp, err := e.s.PageHistory(e.ctx, &store.Query{})
	if err != nil || len(hp.Records) != store.DefaultPageSize || hp.Next == "" {
		t.Fatalf("PageHistory(no filter) returned %d records, next %q, err %v; want DefaultPageSize and a next cursor", len(hp.Records), hp.Next, err)
	}
}

func testPageBadCursor(t *testing.T, h Harness) {
	e := setup(t, h)
	var batch []*store.Instance
	for i := range 5 {
		batch = append(batch, inst(fmt.Sprintf("pb-%d", i), "q-pb"))
	}
	e.enqueue(e.s, base, batch...)
	q := store.Query{Queue: "q-pb", Limit: 2}
	p, err := e.s.PageInstances(e.ctx, &q)
	if err != nil || p.Next == "" {
		t.Fatalf("first page: next %q, err %v", p.Next, err)
	}
	forged := []byte(p.Next)
	forged[len(forged)/2] ^= 1
	other := func(q store.Query) store.Query { q.Cursor = p.Next; return q }
	for name, q := range map[string]store.Query{
		"forged":       {Queue: "q-pb", Limit: 2, Cursor: string(forged)},
		"garbage":      {Queue: "q-pb", Limit: 2, Cursor: "not a cursor!"},
		"truncated":    {Queue: "q-pb", Limit: 2, Cursor: p.Next[:len(p.Next)-4]},
		"other queue":  other(store.Query{Queue: "q-other", Limit: 2}),
		"other kind":   other(store.Query{Queue: "q-pb", Kind: "kind-b", Limit: 2}),
		"other states": other(store.Query{Queue: "q-pb", States: []store.State{store.Scheduled}, Limit: 2}),
	} {
		_, err := e.s.PageInstances(e.ctx, &q)
		wantErr(t, "PageInstances with a "+name+" cursor", err, store.ErrInvalid)
	}
	// The page size may change from page to page.
	if _, err := e.s.PageInstances(e.ctx, &store.Query{Queue: "q-pb", Limit: 3, Cursor: p.Next}); err != nil {
		t.Fatalf("PageInstances with another page size: %v", err)
	}
	// An instances cursor is not a history or logs cursor.
	if _, err := e.s.PageHistory(e.ctx, &store.Query{Queue: "q-pb", Limit: 2, Cursor: p.Next}); err == nil {
		t.Fatal("PageHistory took a PageInstances cursor, want ErrInvalid")
	}
	if _, err := e.s.PageLogs(e.ctx, &store.Query{Queue: "q-pb", Limit: 2, Cursor: p.Next}); err == nil {
		t.Fatal("PageLogs took a PageInstances cursor, want ErrInvalid")
	}
}

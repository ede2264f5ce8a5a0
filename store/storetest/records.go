package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

func fmtHistory(hs []*store.HistoryRecord) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "\n\t%s %v attempt %d at %s node %q error %q result %s seq %d",
			h.InstanceID, h.State, h.Attempt, h.Time.UTC().Format(time.RFC3339Nano), h.Node, h.Error, h.Result, h.Seq)
	}
	return b.String()
}

func testHistory(t *testing.T, h Harness) {
	e := setup(t, h)
	in := inst("h-1", "q-h")
	in.Kind = "kind-h"
	if _, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Node: "n-sched", Now: at(time.Second)}); err != nil {
		t.Fatal(err)
	}
	e.claimOne(e.s, "q-h", "w1", at(2*time.Second), "h-1")
	e.finishOK(e.s, "w1", at(3*time.Second), store.Outcome{ID: "h-1", Attempt: 1, State: store.Scheduled, RunAt: at(4 * time.Second), Error: "first failure"})
	e.claimOne(e.open(), "q-h", "w2", at(5*time.Second), "h-1")
	e.finishOK(e.s, "w2", at(6*time.Second), store.Outcome{ID: "h-1", Attempt: 2, State: store.Completed, Result: []byte(`["ok"]`)})
	want := []*store.HistoryRecord{
		{State: store.Created, Attempt: 0, Time: at(time.Second), Node: "n-sched"},
		{State: store.Scheduled, Attempt: 0, Time: at(time.Second), Node: "n-sched"},
		{State: store.Processing, Attempt: 1, Time: at(2 * time.Second), Node: "w1"},
		{State: store.Scheduled, Attempt: 1, Time: at(3 * time.Second), Node: "w1", Error: "first failure"},
		{State: store.Processing, Attempt: 2, Time: at(5 * time.Second), Node: "w2"},
		{State: store.Completed, Attempt: 2, Time: at(6 * time.Second), Node: "w2", Result: []byte(`["ok"]`)},
	}
	got := e.history(e.open(), &store.Query{InstanceID: "h-1"})
	if len(got) != len(want) {
		t.Fatalf("history has %d records, want %d:%s", len(got), len(want), fmtHistory(got))
	}
	for i, w := range want {
		w.InstanceID, w.Kind = "h-1", "kind-h"
		checkRecord(t, fmt.Sprintf("history record %d (%v)", i, w.State), w, got[i], "Seq")
		if i > 0 && got[i].Seq <= got[i-1].Seq {
			t.Fatalf("history Seq not increasing:%s", fmtHistory(got))
		}
	}
	// The instance's own record agrees.
	final := e.get(e.s, "h-1")
	if final.State != store.Completed || !final.FinishedAt.Equal(at(6*time.Second)) || string(final.Result) != `["ok"]` {
		t.Fatalf("final instance: state %v finished %v result %s", final.State, final.FinishedAt, final.Result)
	}
}

// lookupFixture stores instances of two kinds in two queues in several
// states, created a minute apart: ids in creation order.
func lookupFixture(e *env) []string {
	e.t.Helper()
	specs := []struct {
		id, kind, queue string
	}{
		{"lk-0", "kind-x", "q-lk-1"},
		{"lk-1", "kind-y", "q-lk-1"},
		{"lk-2", "kind-x", "q-lk-2"},
		{"lk-3", "kind-x", "q-lk-1"},
		{"lk-4", "kind-y", "q-lk-2"},
		{"lk-5", "kind-x", "q-lk-2"},
	}
	var out []string
	for i, s := range specs {
		in := inst(s.id, s.queue)
		in.Kind = s.kind
		in.CreatedAt = at(time.Duration(i) * time.Minute)
		in.RunAt = in.CreatedAt
		in.Priority = -i // so claims take the oldest first
		e.enqueue(e.s, in.CreatedAt, in)
		out = append(out, s.id)
	}
	// lk-0 completed, lk-2 processing, lk-1 canceled; the rest scheduled.
	now := at(10 * time.Minute)
	e.claimOne(e.s, "q-lk-1", "w1", now, "lk-0")
	e.finishOK(e.s, "w1", now, store.Outcome{ID: "lk-0", Attempt: 1, State: store.Completed})
	e.claimOne(e.s, "q-lk-2", "w1", now, "lk-2")
	if _, err := e.s.Cancel(e.ctx, &store.CancelParams{ID: "lk-1", Now: now, Node: "n"}); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func testLookupInstances(t *testing.T, h Harness) {
	e := setup(t, h)
	lookupFixture(e)
	s := e.open()
	cases := []struct {
		name string
		q    store.Query
		want []string
	}{
		{"all", store.Query{}, []string{"lk-5", "lk-4", "lk-3", "lk-2", "lk-1", "lk-0"}},
		{"instance", store.Query{InstanceID: "lk-3"}, []string{"lk-3"}},
		{"unknown instance", store.Query{InstanceID: "lk-nope"}, nil},
		{"kind", store.Query{Kind: "kind-y"}, []string{"lk-4", "lk-1"}},
		{"queue", store.Query{Queue: "q-lk-2"}, []string{"lk-5", "lk-4", "lk-2"}},
		{"kind and queue", store.Query{Kind: "kind-x", Queue: "q-lk-1"}, []string{"lk-3", "lk-0"}},
		{"state", store.Query{States: []store.State{store.Scheduled}}, []string{"lk-5", "lk-4", "lk-3"}},
		{"states", store.Query{States: []store.State{store.Completed, store.Processing, store.Canceled}}, []string{"lk-2", "lk-1", "lk-0"}},
		{"since", store.Query{Since: at(3 * time.Minute)}, []string{"lk-5", "lk-4", "lk-3"}},
		{"until", store.Query{Until: at(2 * time.Minute)}, []string{"lk-1", "lk-0"}},
		{"range", store.Query{Since: at(time.Minute), Until: at(3 * time.Minute)}, []string{"lk-2", "lk-1"}},
		{"limit", store.Query{Limit: 2}, []string{"lk-5", "lk-4"}},
		{"kind and limit", store.Query{Kind: "kind-x", Limit: 3}, []string{"lk-5", "lk-3", "lk-2"}},
		{"instance and wrong kind", store.Query{InstanceID: "lk-3", Kind: "kind-y"}, nil},
	}
	for _, c := range cases {
		got := e.instances(s, &c.q)
		checkIDs(t, "LookupInstances "+c.name, got, c.want...)
	}
	// Equal CreatedAt: the later enqueued (higher Seq) is newer.
	a, b := inst("lk-tie-a", "q-tie"), inst("lk-tie-b", "q-tie")
	a.CreatedAt, b.CreatedAt = at(time.Hour), at(time.Hour)
	e.enqueue(e.s, at(time.Hour), a)
	e.enqueue(e.s, at(time.Hour), b)
	checkIDs(t, "LookupInstances with equal CreatedAt", e.instances(s, &store.Query{Queue: "q-tie"}), "lk-tie-b", "lk-tie-a")
}

func testLookupHistory(t *testing.T, h Harness) {
	e := setup(t, h)
	lookupFixture(e)
	s := e.open()
	all := e.history(s, &store.Query{})
	// 6 instances × (Created, Scheduled) + lk-0 Processing, Completed + lk-2 Processing + lk-1 Canceled.
	if len(all) != 16 {
		t.Fatalf("LookupHistory of everything: %d records, want 16:%s", len(all), fmtHistory(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Time.Before(all[i-1].Time) {
			t.Fatalf("history not oldest first:%s", fmtHistory(all))
		}
	}
	count := func(name string, q store.Query, want int, check func(*store.HistoryRecord) bool) []*store.HistoryRecord {
		t.Helper()
		got := e.history(s, &q)
		if len(got) != want {
			t.Fatalf("LookupHistory %s: %d records, want %d:%s", name, len(got), want, fmtHistory(got))
		}
		for i, r := range got {
			if !check(r) {
				t.Fatalf("LookupHistory %s: record does not match:%s", name, fmtHistory([]*store.HistoryRecord{r}))
			}
			if i > 0 && r.Time.Before(got[i-1].Time) {
				t.Fatalf("LookupHistory %s: not oldest first:%s", name, fmtHistory(got))
			}
		}
		return got
	}
	count("by instance", store.Query{InstanceID: "lk-0"}, 4, func(r *store.HistoryRecord) bool { return r.InstanceID == "lk-0" })
	count("by kind", store.Query{Kind: "kind-y"}, 5, func(r *store.HistoryRecord) bool { return r.Kind == "kind-y" })
	count("by state", store.Query{States: []store.State{store.Processing, store.Canceled}}, 3, func(r *store.HistoryRecord) bool {
		return r.State == store.Processing || r.State == store.Canceled
	})
	count("by time", store.Query{Since: at(2 * time.Minute), Until: at(4 * time.Minute)}, 4, func(r *store.HistoryRecord) bool {
		return r.InstanceID == "lk-2" || r.InstanceID == "lk-3"
	})
	count("queue is ignored", store.Query{Queue: "q-nope", InstanceID: "lk-5"}, 2, func(r *store.HistoryRecord) bool { return r.InstanceID == "lk-5" })
	got := count("limit", store.Query{Limit: 3}, 3, func(r *store.HistoryRecord) bool { return r.InstanceID == "lk-0" || r.InstanceID == "lk-1" })
	if got[0].InstanceID != "lk-0" || got[0].State != store.Created || got[1].State != store.Scheduled {
		t.Fatalf("LookupHistory with a limit does not start with the oldest:%s", fmtHistory(got))
	}
	count("unknown instance", store.Query{InstanceID: "lk-nope"}, 0, func(*store.HistoryRecord) bool { return false })
}

func logRec(id, kind string, level store.LogLevel, d time.Duration, msg string) *store.LogRecord {
	return &store.LogRecord{InstanceID: id, Kind: kind, Attempt: 1, Level: level, Time: at(d), Node: "w1", Message: msg}
}

func testLogs(t *testing.T, h Harness) {
	e := setup(t, h)
	recs := []*store.LogRecord{
		logRec("lg-a", "kind-x", store.LevelInfo, 1*time.Second, "a starts"),
		logRec("lg-b", "kind-y", store.LevelDebug, 2*time.Second, "b details"),
		logRec("lg-a", "kind-x", store.LevelWarn, 3*time.Second, "a slow"),
		logRec("lg-a", "kind-x", store.LevelError, 4*time.Second, "a failed: \"quoted\"\nsecond line"),
	}
	recs[2].Attempt, recs[2].Node = 2, "w2"
	want := make([]*store.LogRecord, len(recs))
	for i, r := range recs {
		c := *r
		want[i] = &c
	}
	if err := e.s.AppendLogs(e.ctx, recs[:2]); err != nil {
		t.Fatalf("AppendLogs: %v", err)
	}
	if err := e.open().AppendLogs(e.ctx, recs[2:]); err != nil {
		t.Fatalf("AppendLogs: %v", err)
	}
	recs[0].Message = "changed after append"
	s := e.open()
	got := e.logs(s, &store.Query{})
	if len(got) != len(want) {
		t.Fatalf("LookupLogs of everything: %d records, want %d", len(got), len(want))
	}
	for i := range want {
		checkRecord(t, fmt.Sprintf("log record %d", i), want[i], got[i], "Seq")
	}
	a := e.logs(s, &store.Query{InstanceID: "lg-a"})
	for i := 1; i < len(a); i++ {
		if a[i].Seq <= a[i-1].Seq {
			t.Fatalf("log Seq of one instance not increasing: %d then %d", a[i-1].Seq, a[i].Seq)
		}
	}
	cases := []struct {
		name string
		q    store.Query
		want []string
	}{
		{"instance", store.Query{InstanceID: "lg-a"}, []string{"a starts", "a slow", "a failed: \"quoted\"\nsecond line"}},
		{"kind", store.Query{Kind: "kind-y"}, []string{"b details"}},
		{"level", store.Query{Levels: []store.LogLevel{store.LevelWarn, store.LevelError}}, []string{"a slow", "a failed: \"quoted\"\nsecond line"}},
		{"since", store.Query{Since: at(2 * time.Second)}, []string{"b details", "a slow", "a failed: \"quoted\"\nsecond line"}},
		{"until", store.Query{Until: at(2 * time.Second)}, []string{"a starts"}},
		{"range", store.Query{Since: at(2 * time.Second), Until: at(4 * time.Second)}, []string{"b details", "a slow"}},
		{"limit", store.Query{Limit: 2}, []string{"a starts", "b details"}},
		{"instance and limit", store.Query{InstanceID: "lg-a", Limit: 2}, []string{"a starts", "a slow"}},
		{"states ignored", store.Query{InstanceID: "lg-b", States: []store.State{store.Completed}}, []string{"b details"}},
		{"unknown instance", store.Query{InstanceID: "lg-nope"}, nil},
	}
	for _, c := range cases {
		var msgs []string
		for _, r := range e.logs(s, &c.q) {
			msgs = append(msgs, r.Message)
		}
		if !slicesEqual(msgs, c.want) {
			t.Fatalf("LookupLogs %s: got %q, want %q", c.name, msgs, c.want)
		}
	}
}

// finishedAt stores an instance in queue q finished as Completed at d, with
// two log records.
func (e *env) finishedAt(id string, d time.Duration) {
	e.t.Helper()
	in := inst(id, "q-"+id)
	e.enqueue(e.s, base, in)
	e.claimOne(e.s, "q-"+id, "w1", base, id)
	e.finishOK(e.s, "w1", at(d), store.Outcome{ID: id, Attempt: 1, State: store.Completed})
	if err := e.s.AppendLogs(e.ctx, []*store.LogRecord{logRec(id, "kind-a", store.LevelInfo, 0, "one"), logRec(id, "kind-a", store.LevelInfo, time.Millisecond, "two")}); err != nil {
		e.t.Fatal(err)
	}
}

// livePair stores one scheduled and one processing instance with logs, and
// returns their IDs.
func (e *env) livePair() []string {
	e.t.Helper()
	e.enqueue(e.s, base, inst("live-sched", "q-live-s"), inst("live-proc", "q-live-p"))
	e.claimOne(e.s, "q-live-p", "w1", base, "live-proc")
	if err := e.s.AppendLogs(e.ctx, []*store.LogRecord{logRec("live-sched", "kind-a", store.LevelInfo, 0, "s"), logRec("live-proc", "kind-a", store.LevelInfo, 0, "p")}); err != nil {
		e.t.Fatal(err)
	}
	return []string{"live-sched", "live-proc"}
}

func (e *env) prune(s store.Store, p store.PruneParams) *store.PruneResult {
	e.t.Helper()
	res, err := s.Prune(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("Prune(%+v): %v", p, err)
	}
	if res == nil {
		e.t.Fatalf("Prune returned a nil result")
	}
	return res
}

// counts returns how many history and log records the store holds for id.
func (e *env) counts(id string) (hist, logs int) {
	e.t.Helper()
	return len(e.history(e.s, &store.Query{InstanceID: id})), len(e.logs(e.s, &store.Query{InstanceID: id}))
}

// checkGone fails unless id, its history and its logs are all gone.
func (e *env) checkGone(id string) {
	e.t.Helper()
	e.absent(e.s, id)
	if h, l := e.counts(id); h != 0 || l != 0 {
		e.t.Fatalf("pruned instance %s left %d history and %d log records", id, h, l)
	}
}

// checkKept fails unless id is stored with history and logs.
func (e *env) checkKept(id string) {
	e.t.Helper()
	e.get(e.s, id)
	if h, l := e.counts(id); h == 0 || l == 0 {
		e.t.Fatalf("kept instance %s has %d history and %d log records", id, h, l)
	}
}

func testPruneFinishedBefore(t *testing.T, h Harness) {
	e := setup(t, h)
	e.finishedAt("pf-old", time.Minute)
	e.finishedAt("pf-new", 10*time.Minute)
	live := e.livePair()
	hOld, lOld := e.counts("pf-old")
	res := e.prune(e.open(), store.PruneParams{Now: at(time.Hour), FinishedBefore: at(5 * time.Minute)})
	if res.Instances != 1 || res.History != hOld || res.Logs != lOld {
		t.Fatalf("Prune FinishedBefore: removed %+v, want 1 instance, %d history, %d logs", *res, hOld, lOld)
	}
	e.checkGone("pf-old")
	e.checkKept("pf-new")
	// Never pending or running instances, however old.
	res = e.prune(e.s, store.PruneParams{Now: at(100 * 24 * time.Hour), FinishedBefore: at(99 * 24 * time.Hour)})
	if res.Instances != 1 {
		t.Fatalf("second Prune removed %d instances, want 1 (pf-new)", res.Instances)
	}
	for _, id := range live {
		e.checkKept(id)
	}
	e.checkGone("pf-new")
	// The live ones still work.
	e.claimOne(e.s, "q-live-s", "w1", at(time.Hour), "live-sched")
	e.finishOK(e.s, "w1", at(time.Hour), store.Outcome{ID: "live-proc", Attempt: 1, State: store.Completed})
}

func testPruneKeepFinished(t *testing.T, h Harness) {
	e := setup(t, h)
	e.finishedAt("pk-1", 3*time.Minute)
	e.finishedAt("pk-2", 1*time.Minute)
	e.finishedAt("pk-3", 4*time.Minute)
	e.finishedAt("pk-4", 2*time.Minute)
	live := e.livePair()
	res := e.prune(e.s, store.PruneParams{Now: at(time.Hour), KeepFinished: 2})
	if res.Instances != 2 {
		t.Fatalf("Prune KeepFinished 2 of 4 removed %d instances, want 2", res.Instances)
	}
	e.checkGone("pk-2")
	e.checkGone("pk-4")
	e.checkKept("pk-1")
	e.checkKept("pk-3")
	for _, id := range live {
		e.checkKept(id)
	}
	res = e.prune(e.open(), store.PruneParams{Now: at(time.Hour), KeepFinished: 2})
	if res.Instances != 0 {
		t.Fatalf("Prune KeepFinished again removed %d instances, want 0", res.Instances)
	}
	res = e.prune(e.open(), store.PruneParams{Now: at(time.Hour), KeepFinished: 1})
	if res.Instances != 1 {
		t.Fatalf("Prune KeepFinished 1 of 2 removed %d instances, want 1", res.Instances)
	}
	e.checkGone("pk-1")
	e.checkKept("pk-3")
	for _, id := range live {
		e.checkKept(id)
	}
}

func testPruneHistoryLogsBefore(t *testing.T, h Harness) {
	e := setup(t, h)
	// History at base (Created, Scheduled), +1m (Processing), +2m (Completed).
	e.enqueue(e.s, base, inst("ph-1", "q-ph"), inst("ph-2", "q-ph"))
	e.claim(e.s, "q-ph", "w1", 2, at(time.Minute))
	e.finishOK(e.s, "w1", at(2*time.Minute), store.Outcome{ID: "ph-1", Attempt: 1, State: store.Completed})
	if err := e.s.AppendLogs(e.ctx, []*store.LogRecord{
		logRec("ph-1", "kind-a", store.LevelInfo, 30*time.Second, "old"),
		logRec("ph-2", "kind-a", store.LevelInfo, 40*time.Second, "old"),
		logRec("ph-1", "kind-a", store.LevelInfo, 90*time.Second, "new"),
	}); err != nil {
		t.Fatal(err)
	}
	res := e.prune(e.open(), store.PruneParams{Now: at(time.Hour), HistoryBefore: at(time.Minute)})
	if res.Instances != 0 || res.History != 4 || res.Logs != 0 {
		t.Fatalf("Prune HistoryBefore +1m removed %+v, want 4 history records only", *res)
	}
	hist := e.history(e.s, &store.Query{})
	if len(hist) != 3 {
		t.Fatalf("history after pruning: %d records, want 3 (two Processing, one Completed):%s", len(hist), fmtHistory(hist))
	}
	for _, r := range hist {
		if r.Time.Before(at(time.Minute)) {
			t.Fatalf("Prune left a record older than HistoryBefore:%s", fmtHistory(hist))
		}
	}
	e.get(e.s, "ph-1")
	e.get(e.s, "ph-2")
	res = e.prune(e.s, store.PruneParams{Now: at(time.Hour), LogsBefore: at(time.Minute)})
	if res.Instances != 0 || res.History != 0 || res.Logs != 2 {
		t.Fatalf("Prune LogsBefore +1m removed %+v, want 2 logs only", *res)
	}
	logs := e.logs(e.s, &store.Query{})
	if len(logs) != 1 || logs[0].Message != "new" {
		t.Fatalf("logs after pruning: %d records, want only the newer one", len(logs))
	}
	// ph-2 still runs and finishes.
	e.finishOK(e.s, "w1", at(3*time.Minute), store.Outcome{ID: "ph-2", Attempt: 1, State: store.Completed})
}

func testPruneLimit(t *testing.T, h Harness) {
	e := setup(t, h)
	for i := range 5 {
		e.finishedAt(fmt.Sprintf("pl-%d", i), time.Duration(i+1)*time.Minute)
	}
	total := 0
	for range 10 {
		res := e.prune(e.s, store.PruneParams{Now: at(time.Hour), FinishedBefore: at(time.Hour), Limit: 2})
		if res.Instances > 2 {
			t.Fatalf("Prune with Limit 2 removed %d instances", res.Instances)
		}
		if res.Instances == 0 {
			break
		}
		total += res.Instances
	}
	if total != 5 {
		t.Fatalf("repeated Prune with Limit 2 removed %d instances in all, want 5", total)
	}
	for i := range 5 {
		e.checkGone(fmt.Sprintf("pl-%d", i))
	}
}

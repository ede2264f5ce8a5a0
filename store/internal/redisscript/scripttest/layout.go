package scripttest

// Tests of the key layout (lua/lib.lua): what the scripts keep under each
// key when callers' clocks disagree, when retention runs, when leases are
// renewed or rescued in parts, and when IDs are UUIDs. They look under the
// store with go-redis to check that no key keeps what it should not.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// layEnv is one test's store, its keys and a raw client under it.
type layEnv struct {
	t    *testing.T
	s    store.Store
	keys redisscript.Keys
	rc   *redis.Client
}

func layout(t *testing.T, h Harness) *layEnv {
	addr := testserver.Redis(t)
	n := ns(t)
	keys, err := redisscript.NewKeys(n)
	if err != nil {
		t.Fatal(err)
	}
	return &layEnv{t: t, s: h.Open(t, addr, n), keys: keys, rc: raw(t, addr)}
}

// at is base plus d.
func at(d time.Duration) time.Time { return base.Add(d) }

func secs(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func (e *layEnv) key(name string) string { return e.keys.Prefix + name }

func (e *layEnv) enqueue(now time.Time, ins ...*store.Instance) []store.EnqueueResult {
	e.t.Helper()
	res, err := e.s.Enqueue(e.t.Context(), &store.EnqueueParams{Instances: ins, Node: "n-enq", Now: now})
	if err != nil {
		e.t.Fatalf("Enqueue at %v: %v", now, err)
	}
	for i, r := range res {
		if r.Err != nil {
			e.t.Fatalf("Enqueue %s: %v", ins[i].ID, r.Err)
		}
		if r.ID != ins[i].ID {
			e.t.Fatalf("Enqueue %s returned ID %q", ins[i].ID, r.ID)
		}
	}
	return res
}

func (e *layEnv) claim(queue, owner string, limit int, now, until time.Time) *store.ClaimResult {
	e.t.Helper()
	res, err := e.s.Claim(e.t.Context(), &store.ClaimParams{Queue: queue, Owner: owner, Limit: limit, Now: now, LeaseUntil: until})
	if err != nil {
		e.t.Fatalf("Claim %s at %v: %v", queue, now, err)
	}
	if len(res.Undecodable) != 0 {
		e.t.Fatalf("Claim %s: undecodable %+v", queue, res.Undecodable)
	}
	return res
}

func (e *layEnv) finish(owner string, now time.Time, outs ...store.Outcome) {
	e.t.Helper()
	errs, err := e.s.Finish(e.t.Context(), &store.FinishParams{Owner: owner, Now: now, Outcomes: outs})
	if err != nil {
		e.t.Fatalf("Finish at %v: %v", now, err)
	}
	for i, r := range errs {
		if r.Err != nil {
			e.t.Fatalf("Finish %s at %v: %v", outs[i].ID, now, r.Err)
		}
	}
}

// done finishes each ID's attempt 1 as Completed.
func (e *layEnv) done(owner string, now time.Time, ids ...string) {
	e.t.Helper()
	var outs []store.Outcome
	for _, id := range ids {
		outs = append(outs, store.Outcome{ID: id, Attempt: 1, State: store.Completed})
	}
	e.finish(owner, now, outs...)
}

func (e *layEnv) rescue(now time.Time, limit int) []*store.Instance {
	e.t.Helper()
	got, err := e.s.Rescue(e.t.Context(), &store.RescueParams{Now: now, Limit: limit, Node: "n-rescue"})
	if err != nil {
		e.t.Fatalf("Rescue at %v: %v", now, err)
	}
	return got
}

func (e *layEnv) prune(p *store.PruneParams) *store.PruneResult {
	e.t.Helper()
	res, err := e.s.Prune(e.t.Context(), p)
	if err != nil {
		e.t.Fatalf("Prune %+v: %v", *p, err)
	}
	return res
}

func (e *layEnv) get(id string) *store.Instance {
	e.t.Helper()
	got, err := e.s.LookupInstances(e.t.Context(), &store.Query{InstanceID: id})
	if err != nil || len(got) != 1 {
		e.t.Fatalf("LookupInstances(%s): %d instances, %v; want one", id, len(got), err)
	}
	return got[0]
}

func (e *layEnv) instances(q *store.Query) []string {
	e.t.Helper()
	got, err := e.s.LookupInstances(e.t.Context(), q)
	if err != nil {
		e.t.Fatalf("LookupInstances(%+v): %v", *q, err)
	}
	return ids(got)
}

func (e *layEnv) history(q *store.Query) []*store.HistoryRecord {
	e.t.Helper()
	got, err := e.s.LookupHistory(e.t.Context(), q)
	if err != nil {
		e.t.Fatalf("LookupHistory(%+v): %v", *q, err)
	}
	return got
}

// splitIDList splits an ID list (lease batch, kind bucket): each stored
// ID behind its length in 2 bytes, decoded.
func splitIDList(t testing.TB, b string) []string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		if len(b) < 2 {
			t.Fatalf("ID list ends in a stray byte: %q", b)
		}
		n := int(b[0])<<8 | int(b[1])
		if len(b) < 2+n {
			t.Fatalf("ID list entry of %d bytes runs past the end: %q", n, b)
		}
		id, err := redisscript.DecodeID(b[2 : 2+n])
		if err != nil {
			t.Fatalf("ID list entry: %v", err)
		}
		out = append(out, id)
		b = b[2+n:]
	}
	return out
}

func fmtHist(hs []*store.HistoryRecord) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "\n\t%s %v seq %d at %s", h.InstanceID, h.State, h.Seq, h.Time.Sub(base))
	}
	return b.String()
}

// histKeys names records "id state" for comparing sets.
func histKeys(hs []*store.HistoryRecord) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.InstanceID+" "+h.State.String())
	}
	return out
}

// testClockBehind: enqueue, claim and finish calls whose Now is behind
// what the history stream already holds. Each record keeps its own time,
// time-range lookups find it by that time although its entry ID was
// raised, and an instance's records come in Seq order whatever their
// times.
func testClockBehind(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	a, b := inst("cb-a", "q"), inst("cb-b", "q")
	a.CreatedAt, b.CreatedAt = at(secs(10)), at(secs(2))
	e.enqueue(at(secs(10)), a)
	e.enqueue(at(secs(2)), b) // 8s behind the stream
	if got := ids(e.claim("q", "w", 2, at(secs(3)), at(time.Hour)).Instances); !slices.Equal(got, []string{"cb-a", "cb-b"}) {
		t.Fatalf("Claim returned %v, want cb-a, cb-b", got)
	}
	e.done("w", at(secs(1)), "cb-b") // 9s behind
	e.done("w", at(secs(4)), "cb-a") // 6s behind

	// The largest raise is recorded, so range reads know how far to look.
	if skew, err := e.rc.HGet(ctx, e.key("ctr"), "hskew").Result(); err != nil || skew != "9000" {
		t.Fatalf("ctr hskew = %q, %v; want 9000 (ms the history stream ran ahead at most)", skew, err)
	}

	// Instances keep the times their callers gave.
	for _, c := range []struct {
		id                    string
		created, updated, fin time.Duration
	}{{"cb-a", secs(10), secs(4), secs(4)}, {"cb-b", secs(2), secs(1), secs(1)}} {
		in := e.get(c.id)
		if in.State != store.Completed || !in.CreatedAt.Equal(at(c.created)) || !in.UpdatedAt.Equal(at(c.updated)) || !in.FinishedAt.Equal(at(c.fin)) {
			t.Fatalf("%s: state %v created %v updated %v finished %v; want completed, created %v, updated and finished %v",
				c.id, in.State, in.CreatedAt.Sub(base), in.UpdatedAt.Sub(base), in.FinishedAt.Sub(base), c.created, c.fin)
		}
	}

	// By instance: Seq order, each record at its own time.
	states := []store.State{store.Created, store.Scheduled, store.Processing, store.Completed}
	for id, times := range map[string][]time.Duration{
		"cb-a": {secs(10), secs(10), secs(3), secs(4)},
		"cb-b": {secs(2), secs(2), secs(3), secs(1)},
	} {
		hs := e.history(&store.Query{InstanceID: id})
		if len(hs) != 4 {
			t.Fatalf("history of %s: %d records, want 4:%s", id, len(hs), fmtHist(hs))
		}
		for i, h := range hs {
			if h.InstanceID != id || h.State != states[i] || h.Seq != uint64(i+1) || !h.Time.Equal(at(times[i])) {
				t.Fatalf("history of %s, record %d: %s %v seq %d at %v; want %v seq %d at %v:%s",
					id, i, h.InstanceID, h.State, h.Seq, h.Time.Sub(base), states[i], i+1, times[i], fmtHist(hs))
			}
		}
	}

	// By time range: each record is found by its own time, however far
	// its entry ID was raised.
	for _, c := range []struct {
		since, until time.Duration // -1: open
		want         []string
	}{
		{secs(1), secs(1.5), []string{"cb-b completed"}},
		{-1, secs(2), []string{"cb-b completed"}},
		{secs(2), secs(3), []string{"cb-b created", "cb-b scheduled"}},
		{secs(3), secs(4), []string{"cb-a processing", "cb-b processing"}},
		{secs(4), secs(10), []string{"cb-a completed"}},
		{secs(3.5), secs(10), []string{"cb-a completed"}},
		{secs(10), secs(11), []string{"cb-a created", "cb-a scheduled"}},
		{secs(10), -1, []string{"cb-a created", "cb-a scheduled"}},
		{secs(1.5), secs(2), nil},
		{secs(5), secs(10), nil},
	} {
		q := &store.Query{}
		if c.since >= 0 {
			q.Since = at(c.since)
		}
		if c.until >= 0 {
			q.Until = at(c.until)
		}
		hs := e.history(q)
		got := histKeys(hs)
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Fatalf("LookupHistory [%v, %v): %v, want %v:%s", c.since, c.until, got, c.want, fmtHist(hs))
		}
		for _, h := range hs {
			if !q.InRange(h.Time) {
				t.Fatalf("LookupHistory [%v, %v) returned a record at %v", c.since, c.until, h.Time.Sub(base))
			}
		}
	}

	// The whole stream: oldest first by time, except that each instance's
	// records keep Seq order.
	all := e.history(&store.Query{})
	if len(all) != 8 {
		t.Fatalf("LookupHistory: %d records, want 8:%s", len(all), fmtHist(all))
	}
	last := map[string]uint64{}
	for _, h := range all {
		if h.Seq != last[h.InstanceID]+1 {
			t.Fatalf("LookupHistory: records of %s out of Seq order:%s", h.InstanceID, fmtHist(all))
		}
		last[h.InstanceID] = h.Seq
	}

	// Logs likewise.
	if err := e.s.AppendLogs(ctx, []*store.LogRecord{{InstanceID: "cb-a", Kind: "k", Attempt: 1, Level: store.LevelInfo, Time: at(secs(10)), Node: "w", Message: "late clock"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.AppendLogs(ctx, []*store.LogRecord{{InstanceID: "cb-b", Kind: "k", Attempt: 1, Level: store.LevelInfo, Time: at(secs(1)), Node: "w", Message: "early clock"}}); err != nil {
		t.Fatal(err)
	}
	logs, err := e.s.LookupLogs(ctx, &store.Query{Since: at(secs(1)), Until: at(secs(2))})
	if err != nil || len(logs) != 1 || logs[0].InstanceID != "cb-b" || !logs[0].Time.Equal(at(secs(1))) {
		t.Fatalf("LookupLogs [1s, 2s): %+v, %v; want cb-b's record at 1s", logs, err)
	}
	logs, err = e.s.LookupLogs(ctx, &store.Query{InstanceID: "cb-b"})
	if err != nil || len(logs) != 1 || logs[0].Message != "early clock" || !logs[0].Time.Equal(at(secs(1))) {
		t.Fatalf("LookupLogs(cb-b): %+v, %v; want its record at 1s", logs, err)
	}
}

// doneEntry is one done-list member: FinishedAt (7 bytes, us) then ID.
type doneEntry struct {
	id  string
	fin time.Duration
}

func (d doneEntry) String() string { return fmt.Sprintf("%s@%v", d.id, d.fin) }

// doneList returns the done list of final state st.
func (e *layEnv) doneList(st store.State) []doneEntry {
	e.t.Helper()
	ms, err := e.rc.LRange(e.t.Context(), e.keys.Done(st), 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []doneEntry
	for _, m := range ms {
		if len(m) < 8 {
			e.t.Fatalf("done list member %q is too short", m)
		}
		var us int64
		for i := range 7 {
			us = us<<8 | int64(m[i])
		}
		id, err := redisscript.DecodeID(m[7:])
		if err != nil {
			e.t.Fatalf("done list member: %v", err)
		}
		out = append(out, doneEntry{id, redisscript.FromMicros(us).Sub(base)})
	}
	return out
}

func (e *layEnv) lateSet() []doneEntry {
	e.t.Helper()
	zs, err := e.rc.ZRangeWithScores(e.t.Context(), e.key("late"), 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []doneEntry
	for _, z := range zs {
		id, err := redisscript.DecodeID(z.Member.(string))
		if err != nil {
			e.t.Fatalf("late set member: %v", err)
		}
		out = append(out, doneEntry{id, redisscript.FromMicros(int64(z.Score)).Sub(base)})
	}
	return out
}

// testLateFinish: each final state has a done list in finishing order;
// instances finished with a Now before their list's tail go to the late
// set, and Prune removes the oldest FinishedAt first across the lists and
// the late set, at most Limit per call.
func testLateFinish(t *testing.T, h Harness) {
	e := layout(t, h)
	var ins []*store.Instance
	for i := 1; i <= 7; i++ {
		ins = append(ins, inst(fmt.Sprintf("p-%d", i), "q"))
	}
	ins = append(ins, inst("p-8", "q-cancel"), inst("p-9", "q-cancel"))
	e.enqueue(base, ins...)
	if got := e.claim("q", "w", 10, base, at(time.Hour)).Instances; len(got) != 7 {
		t.Fatalf("Claim returned %v, want p-1..p-7", ids(got))
	}
	cancel := func(id string, now time.Time) {
		t.Helper()
		if _, err := e.s.Cancel(t.Context(), &store.CancelParams{ID: id, Now: now, Node: "n"}); err != nil {
			t.Fatalf("Cancel %s: %v", id, err)
		}
	}
	e.done("w", at(secs(10)), "p-1") // Completed list empty: there
	e.done("w", at(secs(5)), "p-2")  // behind its tail at 10s: late
	e.done("w", at(secs(10)), "p-3") // at the tail: Completed list
	cancel("p-8", at(secs(1)))       // Canceled list empty, though 1s is behind every other: there
	cancel("p-9", at(secs(0.5)))     // behind the Canceled list's tail: late
	e.done("w", at(secs(20)), "p-4") // Completed list
	e.done("w", at(secs(2)), "p-5")  // late
	e.done("w", at(secs(15)), "p-6") // late
	e.done("w", at(secs(25)), "p-7") // Completed list

	check := func(when string, completed, canceled, late []doneEntry) {
		t.Helper()
		if got := e.doneList(store.Completed); !slices.Equal(got, completed) {
			t.Fatalf("%s: Completed list %v, want %v", when, got, completed)
		}
		if got := e.doneList(store.Canceled); !slices.Equal(got, canceled) {
			t.Fatalf("%s: Canceled list %v, want %v", when, got, canceled)
		}
		if got := e.lateSet(); !slices.Equal(got, late) {
			t.Fatalf("%s: late set %v, want %v", when, got, late)
		}
		for _, st := range []store.State{store.Terminated, store.TimedOut} {
			if got := e.doneList(st); len(got) != 0 {
				t.Fatalf("%s: %v list %v, want it empty", when, st, got)
			}
		}
	}
	check("after finishing", []doneEntry{{"p-1", secs(10)}, {"p-3", secs(10)}, {"p-4", secs(20)}, {"p-7", secs(25)}},
		[]doneEntry{{"p-8", secs(1)}},
		[]doneEntry{{"p-9", secs(0.5)}, {"p-5", secs(2)}, {"p-2", secs(5)}, {"p-6", secs(15)}})
	for id, fin := range map[string]time.Duration{"p-1": secs(10), "p-2": secs(5), "p-5": secs(2), "p-6": secs(15), "p-8": secs(1), "p-9": secs(0.5)} {
		if in := e.get(id); !in.FinishedAt.Equal(at(fin)) || !in.State.Final() {
			t.Fatalf("%s: state %v finished %v, want final at %v", id, in.State, in.FinishedAt.Sub(base), fin)
		}
	}

	// FinishedAt order: p-9 0.5s (late), p-8 1s (Canceled), p-5 2s (late),
	// p-2 5s (late), p-1 10s, p-3 10s, p-6 15s (late), p-4 20s, p-7 25s.
	type step struct {
		p                         store.PruneParams
		n                         int
		completed, canceled, late []doneEntry
	}
	completed := []doneEntry{{"p-1", secs(10)}, {"p-3", secs(10)}, {"p-4", secs(20)}, {"p-7", secs(25)}}
	for i, s := range []step{
		{ // keep 6 of 9, at most 1 this call: the oldest (late set)
			store.PruneParams{KeepFinished: 6, Limit: 1}, 1,
			completed, []doneEntry{{"p-8", secs(1)}},
			[]doneEntry{{"p-5", secs(2)}, {"p-2", secs(5)}, {"p-6", secs(15)}},
		},
		{ // keep 6 of 8, default limit: the Canceled list's p-8, then the late p-5
			store.PruneParams{KeepFinished: 6}, 2,
			completed, nil,
			[]doneEntry{{"p-2", secs(5)}, {"p-6", secs(15)}},
		},
		{ // finished before 16s, at most 2: the late p-2, then the Completed list's p-1
			store.PruneParams{FinishedBefore: at(secs(16)), Limit: 2}, 2,
			completed[1:], nil,
			[]doneEntry{{"p-6", secs(15)}},
		},
		{ // the rest before 16s: p-3 from the list, p-6 from the late set, not p-4
			store.PruneParams{FinishedBefore: at(secs(16)), Limit: 10}, 2,
			completed[2:], nil, nil,
		},
		{ // nothing more before 16s
			store.PruneParams{FinishedBefore: at(secs(16))}, 0,
			completed[2:], nil, nil,
		},
		{ // keep 1
			store.PruneParams{KeepFinished: 1}, 1,
			completed[3:], nil, nil,
		},
	} {
		s.p.Now = at(time.Minute)
		res := e.prune(&s.p)
		if res.Instances != s.n {
			t.Fatalf("prune step %d (%+v): removed %d instances, want %d", i, s.p, res.Instances, s.n)
		}
		check(fmt.Sprintf("after prune step %d", i), s.completed, s.canceled, s.late)
		// The instances left are exactly those the lists name.
		var want []string
		for _, d := range slices.Concat(s.completed, s.canceled, s.late) {
			want = append(want, d.id)
		}
		slices.Sort(want)
		got := e.instances(&store.Query{Kind: "k", Queue: "q", States: []store.State{store.Completed, store.Canceled}})
		got = append(got, e.instances(&store.Query{Kind: "k", Queue: "q-cancel"})...)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("after prune step %d: instances %v, want %v", i, got, want)
		}
	}
}

// leaseBatch is one member of the lease ZSET: its IDs and deadline.
type leaseBatch struct {
	ids   string // comma-separated
	until time.Duration
}

func (b leaseBatch) String() string { return fmt.Sprintf("[%s]@%v", b.ids, b.until) }

func (e *layEnv) leases() []leaseBatch {
	e.t.Helper()
	zs, err := e.rc.ZRangeWithScores(e.t.Context(), e.key("lease"), 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []leaseBatch
	for _, z := range zs {
		out = append(out, leaseBatch{strings.Join(splitIDList(e.t, z.Member.(string)), ","), redisscript.FromMicros(int64(z.Score)).Sub(base)})
	}
	return out
}

// expiredBatches counts lease batches whose deadline is before now.
func (e *layEnv) expiredBatches(now time.Time) int64 {
	e.t.Helper()
	n, err := e.rc.ZCount(e.t.Context(), e.key("lease"), "-inf", "("+strconv.FormatInt(redisscript.Micros(now), 10)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func checkRescued(t testing.TB, what string, got []*store.Instance, want ...string) {
	t.Helper()
	if g := ids(got); !slices.Equal(g, want) {
		t.Fatalf("%s: Rescue returned %v, want %v", what, g, want)
	}
	for _, in := range got {
		if in.State != store.Scheduled || in.Attempt != 1 || in.LeaseOwner != "" || !strings.Contains(in.Error, "expired") {
			t.Fatalf("%s: rescued %s is %v attempt %d owner %q error %q; want scheduled, attempt 1, no lease, an error saying the lease expired",
				what, in.ID, in.State, in.Attempt, in.LeaseOwner, in.Error)
		}
	}
}

// testLeaseBatches: a claim's leases form one batch; Rescue takes at most
// Limit of an expired batch and the next call the rest; renewed and
// finished instances of an expired batch are left alone; and no batch is
// left behind once its deadline passed and Rescue read it.
func testLeaseBatches(t *testing.T, h Harness) {
	e := layout(t, h)
	var ins []*store.Instance
	for i := 1; i <= 5; i++ {
		ins = append(ins, inst(fmt.Sprintf("lb-%d", i), "q"))
	}
	e.enqueue(base, ins...)
	if got := ids(e.claim("q", "w", 5, base, at(time.Minute)).Instances); len(got) != 5 {
		t.Fatalf("Claim returned %v, want 5", got)
	}
	zs, err := e.rc.ZRangeWithScores(t.Context(), e.key("lease"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(zs) != 1 || int64(zs[0].Score) != redisscript.Micros(at(time.Minute)) {
		t.Fatalf("lease ZSET after one claim of 5: %v, want one member scored %d", zs, redisscript.Micros(at(time.Minute)))
	}
	var wantMember string
	for _, in := range ins {
		sid := redisscript.EncodeID(in.ID)
		wantMember += string([]byte{byte(len(sid) >> 8), byte(len(sid))}) + sid
	}
	if zs[0].Member.(string) != wantMember {
		t.Fatalf("lease batch member %q, want the 5 stored IDs each behind its 2-byte length: %q", zs[0].Member, wantMember)
	}

	// lb-2 renewed past the batch's deadline; lb-3 finished.
	rr, err := e.s.Renew(t.Context(), &store.RenewParams{Owner: "w", Leases: []store.LeaseRef{{ID: "lb-2", Attempt: 1}}, Until: at(10 * time.Minute), Now: at(30 * time.Second)})
	if err != nil || len(rr.Lost) != 0 {
		t.Fatalf("Renew lb-2: %+v, %v", rr, err)
	}
	e.done("w", at(30*time.Second), "lb-3")
	if got, want := e.leases(), []leaseBatch{{"lb-1,lb-2,lb-3,lb-4,lb-5", time.Minute}, {"lb-2", 10 * time.Minute}}; !slices.Equal(got, want) {
		t.Fatalf("lease batches after the renew: %v, want %v", got, want)
	}

	// Three expired and still Processing: lb-1, lb-4, lb-5. Limit 2.
	now := at(2 * time.Minute)
	checkRescued(t, "limit 2", e.rescue(now, 2), "lb-1", "lb-4")
	checkRescued(t, "the rest", e.rescue(now, 10), "lb-5")
	checkRescued(t, "nothing left", e.rescue(now, 10))
	if n := e.expiredBatches(now); n != 0 {
		t.Fatalf("after Rescue read every expired batch, %d batches before now remain: %v", n, e.leases())
	}
	if got, want := e.leases(), []leaseBatch{{"lb-2", 10 * time.Minute}}; !slices.Equal(got, want) {
		t.Fatalf("lease batches after the rescues: %v, want %v", got, want)
	}
	if in := e.get("lb-2"); in.State != store.Processing || in.LeaseOwner != "w" || !in.LeaseUntil.Equal(at(10*time.Minute)) {
		t.Fatalf("renewed lb-2: %v owner %q until %v; want processing, w's lease until 10m", in.State, in.LeaseOwner, in.LeaseUntil.Sub(base))
	}
	if in := e.get("lb-3"); in.State != store.Completed || in.Error != "" {
		t.Fatalf("finished lb-3: %v error %q, want completed untouched", in.State, in.Error)
	}

	// A batch whose instances all finished is dropped when read.
	e.enqueue(base, inst("lb-6", "q2"), inst("lb-7", "q2"))
	e.claim("q2", "w", 2, at(3*time.Minute), at(4*time.Minute))
	e.done("w", at(3*time.Minute+30*time.Second), "lb-6", "lb-7")
	if got := len(e.leases()); got != 2 {
		t.Fatalf("lease batches: %v, want lb-2's and lb-6/lb-7's", e.leases())
	}
	now = at(5 * time.Minute)
	checkRescued(t, "finished batch", e.rescue(now, 10))
	if n := e.expiredBatches(now); n != 0 {
		t.Fatalf("a read batch of finished instances is left: %v", e.leases())
	}
	for _, id := range []string{"lb-6", "lb-7"} {
		if in := e.get(id); in.State != store.Completed {
			t.Fatalf("%s is %v after Rescue, want completed", id, in.State)
		}
	}

	// Once lb-2's renewed lease ends, it is rescued, and nothing is left.
	now = at(11 * time.Minute)
	checkRescued(t, "renewed lease ended", e.rescue(now, 10), "lb-2")
	if got := e.leases(); len(got) != 0 {
		t.Fatalf("lease batches at the end: %v, want none", got)
	}
}

// testLeaseRestKeepsRenewal: the IDs of a batch left over when Rescue
// reaches its limit are put back under the batch's deadline. When they
// are exactly the IDs of a later renew's batch, the renew's deadline must
// not be lost: the renewed instance is still rescued once its renewed
// lease ends.
func testLeaseRestKeepsRenewal(t *testing.T, h Harness) {
	e := layout(t, h)
	e.enqueue(base, inst("lr-1", "q"), inst("lr-2", "q"))
	e.claim("q", "w", 2, base, at(time.Minute))
	rr, err := e.s.Renew(t.Context(), &store.RenewParams{Owner: "w", Leases: []store.LeaseRef{{ID: "lr-2", Attempt: 1}}, Until: at(10 * time.Minute), Now: at(30 * time.Second)})
	if err != nil || len(rr.Lost) != 0 {
		t.Fatalf("Renew lr-2: %+v, %v", rr, err)
	}
	checkRescued(t, "limit 1", e.rescue(at(2*time.Minute), 1), "lr-1")
	before := e.leases()
	checkRescued(t, "lr-2 renewed", e.rescue(at(2*time.Minute), 10))
	// w dies: lr-2's renewed lease ends at 10m.
	got := e.rescue(at(11*time.Minute), 10)
	if g := ids(got); !slices.Equal(g, []string{"lr-2"}) {
		t.Fatalf("Rescue after lr-2's renewed lease (until 10m) ended returned %v, want lr-2; lr-2 is %v until %v. "+
			"Lease batches after the limit-1 rescue were %v: the put-back of the rest under the old deadline replaced the renew's batch of the same IDs",
			g, e.get("lr-2").State, e.get("lr-2").LeaseUntil.Sub(base), before)
	}
}

// testKindBuckets: LookupInstances by kind over CreatedAt ranges reads
// the right per-second buckets and returns exactly the matching instances,
// newest first; pruning every instance leaves no bucket, count or second.
func testKindBuckets(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	mk := func(id, kind string, created time.Duration) *store.Instance {
		in := inst(id, "q")
		in.Kind, in.CreatedAt = kind, at(created)
		return in
	}
	// Seconds 0, 1, 3 and 5 of kind mail; sms shares seconds 1 and 3.
	e.enqueue(base, mk("k-5", "mail", secs(3.2)), mk("k-1", "mail", secs(0.1)), mk("k-7", "mail", secs(5)))
	e.enqueue(base, mk("k-3", "mail", secs(1)), mk("k-6", "mail", secs(3.7)), mk("o-1", "sms", secs(1.2)), mk("k-2", "mail", secs(0.9)))
	e.enqueue(base, mk("k-4", "mail", secs(1.5)), mk("o-2", "sms", secs(3.5)), mk("k-8", "mail", secs(1.5)))

	bsec := base.Unix()
	sec := func(i int64) string { return strconv.FormatInt(bsec+i, 10) }
	if got, err := e.rc.ZRange(ctx, e.keys.KindDir("mail"), 0, -1).Result(); err != nil || !slices.Equal(got, []string{sec(0), sec(1), sec(3), sec(5)}) {
		t.Fatalf("kd:mail = %v, %v; want seconds +0 +1 +3 +5", got, err)
	}
	counts := func(kind string) map[string]string {
		m, err := e.rc.HGetAll(ctx, e.key("kn:"+kind)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if got, want := counts("mail"), map[string]string{sec(0): "2", sec(1): "3", sec(3): "2", sec(5): "1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kn:mail = %v, want %v", got, want)
	}
	bucket := func(kind string, i int64) []string {
		b, err := e.rc.Get(ctx, e.keys.KindBucket(kind, bsec+i)).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return splitIDList(t, b)
	}
	if got := bucket("mail", 1); !slices.Equal(got, []string{"k-3", "k-4", "k-8"}) {
		t.Fatalf("kb:mail:+1 = %v, want k-3 k-4 k-8 in enqueue order", got)
	}
	if got := bucket("sms", 1); !slices.Equal(got, []string{"o-1"}) {
		t.Fatalf("kb:sms:+1 = %v, want o-1", got)
	}

	type lq struct {
		since, until time.Duration // -1: open
		limit        int
		want         []string
	}
	lookups := func(when string, cases []lq) {
		t.Helper()
		for _, c := range cases {
			q := &store.Query{Kind: "mail", Limit: c.limit}
			if c.since >= 0 {
				q.Since = at(c.since)
			}
			if c.until >= 0 {
				q.Until = at(c.until)
			}
			if got := e.instances(q); !slices.Equal(got, c.want) {
				t.Fatalf("%s: LookupInstances kind mail [%v, %v) limit %d = %v, want %v", when, c.since, c.until, c.limit, got, c.want)
			}
		}
	}
	// Newest first: k-7 5s, k-6 3.7s, k-5 3.2s, k-8 1.5s (Seq after k-4),
	// k-4 1.5s, k-3 1s, k-2 0.9s, k-1 0.1s.
	lookups("all stored", []lq{
		{-1, -1, 0, []string{"k-7", "k-6", "k-5", "k-8", "k-4", "k-3", "k-2", "k-1"}},
		{-1, -1, 2, []string{"k-7", "k-6"}},
		{-1, -1, 4, []string{"k-7", "k-6", "k-5", "k-8"}},
		{secs(0.5), secs(3.5), 0, []string{"k-5", "k-8", "k-4", "k-3", "k-2"}},
		{secs(0.5), secs(3.5), 3, []string{"k-5", "k-8", "k-4"}},
		{-1, secs(1), 0, []string{"k-2", "k-1"}},
		{-1, secs(1) + time.Microsecond, 0, []string{"k-3", "k-2", "k-1"}},
		{secs(3.7), -1, 0, []string{"k-7", "k-6"}},
		{secs(1.5), secs(1.5) + time.Microsecond, 0, []string{"k-8", "k-4"}},
		{secs(1), secs(2), 1, []string{"k-8"}},
		{secs(2), secs(3), 0, nil},
		{secs(6), -1, 0, nil},
	})

	// Cancel k-7 (at 40s: the later finishes go to the late set), finish
	// the rest, then prune k-1 and k-3 first.
	if _, err := e.s.Cancel(ctx, &store.CancelParams{ID: "k-7", Now: at(secs(40)), Node: "n"}); err != nil {
		t.Fatal(err)
	}
	claimed := ids(e.claim("q", "w", 100, at(secs(10)), at(time.Hour)).Instances)
	if len(claimed) != 9 {
		t.Fatalf("Claim returned %v, want the 9 not canceled", claimed)
	}
	e.done("w", at(secs(20)), "k-1", "k-3")
	var rest []string
	for _, id := range claimed {
		if id != "k-1" && id != "k-3" {
			rest = append(rest, id)
		}
	}
	e.done("w", at(secs(30)), rest...)
	if res := e.prune(&store.PruneParams{Now: at(time.Minute), FinishedBefore: at(secs(25))}); res.Instances != 2 {
		t.Fatalf("Prune finished before 25s removed %d instances, want 2 (k-1, k-3)", res.Instances)
	}
	if got, want := counts("mail"), map[string]string{sec(0): "1", sec(1): "2", sec(3): "2", sec(5): "1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kn:mail after pruning k-1 and k-3 = %v, want %v", got, want)
	}
	lookups("k-1 and k-3 pruned", []lq{
		{-1, -1, 0, []string{"k-7", "k-6", "k-5", "k-8", "k-4", "k-2"}},
		{secs(0), secs(2), 0, []string{"k-8", "k-4", "k-2"}},
		{secs(0), secs(2), 2, []string{"k-8", "k-4"}},
		{-1, secs(1.5), 0, []string{"k-2"}},
	})

	if res := e.prune(&store.PruneParams{Now: at(time.Hour), FinishedBefore: at(time.Hour)}); res.Instances != 8 {
		t.Fatalf("Prune of everything removed %d instances, want 8", res.Instances)
	}
	lookups("all pruned", []lq{{-1, -1, 0, nil}})
	for _, kind := range []string{"mail", "sms"} {
		var left []string
		iter := e.rc.Scan(ctx, 0, e.key("kb:"+kind+":*"), 1000).Iterator()
		for iter.Next(ctx) {
			left = append(left, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Fatalf("kind %s: buckets left after pruning every instance: %q", kind, left)
		}
		if got := counts(kind); len(got) != 0 {
			t.Fatalf("kn:%s after pruning every instance: %v, want no field", kind, got)
		}
		if n, err := e.rc.ZCard(ctx, e.keys.KindDir(kind)).Result(); err != nil || n != 0 {
			t.Fatalf("kd:%s after pruning every instance: %d members, %v; want none", kind, n, err)
		}
	}
}

// testKindBucketLimitBigSecond: one CreatedAt second holding more IDs
// than Core reads per records call (1000). A limited lookup must still
// return the newest, wherever the newest sits in the second's bucket.
func testKindBucketLimitBigSecond(t *testing.T, h Harness) {
	e := layout(t, h)
	var ins []*store.Instance
	for i := range 1001 {
		in := inst(fmt.Sprintf("big-%04d", i), "q")
		in.Kind = "bulk"
		ins = append(ins, in)
	}
	ins[1000].CreatedAt = at(secs(0.9)) // the newest, last in the bucket
	e.enqueue(base, ins...)
	if got := e.instances(&store.Query{Kind: "bulk"}); len(got) != 1001 || got[0] != "big-1000" || got[1] != "big-0999" {
		t.Fatalf("LookupInstances kind bulk: %d instances starting %v, want 1001 starting big-1000 big-0999", len(got), got[:min(3, len(got))])
	}
	if got := e.instances(&store.Query{Kind: "bulk", Limit: 1}); !slices.Equal(got, []string{"big-1000"}) {
		t.Fatalf("LookupInstances kind bulk limit 1 = %v, want big-1000 (CreatedAt +0.9s, the newest; it is the 1001st ID of its second's bucket)", got)
	}
	if got := e.instances(&store.Query{Kind: "bulk", Limit: 2}); !slices.Equal(got, []string{"big-1000", "big-0999"}) {
		t.Fatalf("LookupInstances kind bulk limit 2 = %v, want big-1000 big-0999", got)
	}
}

// testCancelReady: an instance canceled while in a ready list stays there
// until a claim pops it; claims skip it without counting it, and drain
// the lists.
func testCancelReady(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	mk := func(id string, prio int) *store.Instance {
		in := inst(id, "cq")
		in.Priority = prio
		return in
	}
	e.enqueue(base, mk("cr-1", 5), mk("cr-2", 5), mk("cr-3", 5), mk("cr-4", 0), mk("cr-5", 0))
	llen := func(prio int) int64 {
		n, err := e.rc.LLen(ctx, e.keys.LaneReady("cq", prio, "k", nil)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, id := range []string{"cr-1", "cr-3", "cr-5"} {
		in, err := e.s.Cancel(ctx, &store.CancelParams{ID: id, Now: at(time.Second), Node: "n"})
		if err != nil || in.State != store.Canceled {
			t.Fatalf("Cancel %s: %+v, %v", id, in, err)
		}
	}
	if llen(5) != 3 || llen(0) != 2 {
		t.Fatalf("ready lists after the cancels: prio 5 %d, prio 0 %d; want 3 and 2 (canceled IDs stay until popped)", llen(5), llen(0))
	}
	now := at(2 * time.Second)
	for _, want := range []string{"cr-2", "cr-4"} {
		if got := ids(e.claim("cq", "w", 1, now, at(time.Hour)).Instances); !slices.Equal(got, []string{want}) {
			t.Fatalf("Claim limit 1 = %v, want %s (canceled ones skipped, not counted)", got, want)
		}
	}
	res := e.claim("cq", "w", 1, now, at(time.Hour))
	if len(res.Instances) != 0 || !res.NextRunAt.IsZero() {
		t.Fatalf("Claim after the queue drained = %v next %v, want none", ids(res.Instances), res.NextRunAt)
	}
	if llen(5) != 0 || llen(0) != 0 {
		t.Fatalf("ready lists after the claims: prio 5 %d, prio 0 %d; want both empty", llen(5), llen(0))
	}
	if n, err := e.rc.ZCard(ctx, e.keys.Levels("cq")).Result(); err != nil || n != 0 {
		t.Fatalf("q:cq:p after the claims drained every list: %d members, %v; want none", n, err)
	}
	for _, id := range []string{"cr-1", "cr-3", "cr-5"} {
		in := e.get(id)
		if in.State != store.Canceled || in.Attempt != 0 {
			t.Fatalf("%s after the claims: %v attempt %d, want canceled, never run", id, in.State, in.Attempt)
		}
		for _, h := range e.history(&store.Query{InstanceID: id}) {
			if h.State == store.Processing {
				t.Fatalf("%s has a processing record:%s", id, fmtHist(e.history(&store.Query{InstanceID: id})))
			}
		}
	}
	// Limit 2 over [canceled, ready, ready, ready, canceled] gives the
	// first two ready ones and leaves the rest for the next claim.
	e.enqueue(base, mk("cr-6", 1), mk("cr-7", 1), mk("cr-8", 1), mk("cr-9", 1), mk("cr-10", 1))
	for _, id := range []string{"cr-6", "cr-10"} {
		if _, err := e.s.Cancel(ctx, &store.CancelParams{ID: id, Now: now, Node: "n"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := ids(e.claim("cq", "w", 2, now, at(time.Hour)).Instances); !slices.Equal(got, []string{"cr-7", "cr-8"}) {
		t.Fatalf("Claim limit 2 = %v, want cr-7 cr-8", got)
	}
	if n := llen(1); n != 2 {
		t.Fatalf("ready list prio 1 holds %d after the claim, want 2 (cr-9, the canceled cr-10)", n)
	}
	if got := ids(e.claim("cq", "w", 5, now, at(time.Hour)).Instances); !slices.Equal(got, []string{"cr-9"}) {
		t.Fatalf("Claim limit 5 = %v, want cr-9", got)
	}
	if n := llen(1); n != 0 {
		t.Fatalf("ready list prio 1 holds %d after the last claim, want 0", n)
	}
}

// testCancelReadyReused: an instance canceled while ready and then pruned
// leaves its ID in the ready list. When an instance with the same ID is
// enqueued again for later, a claim before its RunAt must not take it.
func testCancelReadyReused(t *testing.T, h Harness) {
	e := layout(t, h)
	e.enqueue(base, inst("ru-1", "q"))
	if _, err := e.s.Cancel(t.Context(), &store.CancelParams{ID: "ru-1", Now: base, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	if res := e.prune(&store.PruneParams{Now: at(time.Second), FinishedBefore: at(time.Second)}); res.Instances != 1 {
		t.Fatalf("Prune removed %d instances, want ru-1", res.Instances)
	}
	again := inst("ru-1", "q")
	again.RunAt, again.CreatedAt = at(time.Hour), at(2*time.Second)
	e.enqueue(at(2*time.Second), again)
	res := e.claim("q", "w", 1, at(3*time.Second), at(time.Minute))
	if len(res.Instances) != 0 || !res.NextRunAt.Equal(at(time.Hour)) {
		t.Fatalf("Claim at 3s = %v next %v; want nothing before ru-1's RunAt (%v): the canceled ru-1's stale ready-list entry was taken for the new ru-1", ids(res.Instances), res.NextRunAt, at(time.Hour))
	}
	if got := ids(e.claim("q", "w", 1, at(time.Hour), at(2*time.Hour)).Instances); !slices.Equal(got, []string{"ru-1"}) {
		t.Fatalf("Claim at 1h = %v, want ru-1", got)
	}
}

// testUUIDIDs: a canonical lowercase UUID is stored in 17 bytes
// everywhere the layout keeps an ID, and every call gives back the same
// string; an uppercase UUID is another ID, stored as text, and round-trips
// too.
func testUUIDIDs(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	const lower = "0f8fad5b-d9cb-469f-a165-70867728950e"
	const upper = "0F8FAD5B-D9CB-469F-A165-70867728950E"
	for _, c := range []struct {
		id    string
		width int
	}{{lower, 17}, {upper, 1 + len(upper)}} {
		if sid := redisscript.EncodeID(c.id); len(sid) != c.width {
			t.Fatalf("EncodeID(%s) is %d bytes, want %d", c.id, len(sid), c.width)
		}
	}
	lin, uin := inst(lower, "uq"), inst(upper, "uq")
	res := e.enqueue(base, lin, uin)
	if res[0].ID != lower || res[1].ID != upper || res[0].Seq == res[1].Seq {
		t.Fatalf("Enqueue returned %+v, want both IDs as given, as two instances", res)
	}
	sid := redisscript.EncodeID(lower)
	for _, c := range []struct {
		id, sid string
	}{{lower, sid}, {upper, "\x00" + upper}} {
		ok, err := e.rc.HExists(ctx, e.keys.Inst(), c.sid).Result()
		if err != nil || !ok {
			t.Fatalf("HEXISTS inst %q = %v, %v; want the spec of %s there", c.sid, ok, err, c.id)
		}
	}
	if ok, _ := e.rc.HExists(ctx, e.keys.Inst(), "\x00"+lower).Result(); ok {
		t.Fatalf("the lowercase UUID is also stored as text")
	}
	if n, _ := e.rc.HLen(ctx, e.keys.Inst()).Result(); n != 2 {
		t.Fatalf("inst holds %d fields, want 2", n)
	}
	// A ready entry is RunAt (7 bytes), Seq (6 bytes), then the stored ID.
	ready, err := e.rc.LRange(ctx, e.keys.LaneReady("uq", 0, "k", nil), 0, -1).Result()
	runAt := beBytes(uint64(redisscript.Micros(base)), 7)
	want := []string{runAt + "\x00\x00\x00\x00\x00\x01" + sid, runAt + "\x00\x00\x00\x00\x00\x02\x00" + upper}
	if err != nil || !slices.Equal(ready, want) {
		t.Fatalf("ready list = %q, %v; want RunAt, Seq, then the 17-byte and the text ID: %q", ready, err, want)
	}
	if got := bucketIDs(t, e, "k"); !slices.Equal(got, []string{lower, upper}) {
		t.Fatalf("kind bucket = %v, want both IDs", got)
	}

	cl := e.claim("uq", "w", 2, base, at(time.Minute))
	if g := ids(cl.Instances); !slices.Equal(g, []string{lower, upper}) {
		t.Fatalf("Claim returned %v, want %s, %s", g, lower, upper)
	}
	if got := e.leases(); len(got) != 1 || got[0].ids != lower+","+upper {
		t.Fatalf("lease batches %v, want one listing both", got)
	}
	// Rescue, claim again, finish.
	if got := ids(e.rescue(at(2*time.Minute), 10)); !slices.Equal(got, []string{lower, upper}) {
		t.Fatalf("Rescue returned %v, want %s, %s", got, lower, upper)
	}
	cl = e.claim("uq", "w", 2, at(2*time.Minute), at(time.Hour))
	if g := ids(cl.Instances); !slices.Equal(g, []string{lower, upper}) {
		t.Fatalf("second Claim returned %v", g)
	}
	if err := e.s.AppendLogs(ctx, []*store.LogRecord{
		{InstanceID: lower, Kind: "k", Attempt: 2, Level: store.LevelInfo, Time: at(3 * time.Minute), Node: "w", Message: "lower"},
		{InstanceID: upper, Kind: "k", Attempt: 2, Level: store.LevelInfo, Time: at(3 * time.Minute), Node: "w", Message: "upper"},
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.rc.LLen(ctx, e.key("l:"+sid)).Result(); err != nil || n != 1 {
		t.Fatalf("log list under the 17-byte ID: %d, %v; want 1 entry", n, err)
	}
	e.finish("w", at(4*time.Minute), store.Outcome{ID: lower, Attempt: 2, State: store.Completed, Result: []byte(`1`)},
		store.Outcome{ID: upper, Attempt: 2, State: store.Completed})
	done := e.doneList(store.Completed)
	if len(done) != 2 || done[0].id != lower || done[1].id != upper {
		t.Fatalf("done list %v, want both", done)
	}

	for _, id := range []string{lower, upper} {
		in := e.get(id)
		if in.ID != id || in.State != store.Completed || in.Attempt != 2 {
			t.Fatalf("LookupInstances(%s): %s %v attempt %d", id, in.ID, in.State, in.Attempt)
		}
		hs := e.history(&store.Query{InstanceID: id})
		if len(hs) != 6 {
			t.Fatalf("history of %s: %d records, want 6:%s", id, len(hs), fmtHist(hs))
		}
		for _, h := range hs {
			if h.InstanceID != id || h.Kind != "k" {
				t.Fatalf("history of %s holds a record of %q kind %q", id, h.InstanceID, h.Kind)
			}
		}
		logs, err := e.s.LookupLogs(ctx, &store.Query{InstanceID: id})
		if err != nil || len(logs) != 1 || logs[0].InstanceID != id {
			t.Fatalf("LookupLogs(%s): %+v, %v", id, logs, err)
		}
	}
	if got := e.instances(&store.Query{Kind: "k"}); !slices.Equal(got, []string{upper, lower}) {
		t.Fatalf("LookupInstances kind k = %v, want %s, %s", got, upper, lower)
	}
	hs := e.history(&store.Query{Since: base, Until: at(time.Hour)})
	n := map[string]int{}
	for _, h := range hs {
		n[h.InstanceID]++
	}
	if len(n) != 2 || n[lower] != 6 || n[upper] != 6 {
		t.Fatalf("LookupHistory by time: records per ID %v, want 6 each of %s and %s", n, lower, upper)
	}
	hs = e.history(&store.Query{Kind: "k"})
	if len(hs) != 12 {
		t.Fatalf("LookupHistory by kind: %d records, want 12:%s", len(hs), fmtHist(hs))
	}
	logs, err := e.s.LookupLogs(ctx, &store.Query{Since: base})
	if err != nil || len(logs) != 2 {
		t.Fatalf("LookupLogs by time: %+v, %v", logs, err)
	}
	for _, l := range logs {
		if (l.Message == "lower") != (l.InstanceID == lower) || (l.Message == "upper") != (l.InstanceID == upper) {
			t.Fatalf("log %q names instance %q", l.Message, l.InstanceID)
		}
	}
	if _, err := e.s.Cancel(ctx, &store.CancelParams{ID: lower, Now: at(5 * time.Minute)}); err == nil {
		t.Fatalf("Cancel of the completed %s: no error", lower)
	}
}

// bucketIDs lists the IDs of every bucket of kind, oldest second first.
func bucketIDs(t testing.TB, e *layEnv, kind string) []string {
	t.Helper()
	secs, err := e.rc.ZRange(t.Context(), e.keys.KindDir(kind), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range secs {
		n, _ := strconv.ParseInt(s, 10, 64)
		b, err := e.rc.Get(t.Context(), e.keys.KindBucket(kind, n)).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, splitIDList(t, b)...)
	}
	return out
}

// beBytes encodes v as w big-endian bytes.
func beBytes(v uint64, w int) string {
	b := make([]byte, w)
	for i := w - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return string(b)
}

// testLegacyReadyList: a ready list written before lanes (key
// q:<queue>:r:<prio>, entries Seq then ID, lane index member the priority
// alone) is moved into lanes by the next claim, which then takes from it
// by kind: nothing waiting from before an upgrade is lost.
func testLegacyReadyList(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	a, b := inst("lg-a", "lq"), inst("lg-b", "lq")
	b.Kind = "other"
	e.enqueue(base, a, b)
	// Rewrite the lanes as a list of before: one list per priority.
	var legacy []any
	for _, kind := range []string{"k", "other"} {
		key := e.keys.LaneReady("lq", 0, kind, nil)
		ms, err := e.rc.LRange(ctx, key, 0, -1).Result()
		if err != nil || len(ms) != 1 {
			t.Fatalf("lane %s: %q, %v; want one entry", kind, ms, err)
		}
		legacy = append(legacy, ms[0][7:]) // without RunAt: Seq then ID
		e.rc.Del(ctx, key)
	}
	e.rc.Del(ctx, e.keys.Levels("lq"))
	e.rc.RPush(ctx, e.keys.Ready("lq", 0), legacy...)
	e.rc.ZAdd(ctx, e.keys.Levels("lq"), redis.Z{Score: 0, Member: "0"})

	res, err := e.s.Claim(ctx, &store.ClaimParams{Queue: "lq", Owner: "w", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Minute), Kinds: []string{"other"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(res.Instances); !slices.Equal(got, []string{"lg-b"}) {
		t.Fatalf("claim of kind other from a list of before: %v, want [lg-b]", got)
	}
	if n, _ := e.rc.Exists(ctx, e.keys.Ready("lq", 0)).Result(); n != 0 {
		t.Fatalf("the list of before is still there after a claim moved it")
	}
	if got := ids(e.claim("lq", "w2", 10, at(time.Second), at(time.Minute)).Instances); !slices.Equal(got, []string{"lg-a"}) {
		t.Fatalf("claim of any kind after the move: %v, want [lg-a]", got)
	}
}

// testLaneMerge: claims merge lanes in the contract's order: priority
// first, equal RunAt by Seq across lanes, and rescued instances back at
// the front of their lanes ahead of what became ready after them, also
// when a claimer of one kind took from between them; drained lanes leave
// the lane index.
func testLaneMerge(t *testing.T, h Harness) {
	e := layout(t, h)
	ctx := t.Context()
	const q = "hq"
	var ins []*store.Instance
	for _, s := range []struct{ id, kind string }{{"x1", "a"}, {"y1", "b"}, {"x2", "a"}, {"y2", "b"}, {"x3", "a"}} {
		in := inst(s.id, q)
		in.Kind = s.kind
		ins = append(ins, in)
	}
	z := inst("z", q)
	z.Kind, z.Priority = "c", 5
	e.enqueue(base, append(ins, z)...)
	lanes := func() int64 {
		n, _ := e.rc.ZCard(ctx, e.keys.Levels(q)).Result()
		return n
	}

	now, until := at(time.Second), at(time.Minute)
	if got := ids(e.claim(q, "w1", 3, now, until).Instances); !slices.Equal(got, []string{"z", "x1", "y1"}) {
		t.Fatalf("first claim: %v, want [z x1 y1] (priority, then Seq across lanes)", got)
	}
	if n := lanes(); n != 2 {
		t.Fatalf("after the first claim: %d lanes, want 2 (c drained)", n)
	}
	// z, x1 and y1 come back at the front of their lanes.
	if got := e.rescue(at(2*time.Minute), 10); len(got) != 3 {
		t.Fatalf("rescue: %d instances, want 3", len(got))
	}
	now, until = at(2*time.Minute+time.Second), at(3*time.Minute)
	res, err := e.s.Claim(ctx, &store.ClaimParams{Queue: q, Owner: "w2", Limit: 1, Now: now, LeaseUntil: until, Kinds: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(res.Instances); !slices.Equal(got, []string{"y1"}) {
		t.Fatalf("claim of kind b after the rescue: %v, want [y1]", got)
	}
	if got := ids(e.claim(q, "w3", 10, now, until).Instances); !slices.Equal(got, []string{"z", "x1", "x2", "y2", "x3"}) {
		t.Fatalf("claim of any kind after the rescue: %v, want [z x1 x2 y2 x3]", got)
	}
	if n := lanes(); n != 0 {
		t.Fatalf("drained: %d lanes left, want none", n)
	}
}

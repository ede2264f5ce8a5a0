package scripttest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// TestPruneFreesHistoryEntries checks, on the Lua scripts themselves,, on the Lua scripts themselves, that pruning finished instances
// frees the history stream entries that hold only their records, without
// waiting for history retention (a week by default), and keeps the entries
// that still hold a record of a stored instance. Before, those entries
// stayed until HistoryBefore trimmed them, so Redis memory grew with
// throughput however well finished instances were pruned.
func TestPruneFreesHistoryEntries(t *testing.T) {
	c, r := hookCore(t)
	e := &interleave{t: t, c: c, r: r}
	hist := c.Keys().Script[3]
	xlen := func() int64 {
		t.Helper()
		n, err := r.c.XLen(t.Context(), hist).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// A pending instance, enqueued first with one that finishes, so its
	// entry is shared and must stay.
	e.enqueue(ibase, iinst("pending", "k", ibase.Add(24*time.Hour)), iinst("shared", "k", ibase))
	for b := range 5 {
		var ins []*store.Instance
		for i := range 40 {
			ins = append(ins, iinst(fmt.Sprintf("b%d-%02d", b, i), "k", ibase))
		}
		e.enqueue(ibase, ins...)
	}
	for b := range 3 {
		res := e.claim("q", 100, ibase.Add(time.Duration(b)*time.Second), ibase.Add(time.Hour))
		var outs []store.Outcome
		for _, in := range res {
			outs = append(outs, store.Outcome{ID: in.ID, Attempt: 1, State: store.Completed})
		}
		e.finish(ibase.Add(time.Duration(b)*time.Second+time.Millisecond), outs...)
	}
	before := xlen()
	for {
		res, err := c.Prune(t.Context(), &store.PruneParams{Now: ibase.Add(time.Hour), FinishedBefore: ibase.Add(time.Hour), Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		if res.Instances < 50 {
			break
		}
	}
	if n, err := r.c.HLen(t.Context(), c.Keys().Inst()).Result(); err != nil || n != 1 {
		t.Fatalf("%d instances left (%v), want the pending one", n, err)
	}
	if after := xlen(); after != 1 {
		t.Errorf("history stream has %d entries after pruning every finished instance (%d before), want 1: the entry shared with the pending instance", after, before)
	}
	hs, err := c.LookupHistory(t.Context(), &store.Query{InstanceID: "pending"})
	if err != nil || len(hs) != 2 {
		t.Errorf("history of the pending instance: %d records (%v), want Created and Scheduled", len(hs), err)
	}
}

// TestPruneHistoryReadsBounded checks that one Prune reads a bounded
// number of history entries however many newer entries lie within the
// clock skew past its bound. Entries are trimmed by their time, and one
// whose ID ran ahead of its time (a caller's clock behind the stream's)
// may sit up to the stream's skew past HistoryBefore, so Prune reads that
// far. It read on until it had removed Limit entries: with a large skew
// (one caller's clock an hour behind, once, raises it for good) every
// call read every entry of that window, kept ones included, so a call's
// work grew with the history stream. On a redis-server of its own, so
// INFO commandstats counts only this test's commands.
func TestPruneHistoryReadsBounded(t *testing.T) {
	p := testserver.StartRedis(t, "--appendonly", "no", "--save", "")
	rc := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { rc.Close() })
	r := &hookRunner{c: rc, scripts: map[*redisscript.Script]*redis.Script{}}
	for _, s := range redisscript.All {
		r.scripts[s] = redis.NewScript(s.Source)
	}
	c, err := redisscript.NewCore(r, "prune_bounded", "test")
	if err != nil {
		t.Fatal(err)
	}
	e := &interleave{t: t, c: c, r: r}
	late := ibase.Add(time.Hour)
	// The stream reaches late; then a caller an hour behind writes (its
	// entry gets late's ID: the skew is now an hour); then 500 entries
	// newer than the bound below, each one enqueue.
	e.enqueue(late, iinst("first", "k", late))
	e.enqueue(ibase, iinst("behind", "k", ibase))
	for i := range 500 {
		e.enqueue(late.Add(time.Duration(i+1)*time.Millisecond), iinst(fmt.Sprintf("new-%03d", i), "k", late))
	}
	hist := c.Keys().Script[3]
	xranges := func() int64 {
		t.Helper()
		info, err := rc.Info(t.Context(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "cmdstat_xrange:calls="); ok {
				n, _ := strconv.ParseInt(strings.SplitN(v, ",", 2)[0], 10, 64)
				return n
			}
		}
		return 0
	}
	for call := range 3 {
		x0 := xranges()
		res, err := c.Prune(t.Context(), &store.PruneParams{Now: late.Add(time.Second), HistoryBefore: late, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		// Limit 2: at most 4 * Limit = 8 entries read, in calls of at
		// most Limit entries each.
		if n := xranges() - x0; n > 4 {
			t.Fatalf("Prune call %d (Limit 2) ran XRANGE %d times, want at most 4: it read the newer entries within the skew window in full", call+1, n)
		}
		if call == 0 && res.History != 2 {
			t.Fatalf("first Prune removed %d history records, want 2 (the Created and Scheduled of the entry written an hour behind)", res.History)
		}
	}
	if n, err := rc.XLen(t.Context(), hist).Result(); err != nil || n != 501 {
		t.Fatalf("history stream has %d entries (%v), want 501: only the entry written an hour behind is before the bound", n, err)
	}
}

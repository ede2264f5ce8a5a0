package scripttest

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
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

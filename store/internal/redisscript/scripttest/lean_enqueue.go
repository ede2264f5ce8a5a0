package scripttest

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// testLeanEnqueueSameRecords: an instance enqueued alone (the lean
// enqueue_one function) is stored exactly as the general enqueue stores
// it: the same record, ready entry, lane index and head hint, kind bucket
// and its directory and count, counts, kinds and queues, and the same
// history entry (which the general call shares with the other instance
// it stores, behind this one's ID). Also where the lean function packs
// the record's numbers itself: a Seq past 16 and 32 bits, a history
// entry whose ID's sequence part is past 127 (its ms already has 201
// entries), and one raised past a stream ahead of the call's clock.
func testLeanEnqueueSameRecords(t *testing.T, h Harness) {
	type setup struct {
		name    string
		seq     int64  // ctr's seq before the call
		entryID string // an entry added to hist before the call
		bigArgs bool   // arguments past 64 KiB
	}
	ms := base.UnixMilli()
	cases := []setup{
		{name: "fresh"},
		{name: "seq_past_16_bits", seq: 70_000},
		{name: "seq_past_32_bits", seq: 5_000_000_000},
		{name: "entry_seq_past_127", entryID: fmt.Sprintf("%d-200", ms)},
		{name: "stream_ahead", entryID: fmt.Sprintf("%d-0", ms+5)},
		{name: "args_past_64KiB", bigArgs: true},
	}
	for _, id := range []string{"lean-x", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"} {
		for _, c := range cases {
			if id == "lean-x" && c.name != "fresh" {
				continue
			}
			t.Run(id+"/"+c.name, func(t *testing.T) { leanSameRecords(t, h, id, c.seq, c.entryID, c.bigArgs) })
		}
	}
}

func leanSameRecords(t *testing.T, h Harness, id string, seq int64, entryID string, bigArgs bool) {
	lean, general := layout(t, h), layout(t, h)
	for _, e := range []*layEnv{lean, general} {
		if seq > 0 {
			if err := e.rc.HSet(t.Context(), e.key("ctr"), "seq", seq).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if entryID != "" {
			if err := e.rc.XAdd(t.Context(), &redis.XAddArgs{Stream: e.key("hist"), ID: entryID, Values: []string{"r", "x"}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	x := inst(id, "lq")
	x.Kind, x.Priority, x.MaxRetries, x.Timeout = "lk", 3, 2, 5*time.Second
	x.RunAt = at(-time.Second) // due, before now
	x.Labels = []string{"gpu", "eu"}
	x.Metadata = map[string]string{"tenant": "t1"}
	if bigArgs {
		x.Args = []byte(`"` + strings.Repeat("a", 70_000) + `"`)
	}
	y := inst("lean-y", "oq")
	y.Kind = "other"
	lean.enqueue(base, x)
	general.enqueue(base, x, y)

	ctx := t.Context()
	sid := redisscript.EncodeID(id)
	read := func(e *layEnv) map[string]string {
		t.Helper()
		out := map[string]string{}
		str := func(name string, v any, err error) {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out[name] = fmt.Sprint(v)
		}
		spec, err := e.rc.HGet(ctx, e.key("inst"), sid).Result()
		str("inst", spec, err)
		list, err := e.rc.LRange(ctx, e.keys.LaneReady("lq", 3, "lk", x.Labels), 0, -1).Result()
		str("ready list", list, err)
		levels, err := e.rc.ZRangeWithScores(ctx, e.keys.Levels("lq"), 0, -1).Result()
		str("lane index", levels, err)
		heads, err := e.rc.HGetAll(ctx, e.key("q:lq:h")).Result()
		str("head hints", heads, err)
		sec := base.Unix()
		bucket, err := e.rc.Get(ctx, e.keys.KindBucket("lk", sec)).Result()
		str("kind bucket", bucket, err)
		dir, err := e.rc.ZRangeWithScores(ctx, e.keys.KindDir("lk"), 0, -1).Result()
		str("kind directory", dir, err)
		kn, err := e.rc.HGetAll(ctx, e.key("kn:lk")).Result()
		str("bucket counts", kn, err)
		cnt, err := e.rc.HGetAll(ctx, e.key("cnt")).Result()
		lq := map[string]string{}
		for f, v := range cnt {
			if strings.Contains(f, "lq") {
				lq[f] = v
			}
		}
		str("counts of lq", lq, err)
		kinds, err := e.rc.SIsMember(ctx, e.keys.Kinds(), "lk").Result()
		str("in kinds", kinds, err)
		queues, err := e.rc.SIsMember(ctx, e.keys.Queues(), "lq").Result()
		str("in queues", queues, err)
		hist, err := e.rc.XRevRangeN(ctx, e.key("hist"), "+", "-", 1).Result()
		if err != nil || len(hist) != 1 {
			t.Fatalf("history stream: %v, %v; want an entry", hist, err)
		}
		out["history entry ID"] = hist[0].ID
		out["history entry"] = fmt.Sprint(hist[0].Values["r"])
		return out
	}
	got, want := read(lean), read(general)
	// The general call's entry holds y's ID after x's.
	if !strings.HasPrefix(want["history entry"], got["history entry"]) {
		t.Errorf("history entry: alone %q, not the start of the shared one %q", got["history entry"], want["history entry"])
	}
	delete(got, "history entry")
	delete(want, "history entry")
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("%s: alone %q, in a shared call %q", k, got[k], want[k])
		}
	}
	a, b := lean.get(id), general.get(id)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("LookupInstances: alone %+v, in a shared call %+v", a, b)
	}
	ha, hb := lean.history(&store.Query{InstanceID: id}), general.history(&store.Query{InstanceID: id})
	if fmtHist(ha) != fmtHist(hb) {
		t.Errorf("history: alone %s, in a shared call %s", fmtHist(ha), fmtHist(hb))
	}
}

// Package scripttest is the test suite the Redis and Valkey plugins run on
// top of store/storetest: what only a Redis-protocol store has to get
// right (foreign and corrupt values under its keys, a flushed script
// cache, a restarted server, wake-ups across connections). It reaches
// under the store with go-redis to damage data the way an operator or
// another program could.
package scripttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// Harness opens the plugin under test.
type Harness struct {
	// Open returns a store on the redis-server at addr, in namespace ns,
	// with a client of its own that t's cleanup closes.
	Open func(t testing.TB, addr, ns string) store.Store
	// OpenDown is Open for an addr nothing listens at yet: a client made
	// before its server, which must connect once the server comes up.
	OpenDown func(t testing.TB, addr, ns string) store.Store
}

// Run runs the suite against the test binary's redis-server (and, for the
// restart test, one of its own).
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"CorruptRecord", testCorruptRecord},
		{"ForeignKeyType", testForeignKeyType},
		{"ScriptCacheFlushed", testScriptFlush},
		{"FunctionsFlushed", testFunctionFlush},
		{"ServerRestartEmpty", testRestartEmpty},
		{"WithoutFunctions", testWithoutFunctions},
		{"WakeAcrossConnections", testWake},
		{"ServerRestart", testRestart},
		{"ClockBehind", testClockBehind},
		{"LateFinish", testLateFinish},
		{"LeaseBatches", testLeaseBatches},
		{"LeaseRestKeepsRenewal", testLeaseRestKeepsRenewal},
		{"KindBuckets", testKindBuckets},
		{"KindBucketLimitBigSecond", testKindBucketLimitBigSecond},
		{"CancelReady", testCancelReady},
		{"LegacyReadyList", testLegacyReadyList},
		{"ReadyListBeforeOrder", testReadyListBeforeOrder},
		{"ReadySetReads", testReadySetReads},
		{"LaneMerge", testLaneMerge},
		{"CancelReadyReused", testCancelReadyReused},
		{"UUIDIDs", testUUIDIDs},
		{"LookupByStateReadsOnlyItsState", testLookupByStateReadsOnlyItsState},
		{"RunSet", testRunSet},
		{"KindCounts", testKindCounts},
		{"KindCountsBefore", testKindCountsBefore},
		{"LeanEnqueueSameRecords", testLeanEnqueueSameRecords},
		{"AdminDeleteKeys", testAdminDeleteKeys},
		{"ManagerStartedBeforeServer", testManagerBeforeServer},
		{"EventsServerRestart", testEventsRestart},
		{"BatchEnqueue", testBatchEnqueue},
		{"BatchSeqWidths", testBatchSeqWidths},
		{"TriggerUpgrade", testTriggerUpgrade},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

var base = time.Date(2026, time.March, 4, 5, 6, 7, 0, time.UTC)

func ns(t testing.TB) string {
	var b [6]byte
	rand.Read(b[:])
	name := t.Name()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return "rt_" + name + "_" + hex.EncodeToString(b[:])
}

func raw(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func inst(id, queue string) *store.Instance {
	return &store.Instance{ID: id, Kind: "k", Queue: queue, Args: []byte(`[1]`), RunAt: base, CreatedAt: base, MaxRetries: 1}
}

func enqueue(t testing.TB, s store.Store, ins ...*store.Instance) {
	t.Helper()
	res, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: ins, Node: "n", Now: base})
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("Enqueue %s: %v", r.ID, r.Err)
		}
	}
}

func claim(t testing.TB, s store.Store, queue string, limit int, now time.Time) *store.ClaimResult {
	t.Helper()
	res, err := s.Claim(t.Context(), &store.ClaimParams{Queue: queue, Owner: "w", Limit: limit, Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return res
}

func ids(ins []*store.Instance) []string {
	var out []string
	for _, in := range ins {
		out = append(out, in.ID)
	}
	return out
}

// testCorruptRecord: a damaged record is claimed as undecodable, can be
// finished as Terminated, and the rest of the queue and the lookups keep
// working with ErrCorrupt naming only that record.
func testCorruptRecord(t *testing.T, h Harness) {
	addr := testserver.Redis(t)
	n := ns(t)
	s := h.Open(t, addr, n)
	keys, _ := redisscript.NewKeys(n)
	rc := raw(t, addr)
	enqueue(t, s, inst("c-1", "q"), inst("c-2", "q"), inst("c-3", "q"), inst("c-4", "q"))
	for _, id := range []string{"c-2"} {
		if err := rc.HSet(t.Context(), keys.Inst(), redisscript.EncodeID(id), "not a record").Err(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.LookupInstances(t.Context(), &store.Query{})
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "c-2") {
		t.Fatalf("LookupInstances with c-2 damaged: error %v, want ErrCorrupt naming c-2", err)
	}
	if g := ids(got); !slices.Equal(g, []string{"c-4", "c-3", "c-1"}) {
		t.Fatalf("LookupInstances with c-2 damaged returned %v, want the other three", g)
	}
	_, err = s.LookupInstances(t.Context(), &store.Query{InstanceID: "c-2"})
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("LookupInstances(c-2): %v, want ErrCorrupt", err)
	}

	res := claim(t, s, "q", 3, base)
	if g := ids(res.Instances); !slices.Equal(g, []string{"c-1", "c-3"}) {
		t.Fatalf("Claim returned %v, want c-1 and c-3 around the damaged c-2", g)
	}
	if len(res.Undecodable) != 1 || res.Undecodable[0].ID != "c-2" || res.Undecodable[0].Attempt != 1 || !errors.Is(res.Undecodable[0].Err, store.ErrCorrupt) {
		t.Fatalf("Claim's Undecodable = %+v, want c-2 attempt 1 with ErrCorrupt", res.Undecodable)
	}
	errs, err := s.Finish(t.Context(), &store.FinishParams{Owner: "w", Now: base.Add(time.Second), Outcomes: []store.Outcome{
		{ID: "c-2", Attempt: 1, State: store.Terminated, Error: res.Undecodable[0].Err.Error()},
		{ID: "c-1", Attempt: 1, State: store.Completed},
	}})
	if err != nil || errs[0].Err != nil || errs[1].Err != nil {
		t.Fatalf("Finish of the undecodable attempt: %v %v", err, errs)
	}
	got, err = s.LookupInstances(t.Context(), &store.Query{InstanceID: "c-2"})
	if err != nil || len(got) != 1 || got[0].State != store.Terminated || string(got[0].Args) != "not a record" {
		t.Fatalf("c-2 after Terminated: %+v, %v; want terminated with the damaged bytes as args", got, err)
	}
	res = claim(t, s, "q", 3, base)
	if g := ids(res.Instances); !slices.Equal(g, []string{"c-4"}) || len(res.Undecodable) != 0 {
		t.Fatalf("second Claim returned %v %+v, want c-4", g, res.Undecodable)
	}

	// A damaged history entry is left out of lookups with ErrCorrupt.
	if err := rc.XAdd(t.Context(), &redis.XAddArgs{Stream: keys.Prefix + "hist", ID: "*", Values: []string{"r", "junk"}}).Err(); err != nil {
		t.Fatal(err)
	}
	hist, err := s.LookupHistory(t.Context(), &store.Query{})
	if !errors.Is(err, store.ErrCorrupt) || len(hist) < 8 {
		t.Fatalf("LookupHistory with a damaged entry: %d records, %v; want the others and ErrCorrupt", len(hist), err)
	}
}

// testForeignKeyType: a key of the namespace holding another type makes
// that namespace's calls fail with ErrCorrupt, and no other namespace.
func testForeignKeyType(t *testing.T, h Harness) {
	addr := testserver.Redis(t)
	n := ns(t)
	s := h.Open(t, addr, n)
	other := h.Open(t, addr, ns(t))
	keys, _ := redisscript.NewKeys(n)
	if err := raw(t, addr).Set(t.Context(), keys.Inst(), "someone else's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{inst("f-1", "q")}, Now: base})
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Enqueue with a string under the instance hash: %v, want ErrCorrupt", err)
	}
	_, err = s.LookupInstances(t.Context(), &store.Query{InstanceID: "f-1"})
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("LookupInstances with a string under the instance hash: %v, want ErrCorrupt", err)
	}
	enqueue(t, other, inst("f-1", "q"))
	if res := claim(t, other, "q", 1, base); len(res.Instances) != 1 {
		t.Fatalf("another namespace claimed %v", ids(res.Instances))
	}
}

// testScriptFlush: SCRIPT FLUSH between calls costs nothing but a reload.
func testScriptFlush(t *testing.T, h Harness) {
	addr := testserver.Redis(t)
	s := h.Open(t, addr, ns(t))
	rc := raw(t, addr)
	for i := range 5 {
		if err := rc.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		id := "sf-" + string(rune('a'+i))
		enqueue(t, s, inst(id, "q"))
		if err := rc.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		res := claim(t, s, "q", 1, base)
		if g := ids(res.Instances); !slices.Equal(g, []string{id}) {
			t.Fatalf("Claim after SCRIPT FLUSH returned %v, want %s", g, id)
		}
	}
}

// testFunctionFlush: the scripts run as a Functions library loaded once
// per server; FUNCTION FLUSH between calls costs a reload, not an error,
// for writing and read-only scripts alike.
//
// It runs on a redis-server of its own: FUNCTION FLUSH empties the whole
// server, and on the shared one it would pull the library from under the
// tests running beside it.
func testFunctionFlush(t *testing.T, h Harness) {
	p := testserver.StartRedis(t)
	defer p.Stop()
	s := h.Open(t, p.Addr, ns(t))
	rc := raw(t, p.Addr)
	for i := range 5 {
		if err := rc.FunctionFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		id := "ff-" + string(rune('a'+i))
		enqueue(t, s, inst(id, "q"))
		if err := rc.FunctionFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := s.LookupInstances(t.Context(), &store.Query{InstanceID: id})
		if err != nil {
			t.Fatalf("LookupInstances after FUNCTION FLUSH: %v", err)
		}
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("LookupInstances after FUNCTION FLUSH returned %v, want %s", ids(got), id)
		}
		if err := rc.FunctionFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		res := claim(t, s, "q", 1, base)
		if g := ids(res.Instances); !slices.Equal(g, []string{id}) {
			t.Fatalf("Claim after FUNCTION FLUSH returned %v, want %s", g, id)
		}
	}
}

// testRestartEmpty: a server restarted without persistence has neither
// the data nor the Functions library; the store loads it again on its
// next call.
func testRestartEmpty(t *testing.T, h Harness) {
	p := testserver.StartRedis(t)
	s := h.Open(t, p.Addr, ns(t))
	enqueue(t, s, inst("re-1", "q"))
	p.Kill()
	p = testserver.RestartRedis(t, p)
	defer p.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{inst("re-2", "q")}, Now: base})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Enqueue after the restart still fails after 10s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res := claim(t, s, "q", 5, base)
	if g := ids(res.Instances); !slices.Equal(g, []string{"re-2"}) {
		t.Fatalf("Claim after the restart returned %v, want re-2 (re-1 went with the data)", g)
	}
}

// testWithoutFunctions: on a server that refuses FCALL and FUNCTION (here
// its ACL; Redis before 7.0 has neither command) the scripts run with
// EVALSHA as before.
func testWithoutFunctions(t *testing.T, h Harness) {
	p := testserver.StartRedis(t)
	defer p.Stop()
	rc := raw(t, p.Addr)
	if err := rc.Do(t.Context(), "ACL", "SETUSER", "default", "-fcall", "-fcall_ro", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	s := h.Open(t, p.Addr, ns(t))
	for i := range 3 {
		id := "nf-" + string(rune('a'+i))
		enqueue(t, s, inst(id, "q"))
		got, err := s.LookupInstances(t.Context(), &store.Query{InstanceID: id})
		if err != nil || len(got) != 1 {
			t.Fatalf("LookupInstances without Functions: %v, %v", ids(got), err)
		}
		res := claim(t, s, "q", 1, base)
		if g := ids(res.Instances); !slices.Equal(g, []string{id}) {
			t.Fatalf("Claim without Functions returned %v, want %s", g, id)
		}
	}
}

// testWake: a subscriber on one connection hears an enqueue made on
// another within milliseconds.
func testWake(t *testing.T, h Harness) {
	addr := testserver.Redis(t)
	n := ns(t)
	sub := h.Open(t, addr, n)
	pub := h.Open(t, addr, n)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := sub.(store.Notifier).Subscribe(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	var lat []time.Duration
	for i := range 50 {
		start := time.Now()
		enqueue(t, pub, inst("w-"+hex.EncodeToString([]byte{byte(i)}), "q"))
		select {
		case <-ch:
			lat = append(lat, time.Since(start))
		case <-time.After(5 * time.Second):
			t.Fatalf("no wake-up within 5s after enqueue %d", i)
		}
	}
	slices.Sort(lat)
	t.Logf("enqueue → wake-up across connections: p50 %v, p99 %v (includes the enqueue round trip)", lat[len(lat)/2], lat[len(lat)*99/100])
	if p50 := lat[len(lat)/2]; p50 > 20*time.Millisecond {
		t.Fatalf("median wake-up latency %v, want a few ms", p50)
	}
}

// testRestart: a redis-server killed and restarted with its append-only
// file keeps every acknowledged write; the store's client reconnects, the
// scripts reload (NOSCRIPT), and subscriptions come back.
func testRestart(t *testing.T, h Harness) {
	p := testserver.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	n := ns(t)
	s := h.Open(t, p.Addr, n)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.(store.Notifier).Subscribe(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, s, inst("r-1", "q"), inst("r-2", "q"))
	claim(t, s, "q", 1, base)
	p.Kill()
	p = testserver.RestartRedis(t, p)
	defer p.Stop()

	// The subscription comes back and signals that it did.
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-ch:
		case <-time.After(10 * time.Millisecond):
		}
		_, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{inst("r-3", "q")}, Now: base})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Enqueue after the restart still fails after 10s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := s.LookupInstances(t.Context(), &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]store.State{}
	for _, in := range got {
		states[in.ID] = in.State
	}
	if states["r-1"] != store.Processing || states["r-2"] != store.Scheduled || states["r-3"] != store.Scheduled {
		t.Fatalf("after the restart: %v, want r-1 processing, r-2 and r-3 scheduled", states)
	}
	drained := false
	for !drained {
		select {
		case <-ch:
		default:
			drained = true
		}
	}
	enqueue(t, s, inst("r-4", "q"))
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after the restart")
	}
	res := claim(t, s, "q", 10, base)
	if g := ids(res.Instances); !slices.Equal(g, []string{"r-2", "r-3", "r-4"}) {
		t.Fatalf("claim after the restart: %v", g)
	}
}

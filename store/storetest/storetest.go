// Package storetest is the conformance suite every store plugin runs: the
// single place where the behaviour of the store contract is pinned down
// across backends.
//
// A plugin's test calls Run with a Harness that opens handles on a real
// server:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			Open: func(t testing.TB, ns string) store.Store {
//				s, err := myplugin.New(client, myplugin.WithNamespace(ns))
//				if err != nil {
//					t.Fatal(err)
//				}
//				return s
//			},
//		})
//	}
//
// Every sub-test picks its own namespace, so sub-tests run in parallel on one
// server and never need a global wipe. Time always comes from the suite (a
// fixed base time plus offsets, all whole milliseconds), so no test depends
// on the wall clock; where the suite must wait (notifications), it waits on a
// condition with a deadline.
//
// The package imports only the standard library and package store.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// Harness opens store handles for the suite.
type Harness struct {
	// Open returns a handle on the store's data for namespace ns. Handles
	// opened with the same ns share data: they act as several processes on
	// one server. Handles of different namespaces must be fully isolated
	// (a key prefix, a separate database, ...). Open registers whatever
	// cleanup the handle needs with t.Cleanup; it fails t when the store
	// cannot be opened. Required.
	Open func(t testing.TB, ns string) store.Store

	// ExpireEvents makes s forget every event it retains so far, so that
	// cursors taken before expire (store.ErrCursorExpired): prune the
	// history, compact the revisions, overflow an event buffer. It may
	// reach beyond s's namespace (an etcd compaction is server-wide); the
	// suite calls it only while no other events test runs. Required by
	// the events tests.
	ExpireEvents func(t testing.TB, s store.Store)

	// ConcurrentInstances is how many instances the concurrency tests
	// (claim, rescue) push through several handles at once. Defaults to
	// 2000 when zero.
	ConcurrentInstances int

	// NodeClock says the store has no clock of its own: Heartbeat derives
	// its reading from the nodes' clocks (etcdstore), so with one node it
	// reads that node's clock.
	NodeClock bool

	// CancelNotifier says the store implements store.CancelNotifier: the
	// CancelNotifier check then fails when it does not, instead of
	// passing with nothing to check.
	CancelNotifier bool

	// Limits says the store enforces ClaimParams.Limits (it is a
	// store.LimitEnforcer): the limits checks then run, and fail when it
	// does not; without it they check that the store does not claim to.
	Limits bool
	// KeyedLimits says the store enforces per-key concurrency limits
	// (ConcurrencyLimit.PerKey; it is a store.KeyedLimitEnforcer): the
	// keyed limits checks then run; without it they check that the store
	// does not claim to.
	KeyedLimits bool

	// RateLimits says the store enforces ClaimParams.RateLimits (it is a
	// store.RateLimitEnforcer and a store.RateLimitDelayer): the rate
	// limits checks then run; without it they check that the store does
	// not claim to.
	RateLimits bool
	// RateLimitRate is the rate (starts a second) RateLimitsWindow asks
	// of its limit, for a store whose limited claims are too slow to
	// start 200 a second on a loaded machine; 0 means 200.
	RateLimitRate int
}

// Run runs the whole suite against h, each check as a parallel sub-test with
// its own namespace.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("storetest: Harness.Open is nil; set it to a func that opens a store handle for a namespace")
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"EnqueueLookupRoundTrip", testEnqueueRoundTrip},
		{"Metadata", testMetadata},
		{"EnqueueBatch", testEnqueueBatch},
		{"EnqueueRefusedStoresNothing", testEnqueueRefusedStoresNothing},
		{"RecordsAreCopies", testRecordsAreCopies},
		{"ClaimOrder", testClaimOrder},
		{"ClaimOrderDueLate", testClaimOrderDueLate},
		{"ClaimOrderRunAt", testClaimOrderRunAt},
		{"ClaimFutureHighPriorityDoesNotBlock", testClaimFutureDoesNotBlock},
		{"ClaimLimit", testClaimLimit},
		{"ClaimNextRunAt", testClaimNextRunAt},
		{"ClaimQueuesIsolated", testClaimQueuesIsolated},
		{"ClaimAttemptIncrements", testClaimAttemptIncrements},
		{"ClaimConcurrent", testClaimConcurrent},
		{"Renew", testRenew},
		{"FinishOutcomes", testFinishOutcomes},
		{"FinishLateAfterRescue", testFinishLateAfterRescue},
		{"FinishTwice", testFinishTwice},
		{"FinishForeign", testFinishForeign},
		{"FinishRepeated", testFinishRepeated},
		{"FinishCancelRequested", testFinishCancelRequested},
		{"ClaimRepeat", testClaimRepeat},
		{"EnqueueRepeated", testEnqueueRepeated},
		{"Rescue", testRescue},
		{"RescueKeepsPlace", testRescueKeepsPlace},
		{"RescueLimit", testRescueLimit},
		{"RescueConcurrent", testRescueConcurrent},
		{"RescueCancelRequested", testRescueCancelRequested},
		{"Cancel", testCancel},
		{"UniqueKey", testUniqueKey},
		{"UniqueKeyConcurrent", testUniqueKeyConcurrent},
		{"History", testHistory},
		{"LookupInstances", testLookupInstances},
		{"LookupHistory", testLookupHistory},
		{"Logs", testLogs},
		{"Progress", testProgress},
		{"PruneFinishedBefore", testPruneFinishedBefore},
		{"PruneKeepFinished", testPruneKeepFinished},
		{"PruneHistoryAndLogsBefore", testPruneHistoryLogsBefore},
		{"PruneLimit", testPruneLimit},
		{"NamespaceIsolation", testNamespaceIsolation},
		{"CanceledContext", testCanceledContext},
		{"InvalidParams", testInvalidParams},
		{"InvalidParamsEveryCall", testInvalidParamsEveryCall},
		{"Notifier", testNotifier},
		{"CancelNotifier", testCancelNotifier},
		{"DefinitionsCRUD", testDefinitionsCRUD},
		{"DefinitionsConflict", testDefinitionsConflict},
		{"DefinitionsInvalid", testDefinitionsInvalid},
		{"DefinitionsList", testDefinitionsList},
		{"DefinitionsShared", testDefinitionsShared},
		{"DefinitionsExecutor", testDefinitionsExecutor},
		{"Events", testEvents},
		{"Nodes", runNodes},
		{"ClaimKinds", testClaimKinds}, {"ClaimLabels", testClaimLabels}, {"ClaimLanesNextRunAt", testClaimLanesNextRunAt}, {"QueuePause", testQueuePause}, {"ClaimsInvalid", testClaimsInvalid},
		{"Admin", testAdmin},
		{"Shards", testShards}, {"ShardsInvalid", testShardsInvalid}, {"Wake", testWake},
	}
	tests = append(tests, inspectTests...)
	tests = append(tests, workflowTests...)
	tests = append(tests, labelExprTests...)
	tests = append(tests, limitTests...)
	tests = append(tests, keyedLimitTests...)
	tests = append(tests, rateLimitTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
	runTriggers(t, h)
	runDocuments(t, h)
}

// base is the suite's fixed clock origin; every time is base plus an offset
// in whole milliseconds, so stores that keep milliseconds compare equal.
var base = time.Date(2026, time.January, 2, 3, 4, 5, 0, time.UTC)

// at returns base + d.
func at(d time.Duration) time.Time { return base.Add(d) }

// lease is the default lease length the suite claims with.
const lease = 30 * time.Second

// namespace returns a fresh namespace for t: its name, made safe for keys,
// plus random bytes so reruns (-count) never meet old data.
func namespace(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("storetest: random namespace: %v", err)
	}
	name := t.Name()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, name)
	if len(clean) > 32 {
		clean = clean[:32]
	}
	return "st_" + clean + "_" + hex.EncodeToString(b[:])
}

// env is one sub-test's namespace and its first handle.
type env struct {
	t   *testing.T
	h   Harness
	ns  string
	s   store.Store
	ctx context.Context
}

func setup(t *testing.T, h Harness) *env {
	t.Helper()
	ns := namespace(t)
	s := h.Open(t, ns)
	if s == nil {
		t.Fatalf("storetest: Harness.Open(%q) returned nil", ns)
	}
	return &env{t: t, h: h, ns: ns, s: s, ctx: t.Context()}
}

// open returns another handle on e's namespace (another "process").
func (e *env) open() store.Store {
	e.t.Helper()
	s := e.h.Open(e.t, e.ns)
	if s == nil {
		e.t.Fatalf("storetest: Harness.Open(%q) returned nil", e.ns)
	}
	return s
}

// inst returns an instance with every field the caller may set filled in.
func inst(id, queue string) *store.Instance {
	return &store.Instance{
		ID:         id,
		Kind:       "kind-a",
		Queue:      queue,
		Args:       []byte(`[1,"two"]`),
		Priority:   0,
		RunAt:      base,
		MaxRetries: 3,
		Timeout:    5 * time.Second,
		CreatedAt:  base,
	}
}

func (e *env) enqueue(s store.Store, now time.Time, ins ...*store.Instance) []store.EnqueueResult {
	e.t.Helper()
	res, err := s.Enqueue(e.ctx, &store.EnqueueParams{Instances: ins, Node: "node-enq", Now: now})
	if err != nil {
		e.t.Fatalf("Enqueue(%d instances): %v", len(ins), err)
	}
	if len(res) != len(ins) {
		e.t.Fatalf("Enqueue(%d instances) returned %d results", len(ins), len(res))
	}
	for i, r := range res {
		if r.Err != nil {
			e.t.Fatalf("Enqueue: instance %s: %v", ins[i].ID, r.Err)
		}
		if r.ID != ins[i].ID {
			e.t.Fatalf("Enqueue: result %d has ID %q, want %q", i, r.ID, ins[i].ID)
		}
	}
	return res
}

func (e *env) claim(s store.Store, queue, owner string, limit int, now time.Time) *store.ClaimResult {
	e.t.Helper()
	res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: queue, Owner: owner, Limit: limit, Now: now, LeaseUntil: now.Add(lease)})
	if err != nil {
		e.t.Fatalf("Claim(queue %s, limit %d, now %v): %v", queue, limit, now, err)
	}
	if res == nil {
		e.t.Fatalf("Claim(queue %s) returned a nil result", queue)
	}
	if len(res.Instances) > limit {
		e.t.Fatalf("Claim(queue %s, limit %d) returned %d instances", queue, limit, len(res.Instances))
	}
	return res
}

// claimOne claims exactly one instance and checks its ID.
func (e *env) claimOne(s store.Store, queue, owner string, now time.Time, wantID string) *store.Instance {
	e.t.Helper()
	res := e.claim(s, queue, owner, 1, now)
	if len(res.Instances) != 1 {
		e.t.Fatalf("Claim(queue %s, now %v) returned %d instances, want %s", queue, now, len(res.Instances), wantID)
	}
	if got := res.Instances[0].ID; got != wantID {
		e.t.Fatalf("Claim(queue %s, now %v) returned %s, want %s", queue, now, got, wantID)
	}
	return res.Instances[0]
}

// finish finishes outs as owner and checks that each result is coherent:
// an applied outcome (nil Err) reports the state it left the instance in,
// its own State or, for a retry or release, Canceled; a refused one
// reports no state.
func (e *env) finish(s store.Store, owner string, now time.Time, outs ...store.Outcome) []store.FinishResult {
	e.t.Helper()
	res, err := s.Finish(e.ctx, &store.FinishParams{Owner: owner, Now: now, Outcomes: outs})
	if err != nil {
		e.t.Fatalf("Finish(%d outcomes): %v", len(outs), err)
	}
	if len(res) != len(outs) {
		e.t.Fatalf("Finish(%d outcomes) returned %d entries, want one per outcome", len(outs), len(res))
	}
	for i, r := range res {
		o := &outs[i]
		switch {
		case r.Err != nil && r.State != 0:
			e.t.Fatalf("Finish: outcome %d (%s -> %v) failed (%v) but reports state %v, want none", i, o.ID, o.State, r.Err, r.State)
		case r.Err == nil && r.State != o.State && (o.State != store.Scheduled || r.State != store.Canceled):
			e.t.Fatalf("Finish: outcome %d (%s -> %v) applied as state %v, want %v (or canceled for a retry or release)", i, o.ID, o.State, r.State, o.State)
		}
	}
	return res
}

// finishOK finishes and requires every outcome to be applied.
func (e *env) finishOK(s store.Store, owner string, now time.Time, outs ...store.Outcome) []store.FinishResult {
	e.t.Helper()
	res := e.finish(s, owner, now, outs...)
	for i, r := range res {
		if r.Err != nil {
			e.t.Fatalf("Finish: outcome %d (%s -> %v): %v", i, outs[i].ID, outs[i].State, r.Err)
		}
	}
	return res
}

func (e *env) rescue(s store.Store, now time.Time, limit int) []*store.Instance {
	e.t.Helper()
	out, err := s.Rescue(e.ctx, &store.RescueParams{Now: now, Limit: limit, Node: "node-rescue"})
	if err != nil {
		e.t.Fatalf("Rescue(now %v): %v", now, err)
	}
	if len(out) > limit {
		e.t.Fatalf("Rescue(limit %d) returned %d instances", limit, len(out))
	}
	return out
}

func (e *env) instances(s store.Store, q *store.Query) []*store.Instance {
	e.t.Helper()
	out, err := s.LookupInstances(e.ctx, q)
	if err != nil {
		e.t.Fatalf("LookupInstances(%+v): %v", *q, err)
	}
	return out
}

func (e *env) history(s store.Store, q *store.Query) []*store.HistoryRecord {
	e.t.Helper()
	out, err := s.LookupHistory(e.ctx, q)
	if err != nil {
		e.t.Fatalf("LookupHistory(%+v): %v", *q, err)
	}
	return out
}

func (e *env) logs(s store.Store, q *store.Query) []*store.LogRecord {
	e.t.Helper()
	out, err := s.LookupLogs(e.ctx, q)
	if err != nil {
		e.t.Fatalf("LookupLogs(%+v): %v", *q, err)
	}
	return out
}

// get returns the stored instance id, failing when there is not exactly one.
func (e *env) get(s store.Store, id string) *store.Instance {
	e.t.Helper()
	out := e.instances(s, &store.Query{InstanceID: id})
	if len(out) != 1 {
		e.t.Fatalf("LookupInstances(InstanceID %s) returned %d instances, want 1", id, len(out))
	}
	if out[0] == nil {
		e.t.Fatalf("LookupInstances(InstanceID %s) returned a nil instance", id)
	}
	return out[0]
}

// absent fails unless no instance id is stored.
func (e *env) absent(s store.Store, id string) {
	e.t.Helper()
	if out := e.instances(s, &store.Query{InstanceID: id}); len(out) != 0 {
		e.t.Fatalf("LookupInstances(InstanceID %s) returned %d instances, want none", id, len(out))
	}
}

// ids returns the IDs of ins in order.
func ids(ins []*store.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.ID
	}
	return out
}

// checkIDs fails unless got names exactly want, in order.
func checkIDs(t testing.TB, what string, got []*store.Instance, want ...string) {
	t.Helper()
	if g := ids(got); !slicesEqual(g, want) {
		t.Fatalf("%s: got %v, want %v", what, g, want)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// diff reports, field by field, where got differs from want. Both are
// pointers to the same struct type. Times compare with Equal, byte slices
// with bytes.Equal (nil equals empty). Fields named in ignore are skipped.
func diff(want, got any, ignore ...string) []string {
	wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
	if wv.IsNil() || gv.IsNil() {
		if wv.IsNil() != gv.IsNil() {
			return []string{fmt.Sprintf("got %v, want %v", got, want)}
		}
		return nil
	}
	wv, gv = wv.Elem(), gv.Elem()
	var out []string
	timeType := reflect.TypeFor[time.Time]()
	for i := 0; i < wv.NumField(); i++ {
		f := wv.Type().Field(i)
		if containsString(ignore, f.Name) {
			continue
		}
		w, g := wv.Field(i), gv.Field(i)
		equal := false
		switch {
		case f.Type == timeType:
			equal = w.Interface().(time.Time).Equal(g.Interface().(time.Time))
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Uint8:
			equal = bytes.Equal(w.Bytes(), g.Bytes())
		default:
			equal = reflect.DeepEqual(w.Interface(), g.Interface())
		}
		if !equal {
			out = append(out, fmt.Sprintf("%s: got %s, want %s", f.Name, show(g), show(w)))
		}
	}
	return out
}

func show(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case []byte:
		if x == nil {
			return "nil"
		}
		return fmt.Sprintf("%q", x)
	case time.Time:
		if x.IsZero() {
			return "zero time"
		}
		return x.UTC().Format(time.RFC3339Nano)
	case string:
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprint(v.Interface())
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkRecord fails t with a field-by-field diff when got differs from want.
func checkRecord(t testing.TB, what string, want, got any, ignore ...string) {
	t.Helper()
	if d := diff(want, got, ignore...); len(d) > 0 {
		t.Fatalf("%s differs from what was expected:\n\t%s", what, strings.Join(d, "\n\t"))
	}
}

// wantErr fails unless err wraps target.
func wantErr(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

// ownerLease checks that in is held by owner in attempt until until.
func checkLease(t testing.TB, in *store.Instance, owner string, attempt int, until time.Time) {
	t.Helper()
	if in.State != store.Processing || in.LeaseOwner != owner || in.Attempt != attempt || !in.LeaseUntil.Equal(until) {
		t.Fatalf("instance %s: state %v owner %q attempt %d lease until %v; want processing, owner %q, attempt %d, until %v",
			in.ID, in.State, in.LeaseOwner, in.Attempt, in.LeaseUntil, owner, attempt, until)
	}
}

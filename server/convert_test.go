package server

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/schedule"
	"github.com/jobkit/job/store"
)

// allSet fails when a field of msg (recursively) is unset, except those
// named in skip: a conversion fills every field the message has.
func allSet(t *testing.T, msg proto.Message, skip ...string) {
	t.Helper()
	m := msg.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if contains(skip, string(f.Name())) {
			continue
		}
		if !m.Has(f) {
			t.Errorf("%s.%s is not set", m.Descriptor().FullName(), f.Name())
			continue
		}
		if f.Kind() == protoreflect.MessageKind && !f.IsList() && !f.IsMap() {
			if sub := m.Get(f).Message().Interface(); sub.ProtoReflect().Descriptor().FullName().Parent() == "jobkit.v1" {
				allSet(t, sub, skip...)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var t0 = time.Date(2026, 11, 23, 21, 0, 0, 123456789, time.UTC)

// TestRecordRoundTrip: a record with every field set converts to an
// Instance with every field set and back unchanged.
func TestRecordRoundTrip(t *testing.T) {
	rec := &store.Instance{
		ID: "id-1", Kind: "k", Queue: "q", Args: []byte(`[1,"a"]`), Priority: -3, RunAt: t0, State: store.Processing,
		Attempt: 2, MaxRetries: 5, Timeout: time.Minute, UniqueKey: "key", UniqueUntil: t0.Add(time.Hour),
		LeaseOwner: "node-1", LeaseUntil: t0.Add(time.Second), CancelRequested: true, Seq: 99,
		CreatedAt: t0.Add(-time.Hour), UpdatedAt: t0, FinishedAt: t0.Add(time.Minute), Result: []byte(`[3]`),
		Error: "last error", Labels: []string{"gpu", "region=eu"}, Metadata: map[string]string{"traceparent": "00-abc-def-01"},
		Parent: "parent-1", ShardIndex: 2, ShardCount: 4,
		Task: &store.WorkflowTask{Workflow: "wf-1", Name: "resize", Deps: []string{"dep-1", "dep-2"}},
	}
	p := recordToProto(rec)
	// Progress is kept beside the record: fillProgress sets it
	// (TestInstanceProgress).
	allSet(t, p, "progress", "progress_message", "progress_at")
	if p.GetState() != pb.State_STATE_PROCESSING || p.GetTimeout().AsDuration() != time.Minute || !p.GetRunAt().AsTime().Equal(t0) {
		t.Fatalf("converted: %v", p)
	}
	back, err := recordFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rec) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, rec)
	}
	// The engine's prefix of a user's unique key is not shown.
	rec.UniqueKey = "u:mine"
	if got := recordToProto(rec).GetUniqueKey(); got != "mine" {
		t.Fatalf("unique key %q, want mine", got)
	}
}

// TestDefinitionRoundTrip converts a definition with every field set and
// back.
func TestDefinitionRoundTrip(t *testing.T) {
	d := &store.Definition{
		Kind: "k", Queue: "q", Priority: 4, MaxRetries: -1, Timeout: time.Minute,
		Backoff: store.Backoff{Kind: store.BackoffExponential, Base: time.Second, Limit: time.Hour, Jitter: 0.5},
		Unique:  &store.UniquePolicy{By: store.UniqueByArgs, TTL: time.Hour}, Labels: []string{"gpu"},
		Description: "what it does", Version: 3, CreatedAt: t0, UpdatedAt: t0.Add(time.Second),
		Executor:         &store.ExecutorSpec{Type: store.ExecutorWebhook, Config: []byte(`{"secret_ref":"k","url":"https://x.example"}`)},
		ConvertArguments: true,
	}
	p := definitionToProto(d)
	allSet(t, p)
	back, err := definitionFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	want := *d
	want.Version, want.CreatedAt, want.UpdatedAt = 0, time.Time{}, time.Time{} // the store's, not read
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, want)
	}
	for _, bad := range []*pb.Definition{
		nil,
		{Kind: "k", Backoff: &pb.Backoff{Kind: 9}},
		{Kind: "k", Unique: &pb.UniquePolicy{By: pb.UniqueBy_UNIQUE_BY_UNSPECIFIED}},
		{Kind: "k", Timeout: &durationpb.Duration{Seconds: -1}},
	} {
		if _, err := definitionFromProto(bad); err == nil {
			t.Errorf("definitionFromProto(%v): no error", bad)
		}
	}
}

// TestTriggerRoundTrip converts a trigger with every field set and back.
func TestTriggerRoundTrip(t *testing.T) {
	tr := &store.Trigger{
		Name: "nightly", Kind: "k", Args: []byte(`[1]`), Cron: "0 3 * * *", TimeZone: "Europe/Paris", Paused: true,
		Overlap: store.OverlapForbid, Missed: store.MissedCatchUpOnce, CatchUpWithin: time.Hour,
		LastTick: t0, LastInstanceID: "id", Skipped: 2, LastSkipped: t0.Add(-time.Hour), Version: 7,
		CreatedAt: t0.Add(-time.Hour), UpdatedAt: t0, Calendar: "fr", CalendarPolicy: schedule.NextWorkday,
		Workflow: "pipeline", Params: []byte(`{"a":1}`), // not valid beside Kind, but every field travels
	}
	p := triggerToProto(tr, []time.Time{t0.Add(time.Hour)})
	allSet(t, p, "interval") // one of cron and interval
	back, err := triggerFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	want := &store.Trigger{Name: tr.Name, Kind: tr.Kind, Args: tr.Args, Cron: tr.Cron, TimeZone: tr.TimeZone, Paused: true,
		Overlap: tr.Overlap, Missed: tr.Missed, CatchUpWithin: tr.CatchUpWithin, Calendar: "fr", CalendarPolicy: schedule.NextWorkday,
		Workflow: "pipeline", Params: []byte(`{"a":1}`)}
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, want)
	}
	iv := triggerToProto(&store.Trigger{Name: "i", Kind: "k", Interval: time.Minute}, nil)
	if iv.GetInterval().AsDuration() != time.Minute || iv.GetOverlap() != pb.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED {
		t.Fatalf("interval trigger: %v", iv)
	}
	if _, err := triggerFromProto(&pb.Trigger{Name: "x", Overlap: 12}); err == nil {
		t.Error("unknown overlap policy: no error")
	}
}

// TestRecordsToProto converts history, logs, events, nodes and counts with
// every field set.
func TestRecordsToProto(t *testing.T) {
	allSet(t, historyToProto(&store.HistoryRecord{InstanceID: "i", Kind: "k", State: store.Completed, Attempt: 1, Time: t0, Node: "n", Error: "e", Result: []byte("[1]"), Seq: 4}))
	allSet(t, logToProto(&store.LogRecord{InstanceID: "i", Kind: "k", Attempt: 1, Level: store.LevelWarn, Time: t0, Node: "n", Message: "m", Seq: 2}))
	allSet(t, eventToProto(&store.Event{Cursor: "c", InstanceID: "i", Kind: "k", Queue: "q", State: store.Scheduled, Attempt: 1, Time: t0, Node: "n", Error: "e", Seq: 3}))
	allSet(t, nodeToProto(&store.NodeInfo{ID: "n", Host: "h", Labels: []string{"a"}, Kinds: []string{"k"}, Queues: []string{"q"}, Workers: 4, Busy: 1,
		Version: "v", Started: t0, LastSeen: t0, Skew: time.Millisecond, Status: store.NodeDead, GoneAt: t0, ExecutorTypes: []string{"command"}}))
	var states [store.TimedOut + 1]int64
	for i := range states {
		states[i] = int64(i)
	}
	allSet(t, countsToProto(&states))
	if got := levelToProto(store.LevelError); got != pb.LogLevel_LOG_LEVEL_ERROR {
		t.Fatalf("level %v", got)
	}
	for s := store.Created; s <= store.TimedOut; s++ {
		back, err := stateFromProto(stateToProto(s))
		if err != nil || back != s {
			t.Fatalf("state %v round trip: %v %v", s, back, err)
		}
	}
	if _, err := stateFromProto(pb.State_STATE_UNSPECIFIED); err == nil {
		t.Fatal("STATE_UNSPECIFIED accepted")
	}
	if _, err := levelsFromProto([]pb.LogLevel{pb.LogLevel_LOG_LEVEL_UNSPECIFIED}); err == nil {
		t.Fatal("LOG_LEVEL_UNSPECIFIED accepted")
	}
}

// TestParseArgs reads args_json as the engine wants it.
func TestParseArgs(t *testing.T) {
	for in, n := range map[string]int{"": 0, "  ": 0, "[]": 0, `[1, "a", {"b": [2]}]`: 3, " [null] ": 1} {
		got, err := parseArgs(in)
		if err != nil || len(got) != n {
			t.Errorf("parseArgs(%q) = %v, %v; want %d values", in, got, err, n)
		}
	}
	for _, in := range []string{"1", `{"a":1}`, "[1,", `"x"`, "[1] [2]"} {
		if _, err := parseArgs(in); err == nil {
			t.Errorf("parseArgs(%q): no error", in)
		}
	}
}

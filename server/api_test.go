package server

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store/memdbstore"
)

// TestScheduleOptions: every field of ScheduleRequest reaches the stored
// instance, and idempotency keys return the first instance.
func TestScheduleOptions(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, connectJSON, "", "")
		ctx := context.Background()
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		prio, retries := int32(9), int32(0)
		res, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{
			Kind: "add", ArgsJson: "[1, 2]", RunAt: timestamppb.New(at), Jitter: durationpb.New(time.Second),
			UniqueKey: "u", UniqueTtl: durationpb.New(time.Minute), Priority: &prio, MaxRetries: &retries,
			Timeout: durationpb.New(5 * time.Second), Queue: "fast",
		}))
		if err != nil {
			t.Fatal(err)
		}
		in := res.Msg.GetInstance()
		if got := in.GetRunAt().AsTime(); got.Before(at) || got.After(at.Add(time.Second)) {
			t.Errorf("run_at %v, want %v plus up to 1s of jitter", got, at)
		}
		if in.GetPriority() != 9 || in.GetMaxRetries() != 0 || in.GetTimeout().AsDuration() != 5*time.Second || in.GetQueue() != "fast" ||
			in.GetUniqueKey() != "u" || in.GetState() != pb.State_STATE_SCHEDULED {
			t.Errorf("instance %v", in)
		}
		if got := in.GetUniqueUntil().AsTime().Sub(in.GetCreatedAt().AsTime()); got != time.Minute {
			t.Errorf("unique for %v, want 1m", got)
		}
		after, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1, 2]", Delay: durationpb.New(time.Hour)}))
		if err != nil {
			t.Fatal(err)
		}
		if d := after.Msg.GetInstance().GetRunAt().AsTime().Sub(after.Msg.GetInstance().GetCreatedAt().AsTime()); d != time.Hour {
			t.Errorf("delay: run_at - created_at = %v, want 1h", d)
		}
		idem := &pb.ScheduleRequest{Kind: "add", ArgsJson: "[1, 2]", IdempotencyKey: "order-7", Delay: durationpb.New(time.Hour)}
		one, err := c.jobs.Schedule(ctx, connect.NewRequest(idem))
		if err != nil {
			t.Fatal(err)
		}
		two, err := c.jobs.Schedule(ctx, connect.NewRequest(idem))
		if err != nil || two.Msg.GetInstance().GetId() != one.Msg.GetInstance().GetId() {
			t.Fatalf("repeat with an idempotency key: %v, %v", two, err)
		}
		md := map[string]string{"request-id": "r-1", "tenant": "acme"}
		withMD, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,2]", Metadata: md}))
		if err != nil {
			t.Fatal(err)
		}
		done := waitState(t, c, withMD.Msg.GetInstance().GetId(), pb.State_STATE_COMPLETED)
		if !maps.Equal(done.GetMetadata(), md) || !maps.Equal(withMD.Msg.GetInstance().GetMetadata(), md) {
			t.Fatalf("metadata %v, then %v; want %v", withMD.Msg.GetInstance().GetMetadata(), done.GetMetadata(), md)
		}
		_, err = c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,2]", Metadata: map[string]string{"": "x"}}))
		wantCode(t, err, connect.CodeInvalidArgument, "empty key")
		if n := count(t, e.mgrs["default"]); n != 4 {
			t.Fatalf("%d instances, want 4", n)
		}
	})
}

// TestScheduleBatch: each item gets its instance or its error, in order;
// a bad item stores nothing and stops no other.
func TestScheduleBatch(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, protocols[0], "", "")
		res, err := c.jobs.ScheduleBatch(context.Background(), connect.NewRequest(&pb.ScheduleBatchRequest{Items: []*pb.ScheduleRequest{
			{Kind: "add", ArgsJson: "[1, 2]"},
			{Kind: "add", ArgsJson: `["x"]`},
			{Kind: "missing"},
			{Kind: "greet", ArgsJson: `["b"]`},
			nil,
		}}))
		if err != nil {
			t.Fatal(err)
		}
		r := res.Msg.GetResults()
		if len(r) != 5 {
			t.Fatalf("%d results for 5 items", len(r))
		}
		if r[0].GetInstance().GetKind() != "add" || r[3].GetInstance().GetKind() != "greet" || r[0].GetError() != nil {
			t.Fatalf("good items: %v, %v", r[0], r[3])
		}
		if r[1].GetError().GetCode() != "invalid_argument" || r[2].GetError().GetCode() != "not_found" || r[4].GetError().GetCode() != "invalid_argument" {
			t.Fatalf("bad items: %v, %v, %v", r[1], r[2], r[4])
		}
		if r[1].GetInstance() != nil || r[2].GetError().GetMessage() == "" {
			t.Fatalf("bad items: %v, %v", r[1], r[2])
		}
		waitState(t, c, r[3].GetInstance().GetId(), pb.State_STATE_COMPLETED)
		if n := count(t, e.mgrs["default"]); n != 2 {
			t.Fatalf("%d instances stored, want 2", n)
		}
	})
}

// TestListInstancesPagesAndFilters pages through every instance once, and
// filters by kind, state, time and labels (the labels per page, on the
// server).
func TestListInstancesPagesAndFilters(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, protocols[3], "", "")
		ctx := context.Background()
		var ids []string
		for i := range 7 {
			kind, args := "add", "[1,2]"
			if i%3 == 0 {
				kind, args = "tagged", ""
			}
			res, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: kind, ArgsJson: args, Delay: durationpb.New(time.Hour)}))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.Msg.GetInstance().GetId())
		}
		list := func(f *pb.InstanceFilter, size int32) []string {
			var got []string
			token := ""
			for pages := 0; ; pages++ {
				if pages > 20 {
					t.Fatal("paging does not end")
				}
				res, err := c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: f, PageSize: size, PageToken: token}))
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Msg.GetInstances()) > int(size) {
					t.Fatalf("page of %d, size %d", len(res.Msg.GetInstances()), size)
				}
				for _, in := range res.Msg.GetInstances() {
					got = append(got, in.GetId())
				}
				if token = res.Msg.GetNextPageToken(); token == "" {
					return got
				}
			}
		}
		all := list(nil, 2)
		want := slices.Clone(ids)
		slices.Reverse(want) // newest first
		if !slices.Equal(all, want) {
			t.Fatalf("paged %v, want %v", all, want)
		}
		tagged := list(&pb.InstanceFilter{Labels: []string{"gpu"}}, 2)
		if !slices.Equal(tagged, []string{ids[6], ids[3], ids[0]}) {
			t.Fatalf("labels gpu: %v", tagged)
		}
		if got := list(&pb.InstanceFilter{Labels: []string{"gpu", "region=eu"}}, 3); len(got) != 0 {
			t.Fatalf("labels gpu and region=eu: %v", got)
		}
		if got := list(&pb.InstanceFilter{Kind: "add", States: []pb.State{pb.State_STATE_SCHEDULED}}, 100); len(got) != 4 {
			t.Fatalf("kind add: %v", got)
		}
		if got := list(&pb.InstanceFilter{CreatedAfter: timestamppb.New(time.Now().Add(time.Minute))}, 10); len(got) != 0 {
			t.Fatalf("created in the future: %v", got)
		}
		if got := list(&pb.InstanceFilter{Queue: "default", CreatedBefore: timestamppb.New(time.Now().Add(time.Minute))}, 10); len(got) != 7 {
			t.Fatalf("created before now: %v", got)
		}
	})
}

// TestLogsHistoryAndFollow: ListLogs and ListHistory filter and page;
// FollowLogs streams records written so far, then new ones, and ends when
// the instance is final.
func TestLogsHistoryAndFollow(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		ctx := context.Background()
		for _, p := range []protocol{protocols[0], protocols[1], connectJSON} {
			c := e.dial(t, p, "", "")
			res, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "step", ArgsJson: `["` + p.name + `"]`}))
			if err != nil {
				t.Fatal(err)
			}
			id := res.Msg.GetInstance().GetId()
			waitFor(t, "step 1 to be logged", func() bool {
				l, err := c.jobs.ListLogs(ctx, connect.NewRequest(&pb.ListLogsRequest{InstanceId: id}))
				if err != nil {
					t.Fatal(err)
				}
				return len(l.Msg.GetRecords()) == 1
			})
			st, err := c.jobs.FollowLogs(ctx, connect.NewRequest(&pb.FollowLogsRequest{InstanceId: id}))
			if err != nil {
				t.Fatal(err)
			}
			if !st.Receive() {
				t.Fatalf("FollowLogs: %v", st.Err())
			}
			if r := st.Msg().GetRecord(); r.GetMessage() != "step 1" || r.GetLevel() != pb.LogLevel_LOG_LEVEL_INFO || r.GetAttempt() != 1 || r.GetNode() == "" {
				t.Fatalf("first record %v", r)
			}
			close(e.gate.get(p.name))
			if !st.Receive() || st.Msg().GetRecord().GetMessage() != "step 2" {
				t.Fatalf("second record: %v %v", st.Msg(), st.Err())
			}
			if st.Receive() {
				t.Fatalf("a third record: %v", st.Msg())
			}
			if err := st.Err(); err != nil {
				t.Fatalf("FollowLogs ended with %v", err)
			}
			if got := waitState(t, c, id, pb.State_STATE_COMPLETED); got.GetFinishedAt() == nil {
				t.Fatal("not finished")
			}
			h, err := c.jobs.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{InstanceId: id, States: []pb.State{pb.State_STATE_COMPLETED}}))
			if err != nil || len(h.Msg.GetChanges()) != 1 || h.Msg.GetChanges()[0].GetNode() == "" {
				t.Fatalf("history of completion: %v %v", h, err)
			}
		}
		c := e.dial(t, protocols[0], "", "")
		res, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "greet", ArgsJson: `["w"]`}))
		if err != nil {
			t.Fatal(err)
		}
		id := res.Msg.GetInstance().GetId()
		waitState(t, c, id, pb.State_STATE_COMPLETED)
		var warn *pb.ListLogsResponse
		waitFor(t, "the warning to be stored", func() bool {
			l, err := c.jobs.ListLogs(ctx, connect.NewRequest(&pb.ListLogsRequest{InstanceId: id, Levels: []pb.LogLevel{pb.LogLevel_LOG_LEVEL_WARN}}))
			if err != nil {
				t.Fatal(err)
			}
			warn = l.Msg
			return len(l.Msg.GetRecords()) > 0
		})
		if len(warn.GetRecords()) != 1 || warn.GetRecords()[0].GetMessage() != "bye w" {
			t.Fatalf("warnings %v", warn)
		}
		// Pages of one, by kind: both records, in order.
		var msgs []string
		token := ""
		for {
			l, err := c.jobs.ListLogs(ctx, connect.NewRequest(&pb.ListLogsRequest{Kind: "greet", PageSize: 1, PageToken: token}))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range l.Msg.GetRecords() {
				msgs = append(msgs, r.GetMessage())
			}
			if token = l.Msg.GetNextPageToken(); token == "" {
				break
			}
		}
		if !slices.Equal(msgs, []string{"hello w", "bye w"}) {
			t.Fatalf("paged logs %q", msgs)
		}
		// FollowLogs of a finished instance sends what there is and ends.
		st, err := c.jobs.FollowLogs(ctx, connect.NewRequest(&pb.FollowLogsRequest{InstanceId: id, Levels: []pb.LogLevel{pb.LogLevel_LOG_LEVEL_INFO}}))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for st.Receive() {
			got = append(got, st.Msg().GetRecord().GetMessage())
		}
		if st.Err() != nil || !slices.Equal(got, []string{"hello w"}) {
			t.Fatalf("follow of a finished instance: %q %v", got, st.Err())
		}
		st, err = c.jobs.FollowLogs(ctx, connect.NewRequest(&pb.FollowLogsRequest{InstanceId: "01a20a4c-0000-7000-8000-000000000000"}))
		if err == nil {
			for st.Receive() {
			}
			err = st.Err()
		}
		wantCode(t, err, connect.CodeNotFound)
	})
}

// TestWatch streams state changes, filtered, and resumes from a cursor.
func TestWatch(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for _, p := range []protocol{protocols[0], protocols[1], connectJSON} {
			c := e.dial(t, p, "", "")
			st, err := c.jobs.Watch(ctx, connect.NewRequest(&pb.WatchRequest{Kinds: []string{"add"}}))
			if err != nil {
				t.Fatal(err)
			}
			events := make(chan *pb.Event, 100)
			go func() {
				defer close(events)
				for st.Receive() {
					events <- st.Msg().GetEvent()
				}
			}()
			// The feed starts when the server reads the request: schedule
			// until it sees one.
			var first *pb.Event
			waitFor(t, "the first event", func() bool {
				if _, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "greet", ArgsJson: `["not watched"]`})); err != nil {
					t.Fatal(err)
				}
				if _, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,1]"})); err != nil {
					t.Fatal(err)
				}
				select {
				case first = <-events:
					return true
				case <-time.After(50 * time.Millisecond):
					return false
				}
			})
			if first.GetKind() != "add" || first.GetCursor() == "" || first.GetTime() == nil || first.GetInstanceId() == "" {
				t.Fatalf("first event %v", first)
			}
			res, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[2,2]"}))
			if err != nil {
				t.Fatal(err)
			}
			id := res.Msg.GetInstance().GetId()
			var seen []pb.State
			var last *pb.Event
			for ev := range events {
				if ev.GetKind() != "add" {
					t.Fatalf("event of kind %q passed the filter", ev.GetKind())
				}
				if ev.GetInstanceId() == id {
					seen = append(seen, ev.GetState())
					last = ev
				}
				if slices.Contains(seen, pb.State_STATE_COMPLETED) {
					break
				}
			}
			if !slices.Equal(seen, []pb.State{pb.State_STATE_CREATED, pb.State_STATE_SCHEDULED, pb.State_STATE_PROCESSING, pb.State_STATE_COMPLETED}) {
				t.Fatalf("states of %s: %v", id, seen)
			}
			// Resume from the cursor of the first event of the instance:
			// the rest again, for that instance only.
			rs, err := c.jobs.Watch(ctx, connect.NewRequest(&pb.WatchRequest{Cursor: first.GetCursor(), InstanceId: id}))
			if err != nil {
				t.Fatal(err)
			}
			var again []pb.State
			for len(again) < len(seen) && rs.Receive() {
				again = append(again, rs.Msg().GetEvent().GetState())
			}
			if !slices.Equal(again, seen) || last.GetSeq() == 0 {
				t.Fatalf("resumed: %v (%v), want %v", again, rs.Err(), seen)
			}
		}
	})
}

// TestWatchExpiredCursor: a cursor older than the store keeps is
// InvalidArgument naming the fix.
func TestWatchExpiredCursor(t *testing.T) {
	st, err := memdbstore.New(memdbstore.WithEventBuffer(4))
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{}
	m := newManager(t, st, g)
	srv, err := New(Config{Namespaces: map[string]*job.Manager{"default": m}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cursor, err := m.GetEventCursor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := m.ScheduleJob(ctx, "add", job.WithArguments(1, 2), job.WithScheduleAfter(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{srv: srv}
	hs := serve(t, srv)
	e.url = hs
	ws, err := e.dial(t, protocols[0], "", "").jobs.Watch(ctx, connect.NewRequest(&pb.WatchRequest{Cursor: cursor}))
	if err == nil {
		for ws.Receive() {
		}
		err = ws.Err()
	}
	wantCode(t, err, connect.CodeInvalidArgument, "watch again without a cursor")
}

// TestDefinitionsOverTheAPI creates, reads, lists, updates and deletes
// definitions, and schedules a kind known only by its definition.
func TestDefinitionsOverTheAPI(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, connectJSON, "", "")
		ctx := context.Background()
		def := &pb.Definition{Kind: "remote", Queue: "elsewhere", Priority: 2, MaxRetries: 1, Timeout: durationpb.New(time.Minute),
			Backoff:     &pb.Backoff{Kind: pb.BackoffKind_BACKOFF_KIND_CONSTANT, Base: durationpb.New(time.Second)},
			Unique:      &pb.UniquePolicy{By: pb.UniqueBy_UNIQUE_BY_ARGS, Ttl: durationpb.New(time.Hour)},
			Description: "runs on another node"}
		cr, err := c.defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: def}))
		if err != nil {
			t.Fatal(err)
		}
		if cr.Msg.GetDefinition().GetVersion() != 1 || cr.Msg.GetDefinition().GetCreatedAt() == nil {
			t.Fatalf("created %v", cr.Msg.GetDefinition())
		}
		_, err = c.defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: def}))
		wantCode(t, err, connect.CodeAlreadyExists, "UpdateDefinition")
		_, err = c.defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: &pb.Definition{Kind: "bad", MaxRetries: -7}}))
		wantCode(t, err, connect.CodeInvalidArgument)

		// A kind with only a definition: scheduled with its policy, any
		// JSON arguments, and unique by them.
		s, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "remote", ArgsJson: `[{"to": "x"}, 3]`}))
		if err != nil {
			t.Fatal(err)
		}
		if in := s.Msg.GetInstance(); in.GetQueue() != "elsewhere" || in.GetPriority() != 2 || in.GetArgsJson() != `[{"to":"x"},3]` {
			t.Fatalf("scheduled by definition: %v", in)
		}
		_, err = c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "remote", ArgsJson: `[{"to": "x"}, 3]`}))
		wantCode(t, err, connect.CodeAlreadyExists)

		def.Priority = 5
		_, err = c.defs.UpdateDefinition(ctx, connect.NewRequest(&pb.UpdateDefinitionRequest{Definition: def, IfVersion: 7}))
		wantCode(t, err, connect.CodeFailedPrecondition, "version")
		up, err := c.defs.UpdateDefinition(ctx, connect.NewRequest(&pb.UpdateDefinitionRequest{Definition: def, IfVersion: 1}))
		if err != nil || up.Msg.GetDefinition().GetVersion() != 2 || up.Msg.GetDefinition().GetPriority() != 5 {
			t.Fatalf("update: %v %v", up, err)
		}
		up, err = c.defs.UpdateDefinition(ctx, connect.NewRequest(&pb.UpdateDefinitionRequest{Definition: def}))
		if err != nil || up.Msg.GetDefinition().GetVersion() != 3 {
			t.Fatalf("update at any version: %v %v", up, err)
		}
		_, err = c.defs.UpdateDefinition(ctx, connect.NewRequest(&pb.UpdateDefinitionRequest{Definition: &pb.Definition{Kind: "ghost", Queue: "q"}}))
		wantCode(t, err, connect.CodeNotFound, "CreateDefinition")
		for _, k := range []string{"a1", "a2", "a3"} {
			if _, err := c.defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: &pb.Definition{Kind: k}})); err != nil {
				t.Fatal(err)
			}
		}
		var kinds []string
		token := ""
		for {
			l, err := c.defs.ListDefinitions(ctx, connect.NewRequest(&pb.ListDefinitionsRequest{PageSize: 2, PageToken: token}))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range l.Msg.GetDefinitions() {
				kinds = append(kinds, d.GetKind())
			}
			if token = l.Msg.GetNextPageToken(); token == "" {
				break
			}
		}
		if !slices.Equal(kinds, []string{"a1", "a2", "a3", "remote"}) {
			t.Fatalf("listed %v", kinds)
		}
		g, err := c.defs.GetDefinition(ctx, connect.NewRequest(&pb.GetDefinitionRequest{Kind: "a1"}))
		if err != nil || g.Msg.GetDefinition().GetQueue() != "default" {
			t.Fatalf("get: %v %v", g, err)
		}
		_, err = c.defs.DeleteDefinition(ctx, connect.NewRequest(&pb.DeleteDefinitionRequest{Kind: "remote", IfVersion: 1}))
		wantCode(t, err, connect.CodeFailedPrecondition)
		if _, err := c.defs.DeleteDefinition(ctx, connect.NewRequest(&pb.DeleteDefinitionRequest{Kind: "remote"})); err != nil {
			t.Fatal(err)
		}
		_, err = c.defs.GetDefinition(ctx, connect.NewRequest(&pb.GetDefinitionRequest{Kind: "remote"}))
		wantCode(t, err, connect.CodeNotFound)
	})
}

// TestTriggersOverTheAPI creates, reads, pauses, resumes, runs, updates
// and deletes triggers.
func TestTriggersOverTheAPI(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, protocols[0], "", "")
		ctx := context.Background()
		tr := &pb.Trigger{Name: "nightly", Kind: "add", ArgsJson: "[20, 22]", Cron: "0 3 * * *", TimeZone: "Europe/Paris",
			Overlap: pb.OverlapPolicy_OVERLAP_POLICY_FORBID, Missed: pb.MissedTickPolicy_MISSED_TICK_POLICY_CATCH_UP_ONCE, CatchUpWithin: durationpb.New(time.Hour)}
		cr, err := c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: tr}))
		if err != nil {
			t.Fatal(err)
		}
		got := cr.Msg.GetTrigger()
		if got.GetVersion() == 0 || len(got.GetNextFireTimes()) != defaultNextFireTimes || got.GetOverlap() != tr.GetOverlap() || got.GetCatchUpWithin().AsDuration() != time.Hour {
			t.Fatalf("created %v", got)
		}
		paris, _ := time.LoadLocation("Europe/Paris")
		if nt := got.GetNextFireTimes()[0].AsTime().In(paris); nt.Hour() != 3 || nt.Minute() != 0 {
			t.Fatalf("next fire time %v, want 03:00 in Paris", nt)
		}
		_, err = c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: tr}))
		wantCode(t, err, connect.CodeAlreadyExists, "UpdateTrigger")
		g, err := c.trigs.GetTrigger(ctx, connect.NewRequest(&pb.GetTriggerRequest{Name: "nightly", NextFireTimes: 12}))
		if err != nil || len(g.Msg.GetTrigger().GetNextFireTimes()) != 12 {
			t.Fatalf("get with 12 times: %v %v", g, err)
		}
		p, err := c.trigs.PauseTrigger(ctx, connect.NewRequest(&pb.PauseTriggerRequest{Name: "nightly"}))
		if err != nil || !p.Msg.GetTrigger().GetPaused() || len(p.Msg.GetTrigger().GetNextFireTimes()) != 0 {
			t.Fatalf("paused: %v %v", p, err)
		}
		run, err := c.trigs.RunTrigger(ctx, connect.NewRequest(&pb.RunTriggerRequest{Name: "nightly"}))
		if err != nil {
			t.Fatal(err)
		}
		if done := waitState(t, c, run.Msg.GetInstance().GetId(), pb.State_STATE_COMPLETED); done.GetResultJson() != "[42]" {
			t.Fatalf("run now: %v", done)
		}
		r, err := c.trigs.ResumeTrigger(ctx, connect.NewRequest(&pb.ResumeTriggerRequest{Name: "nightly"}))
		if err != nil || r.Msg.GetTrigger().GetPaused() {
			t.Fatalf("resumed: %v %v", r, err)
		}
		tr.Cron, tr.TimeZone, tr.Interval = "", "", durationpb.New(time.Hour)
		_, err = c.trigs.UpdateTrigger(ctx, connect.NewRequest(&pb.UpdateTriggerRequest{Trigger: tr, IfVersion: 1}))
		wantCode(t, err, connect.CodeFailedPrecondition)
		up, err := c.trigs.UpdateTrigger(ctx, connect.NewRequest(&pb.UpdateTriggerRequest{Trigger: tr, IfVersion: r.Msg.GetTrigger().GetVersion()}))
		if err != nil || up.Msg.GetTrigger().GetInterval().AsDuration() != time.Hour || up.Msg.GetTrigger().GetCron() != "" {
			t.Fatalf("update: %v %v", up, err)
		}
		_, err = c.trigs.UpdateTrigger(ctx, connect.NewRequest(&pb.UpdateTriggerRequest{Trigger: &pb.Trigger{Name: "ghost", Kind: "add", Interval: durationpb.New(time.Hour)}}))
		wantCode(t, err, connect.CodeNotFound, "CreateTrigger")
		if _, err := c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{Name: "every-minute", Kind: "add", ArgsJson: "[1,1]", Cron: "* * * * *"}})); err != nil {
			t.Fatal(err)
		}
		l, err := c.trigs.ListTriggers(ctx, connect.NewRequest(&pb.ListTriggersRequest{PageSize: 1}))
		if err != nil || len(l.Msg.GetTriggers()) != 1 || l.Msg.GetTriggers()[0].GetName() != "every-minute" || l.Msg.GetNextPageToken() == "" {
			t.Fatalf("first page: %v %v", l, err)
		}
		l, err = c.trigs.ListTriggers(ctx, connect.NewRequest(&pb.ListTriggersRequest{PageSize: 1, PageToken: l.Msg.GetNextPageToken()}))
		if err != nil || len(l.Msg.GetTriggers()) != 1 || l.Msg.GetTriggers()[0].GetName() != "nightly" {
			t.Fatalf("second page: %v %v", l, err)
		}
		if _, err := c.trigs.DeleteTrigger(ctx, connect.NewRequest(&pb.DeleteTriggerRequest{Name: "nightly"})); err != nil {
			t.Fatal(err)
		}
		_, err = c.trigs.DeleteTrigger(ctx, connect.NewRequest(&pb.DeleteTriggerRequest{Name: "nightly"}))
		wantCode(t, err, connect.CodeNotFound)
	})
}

// TestQueuesKindsNodes: queues with counts, lag and pause; kinds; nodes.
func TestQueuesKindsNodes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, protocols[4], "", "") // reads over GET
		ctx := context.Background()
		pq, err := c.queue.PauseQueue(ctx, connect.NewRequest(&pb.PauseQueueRequest{Name: "slow"}))
		if err != nil || !pq.Msg.GetQueue().GetPaused() || pq.Msg.GetQueue().GetCounts() == nil {
			t.Fatalf("pause: %v %v", pq, err)
		}
		for range 3 {
			if _, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,1]", Queue: "slow"})); err != nil {
				t.Fatal(err)
			}
		}
		done, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,1]"}))
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, c, done.Msg.GetInstance().GetId(), pb.State_STATE_COMPLETED)
		var slow, def *pb.Queue
		waitFor(t, "lag on the paused queue", func() bool {
			l, err := c.queue.ListQueues(ctx, connect.NewRequest(&pb.ListQueuesRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range l.Msg.GetQueues() {
				switch q.GetName() {
				case "slow":
					slow = q
				case "default":
					def = q
				}
			}
			return slow != nil && slow.GetLag().AsDuration() > 0
		})
		if !slow.GetPaused() || slow.GetCounts().GetScheduled() != 3 || slow.GetOldestReadyAt() == nil {
			t.Fatalf("slow queue %v", slow)
		}
		if def == nil || def.GetPaused() || def.GetCounts().GetCompleted() != 1 || def.GetLag().AsDuration() != 0 || def.GetOldestReadyAt() != nil {
			t.Fatalf("default queue %v", def)
		}
		k, err := c.queue.ListKinds(ctx, connect.NewRequest(&pb.ListKindsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]*pb.Kind{}
		for _, x := range k.Msg.GetKinds() {
			kinds[x.GetName()] = x
		}
		if add := kinds["add"]; add == nil || add.GetCounts().GetScheduled() != 3 || add.GetCounts().GetCompleted() != 1 || add.GetLag().AsDuration() <= 0 {
			t.Fatalf("kinds: %v", k)
		}
		// Registered on the live node, never scheduled: listed with zero
		// counts, as go-job's ListRegisteredJobs lists them.
		for _, name := range e.mgrs["default"].RegisteredKinds() {
			if x := kinds[name]; x == nil || (name != "add" && (x.GetCounts().GetScheduled() != 0 || x.GetCounts().GetCompleted() != 0)) {
				t.Errorf("registered kind %q: %v; want it listed (zero counts unless scheduled)", name, x)
			}
		}
		if len(kinds) != len(e.mgrs["default"].RegisteredKinds()) {
			t.Errorf("%d kinds listed, want the %d registered: %v", len(kinds), len(e.mgrs["default"].RegisteredKinds()), k)
		}
		rq, err := c.queue.ResumeQueue(ctx, connect.NewRequest(&pb.ResumeQueueRequest{Name: "slow"}))
		if err != nil || rq.Msg.GetQueue().GetPaused() {
			t.Fatalf("resume: %v %v", rq, err)
		}
		waitFor(t, "the slow queue to drain", func() bool {
			l, err := c.queue.ListQueues(ctx, connect.NewRequest(&pb.ListQueuesRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range l.Msg.GetQueues() {
				if q.GetName() == "slow" {
					return q.GetCounts().GetCompleted() == 3
				}
			}
			return false
		})
		n, err := c.nodes.ListNodes(ctx, connect.NewRequest(&pb.ListNodesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		var node *pb.Node
		for _, x := range n.Msg.GetNodes() {
			if x.GetId() == e.mgrs["default"].NodeID() {
				node = x
			}
		}
		if node == nil || node.GetStatus() != pb.NodeStatus_NODE_STATUS_LIVE || node.GetWorkers() != 4 || !slices.Contains(node.GetKinds(), "add") ||
			node.GetStartedAt() == nil || node.GetLastSeen() == nil || node.GetHost() == "" || node.GetVersion() == "" {
			t.Fatalf("node %v in %v", node, n.Msg.GetNodes())
		}
		_, err = c.queue.PauseQueue(ctx, connect.NewRequest(&pb.PauseQueueRequest{}))
		wantCode(t, err, connect.CodeInvalidArgument, "name is required")
	})
}

// TestBulkOperations cancels, retries and deletes by filter.
func TestBulkOperations(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, connectJSON, "", "")
		ctx := context.Background()
		for range 3 {
			if _, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "fail"})); err != nil {
				t.Fatal(err)
			}
			if _, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,1]", Delay: durationpb.New(time.Hour)})); err != nil {
				t.Fatal(err)
			}
		}
		failed := &pb.InstanceFilter{Kind: "fail", States: []pb.State{pb.State_STATE_TERMINATED}}
		waitFor(t, "three failures", func() bool {
			l, err := c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: failed}))
			if err != nil {
				t.Fatal(err)
			}
			return len(l.Msg.GetInstances()) == 3
		})
		can, err := c.jobs.CancelInstances(ctx, connect.NewRequest(&pb.CancelInstancesRequest{Filter: &pb.InstanceFilter{Kind: "add"}}))
		if err != nil || can.Msg.GetResult().GetMatched() != 3 || can.Msg.GetResult().GetApplied() != 3 {
			t.Fatalf("cancel: %v %v", can, err)
		}
		re, err := c.jobs.RetryInstances(ctx, connect.NewRequest(&pb.RetryInstancesRequest{Filter: failed, ResetAttempts: true, RunAt: timestamppb.New(time.Now().Add(time.Hour))}))
		if err != nil || re.Msg.GetResult().GetApplied() != 3 {
			t.Fatalf("retry: %v %v", re, err)
		}
		l, err := c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: &pb.InstanceFilter{Kind: "fail"}}))
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range l.Msg.GetInstances() {
			if in.GetState() != pb.State_STATE_SCHEDULED || in.GetAttempt() != 0 || in.GetRunAt().AsTime().Before(time.Now().Add(50*time.Minute)) {
				t.Fatalf("retried instance %v", in)
			}
		}
		one := l.Msg.GetInstances()[0].GetId()
		_, err = c.jobs.RetryInstance(ctx, connect.NewRequest(&pb.RetryInstanceRequest{Id: one}))
		wantCode(t, err, connect.CodeFailedPrecondition)
		if _, err := c.jobs.DeleteInstance(ctx, connect.NewRequest(&pb.DeleteInstanceRequest{Id: one})); err != nil {
			t.Fatal(err)
		}
		_, err = c.jobs.DeleteInstance(ctx, connect.NewRequest(&pb.DeleteInstanceRequest{Id: one}))
		wantCode(t, err, connect.CodeNotFound)
		del, err := c.jobs.DeleteInstances(ctx, connect.NewRequest(&pb.DeleteInstancesRequest{All: true}))
		if err != nil || del.Msg.GetResult().GetApplied() != 5 {
			t.Fatalf("delete all: %v %v", del, err)
		}
		if n := count(t, e.mgrs["default"]); n != 0 {
			t.Fatalf("%d left", n)
		}
	})
}

// TestDrainEndsStreams: Drain ends open Watch and FollowLogs streams with
// Unavailable, so that an http.Server can shut down, and unary calls go
// on.
func TestDrainEndsStreams(t *testing.T) {
	e := newEnv(t, backends[0], Config{})
	ctx := context.Background()
	c := e.dial(t, protocols[0], "", "")
	res, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "step", ArgsJson: `["drain"]`}))
	if err != nil {
		t.Fatal(err)
	}
	follow, err := c.jobs.FollowLogs(ctx, connect.NewRequest(&pb.FollowLogsRequest{InstanceId: res.Msg.GetInstance().GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	if !follow.Receive() {
		t.Fatalf("FollowLogs: %v", follow.Err())
	}
	watch, err := c.jobs.Watch(ctx, connect.NewRequest(&pb.WatchRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 2)
	go func() {
		for watch.Receive() {
		}
		ended <- watch.Err()
	}()
	go func() {
		for follow.Receive() {
		}
		ended <- follow.Err()
	}()
	e.srv.Drain()
	e.srv.Drain() // again: nothing
	for range 2 {
		select {
		case err := <-ended:
			wantCode(t, err, connect.CodeUnavailable, "shutting down")
		case <-time.After(15 * time.Second):
			t.Fatal("a stream did not end on Drain")
		}
	}
	if _, err := c.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{Id: res.Msg.GetInstance().GetId()})); err != nil {
		t.Fatalf("a unary call after Drain: %v", err)
	}
	close(e.gate.get("drain"))
}

package main

// The Go client's tests against a real server live here, next to the
// server harness jobctl's tests use (the api module cannot import the
// server module).

import (
	"errors"
	"strings"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestClientEveryProtocol schedules, waits for the run and reads the
// instance, history and logs over Connect (binary and JSON), gRPC (h2c)
// and gRPC-Web.
func TestClientEveryProtocol(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	for _, tc := range []struct {
		name string
		opts []client.Option
	}{
		{"connect", nil},
		{"connect-json", []client.Option{client.WithJSON()}},
		{"grpc", []client.Option{client.WithProtocol(client.ProtocolGRPC)}},
		{"grpcweb", []client.Option{client.WithProtocol(client.ProtocolGRPCWeb)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(s.url, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			ji, err := c.ScheduleJob(ctx, "sum", client.WithArguments(20, 22), client.WithMaxRetries(1), client.WithPriority(job.HighPriority))
			if err != nil {
				t.Fatal(err)
			}
			if ji.State() != job.Scheduled && ji.State() != job.Processing && ji.State() != job.Completed {
				t.Fatalf("scheduled instance in state %s", ji.State())
			}
			var done *client.Instance
			waitFor(t, "completion", func() bool {
				done, err = c.GetInstance(ctx, ji.ID())
				if err != nil {
					t.Fatal(err)
				}
				return done.State() == job.Completed
			})
			var sum int
			if err := done.ResultsInto(&sum); err != nil || sum != 42 {
				t.Fatalf("result %d, %v", sum, err)
			}
			var a, b int
			if err := done.ArgumentsInto(&a, &b); err != nil || a != 20 || b != 22 || done.MaxRetries() != 1 || done.Priority() != job.HighPriority {
				t.Fatalf("instance %v: %v", done.Proto(), err)
			}
			h, err := c.ListHistory(ctx, client.NewQuery(client.WithQueryInstanceID(ji.ID()), client.WithQueryState(job.Completed)))
			if err != nil || len(h.Items) != 1 || h.Items[0].GetResultJson() != "[42]" {
				t.Fatalf("history: %v %v", h, err)
			}
			// FollowLogs of a finished instance yields what it logged and ends.
			var msgs []string
			for rec, err := range c.FollowLogs(ctx, ji.ID(), nil) {
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, rec.GetMessage())
			}
			if strings.Join(msgs, "|") != "adding 20 and 22" {
				t.Fatalf("followed logs %q", msgs)
			}
		})
	}
}

// TestClientErrorsMatchSentinels: the codes the server answers come back
// as *client.Error whose code CodeOf reads and which errors.Is matches
// against package job's sentinels.
func TestClientErrorsMatchSentinels(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	_, err = c.GetInstance(ctx, "0194c6a0-0000-7000-8000-000000000000")
	var ce *client.Error
	if !errors.Is(err, job.ErrNotFound) || client.CodeOf(err) != client.CodeNotFound || !errors.As(err, &ce) || ce.Message() == "" {
		t.Fatalf("lookup of a missing instance: %v", err)
	}
	if _, err := c.ScheduleJob(ctx, "sum", client.WithArguments(1, 2), client.WithUniqueKey("k", time.Hour), client.WithScheduleAfter(time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, err = c.ScheduleJob(ctx, "sum", client.WithArguments(1, 2), client.WithUniqueKey("k", time.Hour))
	if !errors.Is(err, job.ErrDuplicate) || client.CodeOf(err) != client.CodeAlreadyExists {
		t.Fatalf("held unique key: %v", err)
	}
	_, err = c.ScheduleJob(ctx, "sum", client.WithArguments("x"))
	if client.CodeOf(err) != client.CodeInvalidArgument || errors.Is(err, job.ErrNotFound) {
		t.Fatalf("unfit arguments: %v", err)
	}
	// An idempotency key answers the first instance again, with no error.
	a, err := c.ScheduleJob(ctx, "sum", client.WithArguments(1, 2), client.WithIdempotencyKey("order-1"), client.WithScheduleAfter(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.ScheduleJob(ctx, "sum", client.WithArguments(1, 2), client.WithIdempotencyKey("order-1"), client.WithScheduleAfter(time.Hour))
	if err != nil || a.ID() != b.ID() {
		t.Fatalf("idempotent repeat: %v %v %v", a, b, err)
	}
	if _, err := c.Admin().CreateDefinition(ctx, &jobkitv1.Definition{Kind: "report", Queue: "reports"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin().CreateDefinition(ctx, &jobkitv1.Definition{Kind: "report", Queue: "reports"}); !errors.Is(err, job.ErrDuplicate) {
		t.Fatalf("second definition: %v", err)
	}
	if err := c.Admin().DeleteTrigger(ctx, "nosuch"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("delete a missing trigger: %v", err)
	}

	// The token and namespace options reach the server.
	sa := newTestServer(t, true)
	for _, tc := range []struct {
		opts []client.Option
		code client.Code
	}{
		{nil, client.CodeUnauthenticated},
		{[]client.Option{client.WithToken("wrong")}, client.CodeUnauthenticated},
		{[]client.Option{client.WithToken(viewerSecret), client.WithNamespace("other")}, client.CodePermissionDenied},
		{[]client.Option{client.WithToken(adminSecret), client.WithNamespace("nosuch")}, client.CodeNotFound},
		{[]client.Option{client.WithToken(viewerSecret)}, 0},
	} {
		c, err := client.New(sa.url, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Admin().ListQueues(ctx); client.CodeOf(err) != tc.code {
			t.Errorf("list queues with %d options: %v, want code %v", len(tc.opts), err, tc.code)
		}
	}
}

// TestClientBatchAndBulk: one batch item's error is its own; bulk
// operations report what they did.
func TestClientBatchAndBulk(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	res, err := c.ScheduleJobs(ctx,
		client.BatchItem{Kind: "sum", Options: []client.ScheduleOption{client.WithArguments(1, 2), client.WithScheduleAfter(time.Hour)}},
		client.BatchItem{Kind: "nosuchkind"},
		client.BatchItem{Kind: "sum", Options: []client.ScheduleOption{client.WithArguments(3, 4), client.WithScheduleAfter(time.Hour), client.WithQueue("q2")}},
	)
	if err != nil || len(res) != 3 {
		t.Fatalf("batch: %v %v", res, err)
	}
	if res[0].Err != nil || res[2].Err != nil || res[2].Instance.Queue() != "q2" || !errors.Is(res[1].Err, job.ErrNotFound) || res[1].Instance != nil {
		t.Fatalf("batch results: %+v", res)
	}
	var ids []string
	for in, err := range c.AllInstances(ctx, client.NewQuery(client.WithQueryLimit(1))) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID())
	}
	if len(ids) != 2 {
		t.Fatalf("all instances: %v", ids)
	}
	if _, err := c.Admin().CancelInstances(ctx, client.NewQuery()); client.CodeOf(err) != client.CodeInvalidArgument {
		t.Fatalf("bulk cancel with an empty query: %v", err)
	}
	r, err := c.Admin().CancelInstances(ctx, client.NewQuery(client.WithQueryQueue("q2")))
	if err != nil || r.Matched != 1 || r.Applied != 1 {
		t.Fatalf("bulk cancel q2: %+v %v", r, err)
	}
	r, err = c.Admin().DeleteInstances(ctx, client.NewQuery(), client.WithAllInstances())
	if err != nil || r.Applied != 2 {
		t.Fatalf("bulk delete all: %+v %v", r, err)
	}
}

// TestClientWatchResumes reads events with Watch, then resumes from the
// first one's cursor and gets the second one next.
func TestClientWatchResumes(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := contextWithCancel(t)
	events := make(chan *jobkitv1.Event, 100)
	go func() {
		defer close(events)
		for ev, err := range c.Watch(wctx, client.WithEventKinds("sum")) {
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	// The feed starts when the server has it open; schedule until events
	// come (each instance makes four: created, scheduled, processing,
	// completed).
	var got []*jobkitv1.Event
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(got) < 3 {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("watch ended early")
			}
			if ev.GetKind() != "sum" || ev.GetCursor() == "" || ev.GetInstanceId() == "" {
				t.Fatalf("event %v", ev)
			}
			got = append(got, ev)
		case <-tick.C:
			if len(got) == 0 {
				if _, err := c.ScheduleJob(t.Context(), "sum", client.WithArguments(1, 1)); err != nil {
					t.Fatal(err)
				}
			}
		case <-deadline:
			t.Fatalf("watch: %d events in 10 s", len(got))
		}
	}
	stop()
	for ev, err := range c.Watch(t.Context(), client.WithEventCursor(got[0].GetCursor()), client.WithEventKinds("sum")) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetInstanceId() != got[1].GetInstanceId() || ev.GetState() != got[1].GetState() || ev.GetSeq() != got[1].GetSeq() {
			t.Fatalf("resumed with %v, want %v", ev, got[1])
		}
		break
	}
	for _, err := range c.Watch(t.Context(), client.WithEventCursor("not-a-cursor")) {
		if client.CodeOf(err) != client.CodeInvalidArgument {
			t.Fatalf("bad cursor: %v", err)
		}
		break
	}
}

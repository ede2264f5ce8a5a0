package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// TestToConnectTable: each sentinel, wrapped as the engine wraps it, gets
// its code and keeps its message.
func TestToConnectTable(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("job: op x: %w", err) }
	for _, c := range []struct {
		err  error
		code connect.Code
	}{
		{wrap(context.Canceled), connect.CodeCanceled},
		{wrap(context.DeadlineExceeded), connect.CodeDeadlineExceeded},
		{wrap(job.ErrUnknownKind), connect.CodeNotFound},
		{wrap(store.ErrNotFound), connect.CodeNotFound},
		{wrap(store.ErrInvalid), connect.CodeInvalidArgument},
		{wrap(job.ErrInvalidArguments), connect.CodeInvalidArgument},
		{wrap(job.ErrInvalidOption), connect.CodeInvalidArgument},
		{wrap(job.ErrInvalidJob), connect.CodeInvalidArgument},
		{fmt.Errorf("%w: %w", job.ErrInvalidOption, store.ErrInvalid), connect.CodeInvalidArgument},
		{wrap(store.ErrCursorExpired), connect.CodeInvalidArgument},
		{wrap(store.ErrDuplicate), connect.CodeAlreadyExists},
		{wrap(job.ErrDuplicateKind), connect.CodeAlreadyExists},
		{wrap(store.ErrConflict), connect.CodeFailedPrecondition},
		{wrap(store.ErrFinished), connect.CodeFailedPrecondition},
		{wrap(store.ErrNotFinished), connect.CodeFailedPrecondition},
		{wrap(store.ErrTooLarge), connect.CodeResourceExhausted},
		{wrap(store.ErrFull), connect.CodeResourceExhausted},
		{wrap(store.ErrCorrupt), connect.CodeDataLoss},
		{wrap(store.ErrLeaseLost), connect.CodeAborted},
		{wrap(job.ErrShutdown), connect.CodeUnavailable},
		{wrap(job.ErrNotRunning), connect.CodeUnavailable},
		{wrap(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), connect.CodeUnavailable},
		{errors.New("something else"), connect.CodeInternal},
		{connect.NewError(connect.CodeUnimplemented, errors.New("as is")), connect.CodeUnimplemented},
	} {
		got := toConnect(c.err)
		if connect.CodeOf(got) != c.code {
			t.Errorf("%v: code %v, want %v", c.err, connect.CodeOf(got), c.code)
		}
		var ce *connect.Error
		if !errors.As(got, &ce) || !strings.Contains(ce.Message(), strings.TrimPrefix(c.err.Error(), "unimplemented: ")) {
			t.Errorf("%v: message %q lost the engine's", c.err, got)
		}
	}
	if toConnect(nil) != nil {
		t.Error("toConnect(nil) is not nil")
	}
	// Every rule of the table is reached by its own sentinel.
	for _, r := range codeRules {
		if got := connect.CodeOf(toConnect(wrap(r.sentinel))); got != r.code {
			t.Errorf("%v: %v, want %v (shadowed by an earlier rule)", r.sentinel, got, r.code)
		}
	}
}

// TestBadInputOverTheAPI: every kind of bad input gets its code and a
// message that names the fix, and stores nothing it should not.
func TestBadInputOverTheAPI(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		ctx := context.Background()
		c := e.dial(t, protocols[0], "", "")
		m := e.mgrs["default"]

		// Unique keys: the second is AlreadyExists.
		sched := &pb.ScheduleRequest{Kind: "block", UniqueKey: "k1", UniqueTtl: durationpb.New(time.Hour)}
		first, err := c.jobs.Schedule(ctx, connect.NewRequest(sched))
		if err != nil {
			t.Fatal(err)
		}
		if first.Msg.GetInstance().GetUniqueKey() != "k1" || first.Msg.GetInstance().GetUniqueUntil() == nil {
			t.Fatalf("unique key not shown: %v", first.Msg.GetInstance())
		}
		_, err = c.jobs.Schedule(ctx, connect.NewRequest(sched))
		wantCode(t, err, connect.CodeAlreadyExists, "k1", first.Msg.GetInstance().GetId())
		_, err = c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "block", UniqueTtl: durationpb.New(time.Hour)}))
		wantCode(t, err, connect.CodeInvalidArgument, "unique_ttl without unique_key")
		_, err = c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "block", Delay: durationpb.New(-time.Second)}))
		wantCode(t, err, connect.CodeInvalidArgument, "delay is negative")
		_, err = c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "block", RunAt: &timestamppb.Timestamp{Seconds: -1 << 62}}))
		wantCode(t, err, connect.CodeInvalidArgument, "run_at")

		// Retrying what has not finished, cancelling what has.
		id := first.Msg.GetInstance().GetId()
		_, err = c.jobs.RetryInstance(ctx, connect.NewRequest(&pb.RetryInstanceRequest{Id: id}))
		wantCode(t, err, connect.CodeFailedPrecondition, "cancel it first")
		if _, err := c.jobs.CancelInstance(ctx, connect.NewRequest(&pb.CancelInstanceRequest{Id: id})); err != nil {
			t.Fatal(err)
		}
		waitState(t, c, id, pb.State_STATE_CANCELED)
		_, err = c.jobs.CancelInstance(ctx, connect.NewRequest(&pb.CancelInstanceRequest{Id: id}))
		wantCode(t, err, connect.CodeFailedPrecondition, "the instance is canceled already: there is nothing to cancel")
		_, err = c.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{Id: "01a20a4c-0000-7000-8000-000000000000"}))
		wantCode(t, err, connect.CodeNotFound)
		_, err = c.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{}))
		wantCode(t, err, connect.CodeInvalidArgument, "id is required")

		// Page tokens: a forged one, and one of another filter.
		for range 3 {
			if _, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,1]", Delay: durationpb.New(time.Hour)})); err != nil {
				t.Fatal(err)
			}
		}
		page, err := c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{PageSize: 1}))
		if err != nil || page.Msg.GetNextPageToken() == "" {
			t.Fatalf("first page: %v %v", page, err)
		}
		for _, req := range []*pb.ListInstancesRequest{
			{PageToken: "forged-token"},
			{PageToken: page.Msg.GetNextPageToken()[:len(page.Msg.GetNextPageToken())-2] + "AA"},
			{PageToken: page.Msg.GetNextPageToken(), Filter: &pb.InstanceFilter{Kind: "add"}},
		} {
			_, err = c.jobs.ListInstances(ctx, connect.NewRequest(req))
			wantCode(t, err, connect.CodeInvalidArgument, "start again without page_token")
		}
		_, err = c.jobs.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{PageToken: page.Msg.GetNextPageToken()}))
		wantCode(t, err, connect.CodeInvalidArgument, "start again without page_token")
		_, err = c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{PageSize: 5000}))
		wantCode(t, err, connect.CodeInvalidArgument, "at most 1000")
		_, err = c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: &pb.InstanceFilter{States: []pb.State{42}}}))
		wantCode(t, err, connect.CodeInvalidArgument, "filter.states")
		_, err = c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: &pb.InstanceFilter{
			CreatedAfter: timestamppb.New(time.Now()), CreatedBefore: timestamppb.New(time.Now().Add(-time.Hour))}}))
		wantCode(t, err, connect.CodeInvalidArgument, "time range is empty")

		// An expired event cursor, and a forged one.
		st, err := c.jobs.Watch(ctx, connect.NewRequest(&pb.WatchRequest{Cursor: "nonsense"}))
		if err == nil {
			for st.Receive() {
			}
			err = st.Err()
		}
		wantCode(t, err, connect.CodeInvalidArgument, "cursor")

		// Triggers: an invalid cron spec, args that do not fit.
		_, err = c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{Name: "t", Kind: "add", ArgsJson: "[1,2]", Cron: "61 * * * *"}}))
		wantCode(t, err, connect.CodeInvalidArgument, "61")
		_, err = c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{Name: "t", Kind: "add", ArgsJson: `["a"]`, Cron: "@hourly"}}))
		wantCode(t, err, connect.CodeInvalidArgument, "argument")
		_, err = c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{Name: "t", Kind: "add", ArgsJson: `[1,`, Cron: "@hourly"}}))
		wantCode(t, err, connect.CodeInvalidArgument, "args_json")
		_, err = c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{Name: "t", Kind: "add", ArgsJson: "[1,2]", Cron: "@hourly", TimeZone: "Mars/Olympus"}}))
		wantCode(t, err, connect.CodeInvalidArgument, "Mars/Olympus")
		_, err = c.trigs.GetTrigger(ctx, connect.NewRequest(&pb.GetTriggerRequest{Name: "t"}))
		wantCode(t, err, connect.CodeNotFound)

		// Bulk operations need a filter or all.
		_, err = c.jobs.CancelInstances(ctx, connect.NewRequest(&pb.CancelInstancesRequest{}))
		wantCode(t, err, connect.CodeInvalidArgument, "all=true")
		_, err = c.jobs.DeleteInstances(ctx, connect.NewRequest(&pb.DeleteInstancesRequest{Filter: &pb.InstanceFilter{Labels: []string{"gpu"}}}))
		wantCode(t, err, connect.CodeInvalidArgument, "labels cannot narrow")
		_, err = c.jobs.ScheduleBatch(ctx, connect.NewRequest(&pb.ScheduleBatchRequest{Items: make([]*pb.ScheduleRequest, MaxBatchItems+1)}))
		wantCode(t, err, connect.CodeInvalidArgument, "at most 1000")
		if n := count(t, m); n != 4 {
			t.Fatalf("%d instances stored, want 4", n)
		}
	})
}

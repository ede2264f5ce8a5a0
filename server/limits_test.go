package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// limitUse returns the use of the concurrency limit of kind in queue as
// ListLimits reports it, nil when it is not listed.
func limitUse(t *testing.T, ls jobkitv1connect.LimitServiceClient, kind, queue string) *pb.ConcurrencyLimitUse {
	t.Helper()
	res, err := ls.ListLimits(context.Background(), connect.NewRequest(&pb.ListLimitsRequest{}))
	if err != nil {
		t.Fatalf("ListLimits: %v", err)
	}
	for _, u := range res.Msg.GetConcurrencyLimits() {
		if u.GetLimit().GetKind() == kind && u.GetLimit().GetQueue() == queue {
			return u
		}
	}
	return nil
}

// TestLimitsOverTheAPI sets, lists (with the use of each limit), explains
// and deletes concurrency limits over gRPC, gRPC-Web and Connect JSON, on
// every backend, and walks the bad input.
func TestLimitsOverTheAPI(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		ctx := context.Background()
		for _, p := range []protocol{protocols[0], protocols[1], connectJSON} {
			t.Run(p.name, func(t *testing.T) {
				ls := jobkitv1connect.NewLimitServiceClient(httpClient(t, p.h2, "", ""), e.url, p.opts...)
				c := e.dial(t, p, "", "")
				one := int32(1)
				res, err := ls.SetConcurrencyLimit(ctx, connect.NewRequest(&pb.SetConcurrencyLimitRequest{Kind: "step", Max: &one}))
				if err != nil {
					t.Fatal(err)
				}
				if l := res.Msg.GetLimit(); l.GetKind() != "step" || l.GetQueue() != "" || l.GetMax() != 1 {
					t.Fatalf("set returned %v; want kind step, max 1", l)
				}
				// Two steps held at their gate: one runs, the other waits for
				// the limit.
				key := "limits-" + b.name + "-" + p.name
				var ids []string
				for range 2 {
					s, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "step", ArgsJson: fmt.Sprintf("[%q]", key)}))
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, s.Msg.GetInstance().GetId())
				}
				waitFor(t, "1 step running and 1 waiting", func() bool {
					u := limitUse(t, ls, "step", "")
					return u.GetRunning() == 1 && u.GetWaiting() == 1
				})
				var waiting *pb.WaitExplanation
				waitFor(t, "a step explained as waiting for the limit", func() bool {
					for _, id := range ids {
						res, err := c.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{Id: id}))
						if err != nil {
							t.Fatal(err)
						}
						if w := res.Msg.GetWaiting(); w.GetReason() == "concurrency_limit" {
							waiting = w
							return true
						}
					}
					return false
				})
				if want := "waiting for the concurrency limit of kind step (1/1 running)"; waiting.GetMessage() != want {
					t.Fatalf("waiting message %q; want %q", waiting.GetMessage(), want)
				}
				close(e.gate.get(key))
				for _, id := range ids {
					waitState(t, c, id, pb.State_STATE_COMPLETED)
				}
				if u := limitUse(t, ls, "step", ""); u.GetRunning() != 0 || u.GetWaiting() != 0 || u.GetLimit().GetMax() != 1 {
					t.Fatalf("after both ran: %v; want max 1, nothing running or waiting", u)
				}
				if _, err := ls.DeleteConcurrencyLimit(ctx, connect.NewRequest(&pb.DeleteConcurrencyLimitRequest{Kind: "step"})); err != nil {
					t.Fatal(err)
				}
				if u := limitUse(t, ls, "step", ""); u != nil {
					t.Fatalf("deleted limit still listed: %v", u)
				}
				_, err = ls.DeleteConcurrencyLimit(ctx, connect.NewRequest(&pb.DeleteConcurrencyLimitRequest{Kind: "step"}))
				wantCode(t, err, connect.CodeNotFound, `"step"`)
				_, err = ls.SetConcurrencyLimit(ctx, connect.NewRequest(&pb.SetConcurrencyLimitRequest{Kind: "step"}))
				wantCode(t, err, connect.CodeInvalidArgument, "max is required")
				neg := int32(-1)
				_, err = ls.SetConcurrencyLimit(ctx, connect.NewRequest(&pb.SetConcurrencyLimitRequest{Queue: "slow", Max: &neg}))
				wantCode(t, err, connect.CodeInvalidArgument, "max -1")
				perKey(t, ls, b.name)
				rateLimits(t, ls)
			})
		}
	})
}

// TestLimitRoles: a viewer lists the limits and may not set or delete
// one.
func TestLimitRoles(t *testing.T) {
	e := newEnv(t, backends[0], Config{Tokens: []Token{
		{Name: "viewer", SHA256: HashToken("v-secret"), Role: RoleViewer, Namespaces: []string{"*"}},
		{Name: "operator", SHA256: HashToken("o-secret"), Role: RoleOperator, Namespaces: []string{"*"}},
	}})
	ctx := context.Background()
	op := jobkitv1connect.NewLimitServiceClient(httpClient(t, true, "o-secret", ""), e.url, connect.WithGRPC())
	view := jobkitv1connect.NewLimitServiceClient(httpClient(t, true, "v-secret", ""), e.url, connect.WithGRPC())
	five := int32(5)
	req := &pb.SetConcurrencyLimitRequest{Queue: "slow", Max: &five}
	_, err := view.SetConcurrencyLimit(ctx, connect.NewRequest(req))
	wantCode(t, err, connect.CodePermissionDenied, "needs role operator")
	if _, err := op.SetConcurrencyLimit(ctx, connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
	if u := limitUse(t, view, "", "slow"); u.GetLimit().GetMax() != 5 {
		t.Fatalf("viewer lists %v; want the limit of queue slow, max 5", u)
	}
	_, err = view.DeleteConcurrencyLimit(ctx, connect.NewRequest(&pb.DeleteConcurrencyLimitRequest{Queue: "slow"}))
	wantCode(t, err, connect.CodePermissionDenied, "needs role operator")
	_, err = view.SetRateLimit(ctx, connect.NewRequest(&pb.SetRateLimitRequest{Queue: "slow", Rate: 1, Period: durationpb.New(time.Second)}))
	wantCode(t, err, connect.CodePermissionDenied, "needs role operator")
	_, err = view.DeleteRateLimit(ctx, connect.NewRequest(&pb.DeleteRateLimitRequest{Queue: "slow"}))
	wantCode(t, err, connect.CodePermissionDenied, "needs role operator")
}

// perKey sets a per-key concurrency limit: stored and listed with per_key
// on memdb, FAILED_PRECONDITION naming the fix on a store without per-key
// limits (redis).
func perKey(t *testing.T, ls jobkitv1connect.LimitServiceClient, backend string) {
	t.Helper()
	ctx := context.Background()
	one := int32(1)
	res, err := ls.SetConcurrencyLimit(ctx, connect.NewRequest(&pb.SetConcurrencyLimitRequest{Kind: "charge", Max: &one, PerKey: true}))
	if backend != "memdb" {
		wantCode(t, err, connect.CodeFailedPrecondition, "per-key concurrency limits")
		if u := limitUse(t, ls, "charge", ""); u != nil {
			t.Fatalf("a refused per-key limit is listed: %v", u)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !res.Msg.GetLimit().GetPerKey() {
		t.Fatalf("set returned %v; want per_key", res.Msg.GetLimit())
	}
	if u := limitUse(t, ls, "charge", ""); !u.GetLimit().GetPerKey() || u.GetLimit().GetMax() != 1 {
		t.Fatalf("listed %v; want the per-key limit of kind charge, max 1", u)
	}
	if _, err := ls.DeleteConcurrencyLimit(ctx, connect.NewRequest(&pb.DeleteConcurrencyLimitRequest{Kind: "charge"})); err != nil {
		t.Fatal(err)
	}
}

// rateLimits sets, changes, lists and deletes a rate limit, and walks the
// bad input.
func rateLimits(t *testing.T, ls jobkitv1connect.LimitServiceClient) {
	t.Helper()
	ctx := context.Background()
	rateUse := func() *pb.RateLimitUse {
		res, err := ls.ListLimits(ctx, connect.NewRequest(&pb.ListLimitsRequest{}))
		if err != nil {
			t.Fatalf("ListLimits: %v", err)
		}
		for _, u := range res.Msg.GetRateLimits() {
			if u.GetLimit().GetKind() == "add" && u.GetLimit().GetQueue() == "" {
				return u
			}
		}
		return nil
	}
	res, err := ls.SetRateLimit(ctx, connect.NewRequest(&pb.SetRateLimitRequest{Kind: "add", Rate: 100, Period: durationpb.New(time.Second), Burst: 10}))
	if err != nil {
		t.Fatal(err)
	}
	if l := res.Msg.GetLimit(); l.GetKind() != "add" || l.GetRate() != 100 || l.GetPeriod().AsDuration() != time.Second || l.GetBurst() != 10 {
		t.Fatalf("set returned %v; want kind add, 100 per 1s, burst 10", l)
	}
	if _, err := ls.SetRateLimit(ctx, connect.NewRequest(&pb.SetRateLimitRequest{Kind: "add", Rate: 5, Period: durationpb.New(time.Minute)})); err != nil {
		t.Fatal(err)
	}
	if l := rateUse().GetLimit(); l.GetRate() != 5 || l.GetPeriod().AsDuration() != time.Minute || l.GetBurst() != 0 {
		t.Fatalf("listed %v after the change; want 5 per 1m, burst 0", l)
	}
	if _, err := ls.DeleteRateLimit(ctx, connect.NewRequest(&pb.DeleteRateLimitRequest{Kind: "add"})); err != nil {
		t.Fatal(err)
	}
	if u := rateUse(); u != nil {
		t.Fatalf("deleted rate limit still listed: %v", u)
	}
	_, err = ls.DeleteRateLimit(ctx, connect.NewRequest(&pb.DeleteRateLimitRequest{Kind: "add"}))
	wantCode(t, err, connect.CodeNotFound, `"add"`)
	for _, c := range []struct {
		req  *pb.SetRateLimitRequest
		says string
	}{
		{&pb.SetRateLimitRequest{Kind: "add", Period: durationpb.New(time.Second)}, "rate 0; send how many may start per period, 1 or more"},
		{&pb.SetRateLimitRequest{Kind: "add", Rate: 1}, "period is required"},
		{&pb.SetRateLimitRequest{Kind: "add", Rate: 1, Period: durationpb.New(0)}, "period 0s; want at least 1ms"},
		{&pb.SetRateLimitRequest{Kind: "add", Rate: 1, Period: durationpb.New(time.Second), Burst: -1}, "burst -1 is negative"},
		{&pb.SetRateLimitRequest{Kind: "add", Rate: 2000, Period: durationpb.New(time.Millisecond)}, "use a longer period"},
	} {
		_, err := ls.SetRateLimit(ctx, connect.NewRequest(c.req))
		wantCode(t, err, connect.CodeInvalidArgument, c.says)
	}
	if u := rateUse(); u != nil {
		t.Fatalf("a refused rate limit is listed: %v", u)
	}
}

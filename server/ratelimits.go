package server

import (
	"context"
	"fmt"
	"maps"
	"math"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// Rate limits on LimitService: SetRateLimit, DeleteRateLimit and the
// rate_limits field of ListLimits.

func init() {
	maps.Copy(procedureRoles, map[string]Role{
		jobkitv1connect.LimitServiceSetRateLimitProcedure:    RoleOperator,
		jobkitv1connect.LimitServiceDeleteRateLimitProcedure: RoleOperator,
	})
	codeRules = append(codeRules, codeRule{job.ErrRateLimitsUnsupported, connect.CodeFailedPrecondition, ""})
}

// rateLimitToProto converts a rate limit.
func rateLimitToProto(l job.RateLimit) *pb.RateLimit {
	return &pb.RateLimit{
		Kind: l.Kind, Queue: l.Queue, Rate: int32(min(l.Rate, math.MaxInt32)),
		Period: durationpb.New(l.Period), Burst: int32(min(l.Burst, math.MaxInt32)),
	}
}

// SetRateLimit implements LimitService.SetRateLimit.
func (limitService) SetRateLimit(ctx context.Context, req *connect.Request[pb.SetRateLimitRequest]) (*connect.Response[pb.SetRateLimitResponse], error) {
	m := req.Msg
	switch {
	case m.GetRate() < 1:
		return nil, invalid(fmt.Sprintf("rate %d; send how many may start per period, 1 or more (a concurrency limit of max 0 stops starts altogether)", m.GetRate()))
	case m.GetPeriod() == nil:
		return nil, invalid("period is required; send the window the rate counts starts in, 1ms to a year (e.g. 1s)")
	case m.GetPeriod().CheckValid() != nil:
		return nil, invalid(fmt.Sprintf("period: %v; send a duration of 1ms to a year", m.GetPeriod().CheckValid()))
	case m.GetBurst() < 0:
		return nil, invalid(fmt.Sprintf("burst %d is negative; send 0 (starts spaced period/rate apart) or more", m.GetBurst()))
	}
	l := job.RateLimit{Kind: m.GetKind(), Queue: m.GetQueue(), Rate: int(m.GetRate()), Period: m.GetPeriod().AsDuration(), Burst: int(m.GetBurst())}
	if err := managerOf(ctx).Admin().SetRateLimit(ctx, l); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.SetRateLimitResponse{Limit: rateLimitToProto(l)}), nil
}

// DeleteRateLimit implements LimitService.DeleteRateLimit.
func (limitService) DeleteRateLimit(ctx context.Context, req *connect.Request[pb.DeleteRateLimitRequest]) (*connect.Response[pb.DeleteRateLimitResponse], error) {
	if err := managerOf(ctx).Admin().DeleteRateLimit(ctx, req.Msg.GetKind(), req.Msg.GetQueue()); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.DeleteRateLimitResponse{}), nil
}

// listRateLimits is the rate_limits field of ListLimits.
func listRateLimits(ctx context.Context) ([]*pb.RateLimitUse, error) {
	uses, err := managerOf(ctx).Admin().ListRateLimits(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*pb.RateLimitUse, 0, len(uses))
	for _, u := range uses {
		out = append(out, &pb.RateLimitUse{Limit: rateLimitToProto(u.RateLimit), Running: u.Running, Waiting: u.Waiting})
	}
	return out, nil
}

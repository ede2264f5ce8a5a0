package server

import (
	"context"
	"fmt"
	"maps"
	"math"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

func init() {
	serviceNames = append(serviceNames, jobkitv1connect.LimitServiceName)
	maps.Copy(procedureRoles, map[string]Role{
		jobkitv1connect.LimitServiceSetConcurrencyLimitProcedure:    RoleOperator,
		jobkitv1connect.LimitServiceDeleteConcurrencyLimitProcedure: RoleOperator,
		jobkitv1connect.LimitServiceListLimitsProcedure:             RoleViewer,
	})
	codeRules = append(codeRules,
		codeRule{job.ErrLimitsUnsupported, connect.CodeFailedPrecondition, ""},
		codeRule{job.ErrKeyedLimitsUnsupported, connect.CodeFailedPrecondition, ""})
}

// limitService implements jobkitv1connect.LimitServiceHandler on the
// namespace's manager. Concurrency limits live in this file; other kinds
// of limit get RPCs (and files) of their own, and a field of
// ListLimitsResponse.
type limitService struct{}

// mountLimits serves LimitService on s's mux with opts.
func (s *Server) mountLimits(opts ...connect.HandlerOption) {
	s.mux.Handle(jobkitv1connect.NewLimitServiceHandler(limitService{}, opts...))
}

// concurrencyLimitToProto converts a limit.
func concurrencyLimitToProto(l job.ConcurrencyLimit) *pb.ConcurrencyLimit {
	return &pb.ConcurrencyLimit{Kind: l.Kind, Queue: l.Queue, Max: int32(min(l.Max, math.MaxInt32)), PerKey: l.PerKey}
}

// SetConcurrencyLimit implements LimitService.SetConcurrencyLimit.
func (limitService) SetConcurrencyLimit(ctx context.Context, req *connect.Request[pb.SetConcurrencyLimitRequest]) (*connect.Response[pb.SetConcurrencyLimitResponse], error) {
	if req.Msg.Max == nil {
		return nil, invalid("max is required; send how many may run at once (0 lets none start)")
	}
	if n := req.Msg.GetMax(); n < 0 {
		return nil, invalid(fmt.Sprintf("max %d is negative; send 0 (none may start) or more", n))
	}
	l := job.ConcurrencyLimit{Kind: req.Msg.GetKind(), Queue: req.Msg.GetQueue(), Max: int(req.Msg.GetMax()), PerKey: req.Msg.GetPerKey()}
	if err := managerOf(ctx).Admin().SetConcurrencyLimit(ctx, l); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.SetConcurrencyLimitResponse{Limit: concurrencyLimitToProto(l)}), nil
}

// DeleteConcurrencyLimit implements LimitService.DeleteConcurrencyLimit.
func (limitService) DeleteConcurrencyLimit(ctx context.Context, req *connect.Request[pb.DeleteConcurrencyLimitRequest]) (*connect.Response[pb.DeleteConcurrencyLimitResponse], error) {
	if err := managerOf(ctx).Admin().DeleteConcurrencyLimit(ctx, req.Msg.GetKind(), req.Msg.GetQueue()); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.DeleteConcurrencyLimitResponse{}), nil
}

// ListLimits implements LimitService.ListLimits.
func (limitService) ListLimits(ctx context.Context, _ *connect.Request[pb.ListLimitsRequest]) (*connect.Response[pb.ListLimitsResponse], error) {
	uses, err := managerOf(ctx).Admin().ListConcurrencyLimits(ctx)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pb.ListLimitsResponse{}
	for _, u := range uses {
		out.ConcurrencyLimits = append(out.ConcurrencyLimits, &pb.ConcurrencyLimitUse{
			Limit: concurrencyLimitToProto(u.ConcurrencyLimit), Running: u.Running, Waiting: u.Waiting,
		})
	}
	if out.RateLimits, err = listRateLimits(ctx); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(out), nil
}

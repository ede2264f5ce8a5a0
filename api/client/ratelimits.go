package client

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// SetRateLimit stores l, replacing the rate limit of the same kind and
// queue; every node applies it within a second (doc/limits.md).
// CodeInvalidArgument, naming the fix, for an unusable Rate, Period or
// Burst; CodeFailedPrecondition when the server's store cannot enforce
// rate limits.
func (a *Admin) SetRateLimit(ctx context.Context, l job.RateLimit) error {
	const most = 1<<31 - 1
	if l.Rate < 1 || l.Rate > most || l.Burst < 0 || l.Burst > most {
		return wrap("set rate limit of "+l.String(), connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("rate %d, burst %d: want a rate of 1 to %d and a burst of 0 to %d", l.Rate, l.Burst, most, most)))
	}
	_, err := a.c.limits.SetRateLimit(ctx, connect.NewRequest(&jobkitv1.SetRateLimitRequest{
		Kind: l.Kind, Queue: l.Queue, Rate: int32(l.Rate), Period: durationpb.New(l.Period), Burst: int32(l.Burst),
	}))
	return wrap("set rate limit of "+l.String(), err)
}

// DeleteRateLimit removes the rate limit of kind in queue (either empty
// as it was set); CodeNotFound when there is none.
func (a *Admin) DeleteRateLimit(ctx context.Context, kind, queue string) error {
	_, err := a.c.limits.DeleteRateLimit(ctx, connect.NewRequest(&jobkitv1.DeleteRateLimitRequest{Kind: kind, Queue: queue}))
	return wrap(fmt.Sprintf("delete the rate limit of kind %q in queue %q", kind, queue), err)
}

// ListRateLimits returns the stored rate limits, by kind then queue, each
// with how many instances it matches run and wait now.
func (a *Admin) ListRateLimits(ctx context.Context) ([]job.RateLimitUse, error) {
	res, err := a.c.limits.ListLimits(ctx, connect.NewRequest(&jobkitv1.ListLimitsRequest{}))
	if err != nil {
		return nil, wrap("list rate limits", err)
	}
	out := make([]job.RateLimitUse, 0, len(res.Msg.GetRateLimits()))
	for _, u := range res.Msg.GetRateLimits() {
		out = append(out, job.RateLimitUse{RateLimit: rateLimitFromProto(u.GetLimit()), Running: u.GetRunning(), Waiting: u.GetWaiting()})
	}
	return out, nil
}

// rateLimitFromProto converts a rate limit.
func rateLimitFromProto(l *jobkitv1.RateLimit) job.RateLimit {
	return job.RateLimit{Kind: l.GetKind(), Queue: l.GetQueue(), Rate: int(l.GetRate()), Period: l.GetPeriod().AsDuration(), Burst: int(l.GetBurst())}
}

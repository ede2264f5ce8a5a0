package client

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// SetConcurrencyLimit stores l, replacing the concurrency limit of the
// same kind and queue; every node applies it within a second
// (doc/limits.md). CodeInvalidArgument for a negative Max,
// CodeFailedPrecondition when the server's store cannot enforce limits
// (or, with PerKey, per-key limits).
//
// Deprecated: use Admin().SetConcurrencyLimit. It stays for one release.
func (c *Client) SetConcurrencyLimit(ctx context.Context, l job.ConcurrencyLimit) error {
	if l.Max < 0 || l.Max > 1<<31-1 {
		return wrap("set concurrency limit of "+l.String(), connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("max %d: want 0 to %d", l.Max, 1<<31-1)))
	}
	n := int32(l.Max)
	_, err := c.limits.SetConcurrencyLimit(ctx, connect.NewRequest(&jobkitv1.SetConcurrencyLimitRequest{Kind: l.Kind, Queue: l.Queue, Max: &n, PerKey: l.PerKey}))
	return wrap("set concurrency limit of "+l.String(), err)
}

// DeleteConcurrencyLimit removes the concurrency limit of kind in queue
// (either empty as it was set); CodeNotFound when there is none.
//
// Deprecated: use Admin().DeleteConcurrencyLimit. It stays for one release.
func (c *Client) DeleteConcurrencyLimit(ctx context.Context, kind, queue string) error {
	_, err := c.limits.DeleteConcurrencyLimit(ctx, connect.NewRequest(&jobkitv1.DeleteConcurrencyLimitRequest{Kind: kind, Queue: queue}))
	return wrap(fmt.Sprintf("delete the concurrency limit of kind %q in queue %q", kind, queue), err)
}

// ListConcurrencyLimits returns the stored concurrency limits, by kind
// then queue, each with how many instances it matches run and wait now.
//
// Deprecated: use Admin().ListConcurrencyLimits. It stays for one release.
func (c *Client) ListConcurrencyLimits(ctx context.Context) ([]job.LimitUse, error) {
	res, err := c.limits.ListLimits(ctx, connect.NewRequest(&jobkitv1.ListLimitsRequest{}))
	if err != nil {
		return nil, wrap("list concurrency limits", err)
	}
	out := make([]job.LimitUse, 0, len(res.Msg.GetConcurrencyLimits()))
	for _, u := range res.Msg.GetConcurrencyLimits() {
		l := u.GetLimit()
		out = append(out, job.LimitUse{
			ConcurrencyLimit: job.ConcurrencyLimit{Kind: l.GetKind(), Queue: l.GetQueue(), Max: int(l.GetMax()), PerKey: l.GetPerKey()},
			Running:          u.GetRunning(), Waiting: u.GetWaiting(),
		})
	}
	return out, nil
}

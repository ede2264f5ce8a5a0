package client

import (
	"context"

	"connectrpc.com/connect"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// WhyWaiting says why the scheduled instance id has not started: its
// queue is paused, no live node or remote worker runs its kind, none of
// those that do has the labels it requires, it is not due yet, or it is
// queued behind other work (Reason, with Detail in words and the Runners
// that may take it). An instance that is not Scheduled has Waiting false.
func (c *Client) WhyWaiting(ctx context.Context, id string) (*jobkitv1.WhyWaitingResponse, error) {
	res, err := c.executors.WhyWaiting(ctx, connect.NewRequest(&jobkitv1.WhyWaitingRequest{InstanceId: id}))
	if err != nil {
		return nil, wrap("why waiting", err)
	}
	return res.Msg, nil
}

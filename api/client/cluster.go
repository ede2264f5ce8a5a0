package client

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// ListQueues returns every queue with its counts by state, its lag and
// whether it is paused.
func (a *Admin) ListQueues(ctx context.Context) ([]*jobkitv1.Queue, error) {
	c := a.c
	res, err := c.queues.ListQueues(ctx, connect.NewRequest(&jobkitv1.ListQueuesRequest{}))
	if err != nil {
		return nil, wrap("list queues", err)
	}
	return res.Msg.GetQueues(), nil
}

// PauseQueue stops claims from the queue on every node; its instances
// wait. It returns the queue after the change.
func (a *Admin) PauseQueue(ctx context.Context, name string) (*jobkitv1.Queue, error) {
	c := a.c
	op := fmt.Sprintf("pause queue %q", name)
	if name == "" {
		return nil, invalid(op, fmt.Errorf("empty queue name"))
	}
	res, err := c.queues.PauseQueue(ctx, connect.NewRequest(&jobkitv1.PauseQueueRequest{Name: name}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetQueue(), nil
}

// ResumeQueue lets nodes claim from a paused queue again.
func (a *Admin) ResumeQueue(ctx context.Context, name string) (*jobkitv1.Queue, error) {
	c := a.c
	op := fmt.Sprintf("resume queue %q", name)
	if name == "" {
		return nil, invalid(op, fmt.Errorf("empty queue name"))
	}
	res, err := c.queues.ResumeQueue(ctx, connect.NewRequest(&jobkitv1.ResumeQueueRequest{Name: name}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetQueue(), nil
}

// ListKinds returns every job kind the store has seen, with its counts and
// lag.
func (a *Admin) ListKinds(ctx context.Context) ([]*jobkitv1.Kind, error) {
	c := a.c
	res, err := c.queues.ListKinds(ctx, connect.NewRequest(&jobkitv1.ListKindsRequest{}))
	if err != nil {
		return nil, wrap("list kinds", err)
	}
	return res.Msg.GetKinds(), nil
}

// ListNodes returns the nodes sharing the server's store: live ones and
// those gone recently.
func (a *Admin) ListNodes(ctx context.Context) ([]*jobkitv1.Node, error) {
	c := a.c
	res, err := c.nodes.ListNodes(ctx, connect.NewRequest(&jobkitv1.ListNodesRequest{}))
	if err != nil {
		return nil, wrap("list nodes", err)
	}
	return res.Msg.GetNodes(), nil
}

// APIVersion is the API this client speaks, as its protobuf package. A
// server speaking it answers Version with the same APIVersion.
const APIVersion = "jobkit.v1"

// GetVersion returns the version of the server answering (ServerVersion, its
// build; EngineVersion, the job engine compiled in), the API it speaks
// (ApiVersion, APIVersion for this client's) and the Go release that built
// it. It is go-job's GetVersion; it needs role viewer.
func (c *Client) GetVersion(ctx context.Context) (*jobkitv1.GetVersionResponse, error) {
	res, err := c.nodes.GetVersion(ctx, connect.NewRequest(&jobkitv1.GetVersionRequest{}))
	if err != nil {
		return nil, wrap("get version", err)
	}
	return res.Msg, nil
}

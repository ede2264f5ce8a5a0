package client

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// Admin holds the operator's calls, as job.Admin does for a Manager
// (after asynq's Inspector): definitions, triggers and their fire
// times, calendars, queues, kinds and nodes, the bulk operations, and
// the alert service's rules, silences, incidents, channels and
// notifications. Client keeps what an application calls every day:
// schedule, get, list and watch its instances, and cancel, retry or
// delete one. An Admin is a view of its Client (same connection, token
// and namespace): it costs nothing to get and needs no closing.
type Admin struct {
	c *Client
}

// Admin returns the client's operator calls.
func (c *Client) Admin() *Admin { return &Admin{c: c} }

// AdminOption configures RetryInstance and the bulk operations; the names
// are those of package job.
type AdminOption func(*adminConfig)

type adminConfig struct {
	reset bool
	runAt time.Time
	all   bool
}

// WithResetAttempts makes a retry start the attempt count again at 0.
func WithResetAttempts() AdminOption { return func(c *adminConfig) { c.reset = true } }

// WithRetryAt makes retried instances ready at t instead of at once.
func WithRetryAt(t time.Time) AdminOption { return func(c *adminConfig) { c.runAt = t } }

// WithAllInstances lets a bulk operation run with a query that selects
// nothing in particular, so it acts on every instance. Without it the
// server refuses such a query (CodeInvalidArgument).
func WithAllInstances() AdminOption { return func(c *adminConfig) { c.all = true } }

func adminOpts(opts []AdminOption) adminConfig {
	var c adminConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// BulkResult counts what a bulk operation did: the instances the query
// matched, those changed, and those skipped because they changed in
// between.
type BulkResult struct {
	Matched, Applied, Skipped int64
}

func bulk(r *jobkitv1.BulkResult) BulkResult {
	return BulkResult{Matched: r.GetMatched(), Applied: r.GetApplied(), Skipped: r.GetSkipped()}
}

// CancelInstance cancels a waiting instance at once and asks a running
// one to stop; it returns the instance after the change (Canceled, or
// Processing with CancelRequested).
func (c *Client) CancelInstance(ctx context.Context, id string) (*Instance, error) {
	op := "cancel " + id
	if id == "" {
		return nil, invalid(op, fmt.Errorf("empty instance ID"))
	}
	res, err := c.jobs.CancelInstance(ctx, connect.NewRequest(&jobkitv1.CancelInstanceRequest{Id: id}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return newInstance(res.Msg.GetInstance()), nil
}

// RetryInstance runs a finished instance again (now, or at WithRetryAt)
// and returns it as stored after the change.
func (c *Client) RetryInstance(ctx context.Context, id string, opts ...AdminOption) (*Instance, error) {
	op := "retry " + id
	if id == "" {
		return nil, invalid(op, fmt.Errorf("empty instance ID"))
	}
	o := adminOpts(opts)
	res, err := c.jobs.RetryInstance(ctx, connect.NewRequest(&jobkitv1.RetryInstanceRequest{
		Id: id, ResetAttempts: o.reset, RunAt: tsOrNil(o.runAt),
	}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return newInstance(res.Msg.GetInstance()), nil
}

// DeleteInstance removes an instance, its history and its logs.
func (c *Client) DeleteInstance(ctx context.Context, id string) error {
	op := "delete " + id
	if id == "" {
		return invalid(op, fmt.Errorf("empty instance ID"))
	}
	_, err := c.jobs.DeleteInstance(ctx, connect.NewRequest(&jobkitv1.DeleteInstanceRequest{Id: id}))
	return wrap(op, err)
}

// CancelInstances cancels every instance q selects (kind, queue, states,
// labels, creation time range).
func (a *Admin) CancelInstances(ctx context.Context, q *Query, opts ...AdminOption) (BulkResult, error) {
	c := a.c
	o := adminOpts(opts)
	res, err := c.jobs.CancelInstances(ctx, connect.NewRequest(&jobkitv1.CancelInstancesRequest{
		Filter: q.orEmpty().filter(), All: o.all,
	}))
	if err != nil {
		return BulkResult{}, wrap("cancel instances", err)
	}
	return bulk(res.Msg.GetResult()), nil
}

// RetryInstances retries every finished instance q selects.
func (a *Admin) RetryInstances(ctx context.Context, q *Query, opts ...AdminOption) (BulkResult, error) {
	c := a.c
	o := adminOpts(opts)
	res, err := c.jobs.RetryInstances(ctx, connect.NewRequest(&jobkitv1.RetryInstancesRequest{
		Filter: q.orEmpty().filter(), All: o.all, ResetAttempts: o.reset, RunAt: tsOrNil(o.runAt),
	}))
	if err != nil {
		return BulkResult{}, wrap("retry instances", err)
	}
	return bulk(res.Msg.GetResult()), nil
}

// DeleteInstances deletes every instance q selects.
func (a *Admin) DeleteInstances(ctx context.Context, q *Query, opts ...AdminOption) (BulkResult, error) {
	c := a.c
	o := adminOpts(opts)
	res, err := c.jobs.DeleteInstances(ctx, connect.NewRequest(&jobkitv1.DeleteInstancesRequest{
		Filter: q.orEmpty().filter(), All: o.all,
	}))
	if err != nil {
		return BulkResult{}, wrap("delete instances", err)
	}
	return bulk(res.Msg.GetResult()), nil
}

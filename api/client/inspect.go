package client

import (
	"context"
	"fmt"
	"iter"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// GetInstance returns the instance with the given ID, or an error with
// CodeNotFound (errors.Is job.ErrNotFound). While it is Scheduled, its
// Waiting says why it is not running yet.
func (c *Client) GetInstance(ctx context.Context, id string) (*Instance, error) {
	op := "get instance " + id
	if id == "" {
		return nil, invalid(op, fmt.Errorf("empty instance ID"))
	}
	res, err := c.jobs.GetInstance(ctx, connect.NewRequest(&jobkitv1.GetInstanceRequest{Id: id}))
	if err != nil {
		return nil, wrap(op, err)
	}
	in := newInstance(res.Msg.GetInstance())
	in.waiting = res.Msg.GetWaiting()
	return in, nil
}

// ListInstances returns one page of the instances q selects, newest
// first. Pass the page's Next to WithQueryCursor for the next page.
func (c *Client) ListInstances(ctx context.Context, q *Query) (*job.Page[*Instance], error) {
	q = q.orEmpty()
	res, err := c.jobs.ListInstances(ctx, connect.NewRequest(&jobkitv1.ListInstancesRequest{
		Filter: q.filter(), PageSize: int32(q.limit), PageToken: q.cursor,
	}))
	if err != nil {
		return nil, wrap("list instances", err)
	}
	out := &job.Page[*Instance]{Items: make([]*Instance, len(res.Msg.GetInstances())), Next: res.Msg.GetNextPageToken()}
	for i, in := range res.Msg.GetInstances() {
		out.Items[i] = newInstance(in)
	}
	return out, nil
}

// AllInstances pages through every instance q selects (from its cursor
// on), newest first, one call per page; it stops at the first error,
// which it yields.
func (c *Client) AllInstances(ctx context.Context, q *Query) iter.Seq2[*Instance, error] {
	return func(yield func(*Instance, error) bool) {
		qq := *q.orEmpty()
		for {
			p, err := c.ListInstances(ctx, &qq)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, in := range p.Items {
				if !yield(in, nil) {
					return
				}
			}
			if p.Next == "" {
				return
			}
			qq.cursor = p.Next
		}
	}
}

// ListHistory returns one page of the state changes q selects (instance,
// kind, states, time range), oldest first.
func (c *Client) ListHistory(ctx context.Context, q *Query) (*job.Page[*jobkitv1.StateChange], error) {
	q = q.orEmpty()
	res, err := c.jobs.ListHistory(ctx, connect.NewRequest(&jobkitv1.ListHistoryRequest{
		InstanceId: q.instanceID, Kind: q.kind, States: statesProto(q.states),
		Since: tsOrNil(q.since), Until: tsOrNil(q.until),
		PageSize: int32(q.limit), PageToken: q.cursor,
	}))
	if err != nil {
		return nil, wrap("history", err)
	}
	return &job.Page[*jobkitv1.StateChange]{Items: res.Msg.GetChanges(), Next: res.Msg.GetNextPageToken()}, nil
}

// ListLogs returns one page of the log records q selects (instance, kind,
// levels, time range), oldest first.
func (c *Client) ListLogs(ctx context.Context, q *Query) (*job.Page[*jobkitv1.LogRecord], error) {
	q = q.orEmpty()
	res, err := c.jobs.ListLogs(ctx, connect.NewRequest(&jobkitv1.ListLogsRequest{
		InstanceId: q.instanceID, Kind: q.kind, Levels: levelsProto(q.levels),
		Since: tsOrNil(q.since), Until: tsOrNil(q.until),
		PageSize: int32(q.limit), PageToken: q.cursor,
	}))
	if err != nil {
		return nil, wrap("logs", err)
	}
	return &job.Page[*jobkitv1.LogRecord]{Items: res.Msg.GetRecords(), Next: res.Msg.GetNextPageToken()}, nil
}

// FollowLogs streams the log records of instance id (of q's levels, if
// any): those logged so far, then new ones as they are written, until the
// instance reaches a final state (the sequence ends) or ctx ends. An error
// ends the sequence; it is yielded last.
func (c *Client) FollowLogs(ctx context.Context, id string, q *Query) iter.Seq2[*jobkitv1.LogRecord, error] {
	return func(yield func(*jobkitv1.LogRecord, error) bool) {
		op := "follow logs " + id
		if id == "" {
			yield(nil, invalid(op, fmt.Errorf("empty instance ID")))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := c.jobs.FollowLogs(ctx, connect.NewRequest(&jobkitv1.FollowLogsRequest{
			InstanceId: id, Levels: levelsProto(q.orEmpty().levels),
		}))
		if err != nil {
			yield(nil, wrap(op, err))
			return
		}
		defer st.Close()
		for st.Receive() {
			if !yield(st.Msg().GetRecord(), nil) {
				return
			}
		}
		if err := st.Err(); err != nil {
			yield(nil, wrap(op, err))
		}
	}
}

// EventOption narrows or positions a Watch; the names are those of
// package job.
type EventOption func(*jobkitv1.WatchRequest)

// WithEventCursor starts the feed after the event whose Cursor this is.
// Without it the feed starts now.
func WithEventCursor(cursor string) EventOption {
	return func(r *jobkitv1.WatchRequest) { r.Cursor = cursor }
}

// WithEventKinds keeps only the events of instances of these kinds.
func WithEventKinds(kinds ...string) EventOption {
	return func(r *jobkitv1.WatchRequest) { r.Kinds = append(r.Kinds, kinds...) }
}

// WithEventInstanceID keeps only the events of one instance.
func WithEventInstanceID(id string) EventOption {
	return func(r *jobkitv1.WatchRequest) { r.InstanceId = id }
}

// Watch streams state changes as they happen, until ctx ends or the
// server ends the feed; an error ends the sequence and is yielded last.
// Resume after a disconnect with WithEventCursor(the last event's
// Cursor): nothing is missed or repeated while the store retains it (an
// expired cursor is CodeInvalidArgument; start again without one).
func (c *Client) Watch(ctx context.Context, opts ...EventOption) iter.Seq2[*jobkitv1.Event, error] {
	return func(yield func(*jobkitv1.Event, error) bool) {
		req := &jobkitv1.WatchRequest{}
		for _, o := range opts {
			if o != nil {
				o(req)
			}
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := c.jobs.Watch(ctx, connect.NewRequest(req))
		if err != nil {
			yield(nil, wrap("watch", err))
			return
		}
		defer st.Close()
		for st.Receive() {
			if !yield(st.Msg().GetEvent(), nil) {
				return
			}
		}
		if err := st.Err(); err != nil && ctx.Err() == nil {
			yield(nil, wrap("watch", err))
		}
	}
}

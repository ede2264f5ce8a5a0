package client

import (
	"context"
	"fmt"
	"iter"

	"connectrpc.com/connect"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// LookupInstance returns the instance with the given ID, or an error with
// CodeNotFound (errors.Is job.ErrNotFound). While it is Scheduled, its
// Waiting says why it is not running yet.
func (c *Client) LookupInstance(ctx context.Context, id string) (*Instance, error) {
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

// InstancePage is one page of instances, newest first.
type InstancePage struct {
	Instances []*Instance
	// Next is the cursor of the next page, for WithQueryCursor; "" when
	// this page is the last.
	Next string
}

// PageInstances returns one page of the instances q selects, newest
// first. Pass the page's Next to WithQueryCursor for the next page.
func (c *Client) PageInstances(ctx context.Context, q *Query) (*InstancePage, error) {
	q = q.orEmpty()
	res, err := c.jobs.ListInstances(ctx, connect.NewRequest(&jobkitv1.ListInstancesRequest{
		Filter: q.filter(), PageSize: int32(q.limit), PageToken: q.cursor,
	}))
	if err != nil {
		return nil, wrap("list instances", err)
	}
	out := &InstancePage{Instances: make([]*Instance, len(res.Msg.GetInstances())), Next: res.Msg.GetNextPageToken()}
	for i, in := range res.Msg.GetInstances() {
		out.Instances[i] = newInstance(in)
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
			p, err := c.PageInstances(ctx, &qq)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, in := range p.Instances {
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

// HistoryPage is one page of state changes, oldest first.
type HistoryPage struct {
	Changes []*jobkitv1.StateChange
	Next    string // the next page's cursor, or "" after the last page
}

// PageHistory returns one page of the state changes q selects (instance,
// kind, states, time range), oldest first.
func (c *Client) PageHistory(ctx context.Context, q *Query) (*HistoryPage, error) {
	q = q.orEmpty()
	res, err := c.jobs.ListHistory(ctx, connect.NewRequest(&jobkitv1.ListHistoryRequest{
		InstanceId: q.instanceID, Kind: q.kind, States: statesProto(q.states),
		Since: tsOrNil(q.since), Until: tsOrNil(q.until),
		PageSize: int32(q.limit), PageToken: q.cursor,
	}))
	if err != nil {
		return nil, wrap("history", err)
	}
	return &HistoryPage{Changes: res.Msg.GetChanges(), Next: res.Msg.GetNextPageToken()}, nil
}

// LogPage is one page of log records, oldest first.
type LogPage struct {
	Records []*jobkitv1.LogRecord
	Next    string // the next page's cursor, or "" after the last page
}

// PageLogs returns one page of the log records q selects (instance, kind,
// levels, time range), oldest first.
func (c *Client) PageLogs(ctx context.Context, q *Query) (*LogPage, error) {
	q = q.orEmpty()
	res, err := c.jobs.ListLogs(ctx, connect.NewRequest(&jobkitv1.ListLogsRequest{
		InstanceId: q.instanceID, Kind: q.kind, Levels: levelsProto(q.levels),
		Since: tsOrNil(q.since), Until: tsOrNil(q.until),
		PageSize: int32(q.limit), PageToken: q.cursor,
	}))
	if err != nil {
		return nil, wrap("logs", err)
	}
	return &LogPage{Records: res.Msg.GetRecords(), Next: res.Msg.GetNextPageToken()}, nil
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

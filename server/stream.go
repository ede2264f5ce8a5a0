package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// Defaults of FollowLogs.
const (
	// followPoll is how often FollowLogs looks for new records.
	followPoll = 250 * time.Millisecond
	// followSettle is how long FollowLogs keeps looking after the instance
	// finished: executors' records reach the store in asynchronous
	// batches, so the last ones may be written just after the final state.
	followSettle = time.Second
	// followSkew is how far before the newest record seen FollowLogs looks
	// again, for records of another node whose clock is behind.
	followSkew = time.Minute
)

// Watch implements JobService.Watch: the namespace's change feed
// (Manager.Events) from the request's cursor, or from now, until the
// caller ends the call or the feed fails (an expired cursor is
// InvalidArgument, naming the fix).
func (h jobService) Watch(ctx context.Context, req *connect.Request[pb.WatchRequest], stream *connect.ServerStream[pb.WatchResponse]) error {
	var opts []job.EventOption
	if c := req.Msg.GetCursor(); c != "" {
		opts = append(opts, job.WithEventCursor(c))
	}
	if ks := req.Msg.GetKinds(); len(ks) > 0 {
		opts = append(opts, job.WithEventKinds(ks...))
	}
	if id := req.Msg.GetInstanceId(); id != "" {
		opts = append(opts, job.WithEventInstanceID(id))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := managerOf(ctx).WatchEvents(ctx, opts...)
	if err != nil {
		return watchErr(err, req.Msg.GetCursor())
	}
	// Send the headers now: the feed is open.
	if err := stream.Send(nil); err != nil {
		return err
	}
	for {
		select {
		case <-h.s.drained:
			return errDraining()
		case e, ok := <-events:
			if !ok {
				return toConnect(ctx.Err())
			}
			if e.Err != nil {
				return watchErr(e.Err, req.Msg.GetCursor())
			}
			if err := stream.Send(&pb.WatchResponse{Event: eventToProto(&e)}); err != nil {
				return err
			}
		}
	}
}

// watchErr converts a feed's error, naming the fix for a bad cursor.
func watchErr(err error, cursor string) error {
	switch {
	case errors.Is(err, store.ErrCursorExpired):
		return invalid(fmt.Sprintf("%v; the cursor is older than what the store retains: list the instances you need, then watch again without a cursor", err))
	case cursor != "" && errors.Is(err, store.ErrInvalid):
		return invalid(fmt.Sprintf("%v; send a cursor from an event of this namespace, or none to watch from now", err))
	}
	return toConnect(err)
}

// FollowLogs implements JobService.FollowLogs: the instance's records so
// far, then new ones as they are written, until the instance is final
// (and followSettle has passed, for records still on their way) or the
// caller ends the call. It looks for new records every followPoll.
func (h jobService) FollowLogs(ctx context.Context, req *connect.Request[pb.FollowLogsRequest], stream *connect.ServerStream[pb.FollowLogsResponse]) error {
	id := req.Msg.GetInstanceId()
	if id == "" {
		return invalid("instance_id is required; send the ID of the instance whose logs to follow")
	}
	levels, err := levelsFromProto(req.Msg.GetLevels())
	if err != nil {
		return toConnect(fmt.Errorf("levels: %w", err))
	}
	m := managerOf(ctx)
	if _, err := m.GetInstance(ctx, id); err != nil {
		return toConnect(err)
	}
	// Send the headers now, as Watch does: the instance exists and the
	// stream is open. Until a first record, a client would otherwise see
	// nothing, and some (gRPC over HTTP/2) block in the call itself.
	if err := stream.Send(nil); err != nil {
		return err
	}
	f := &follower{m: m, id: id, levels: levels, seen: map[uint64]time.Time{}, send: func(r *store.LogRecord) error {
		return stream.Send(&pb.FollowLogsResponse{Record: logToProto(r)})
	}}
	tick := time.NewTicker(h.s.followPoll)
	defer tick.Stop()
	var finalAt time.Time // when the instance was first seen final
	for {
		// Read the state before the records, so that records written
		// before it turned final are in this round.
		ji, err := m.GetInstance(ctx, id)
		if err != nil {
			return toConnect(err)
		}
		if err := f.round(ctx); err != nil {
			return err
		}
		now := time.Now()
		if ji.State.Final() && finalAt.IsZero() {
			finalAt = now
		}
		if !finalAt.IsZero() && now.Sub(finalAt) >= h.s.followSettle {
			return nil
		}
		select {
		case <-ctx.Done():
			return toConnect(ctx.Err())
		case <-h.s.drained:
			return errDraining()
		case <-tick.C:
		}
	}
}

// follower sends an instance's log records it has not sent yet.
type follower struct {
	m      *job.Manager
	id     string
	levels []store.LogLevel
	// seen holds the Seq and Time of the records sent that a round may
	// read again (those within followSkew of newest); older ones are
	// forgotten, so a long follow holds a bounded set, not every record.
	seen   map[uint64]time.Time
	newest time.Time // Time of the newest record sent
	send   func(*store.LogRecord) error
}

// round pages through the records from a little before the newest sent
// and sends those not sent yet.
func (f *follower) round(ctx context.Context) error {
	cursor := ""
	for {
		opts := []job.QueryOption{job.WithQueryInstanceID(f.id), job.WithQueryLimit(job.MaxPageSize), job.WithQueryCursor(cursor)}
		if len(f.levels) > 0 {
			opts = append(opts, job.WithQueryLevel(f.levels...))
		}
		if !f.newest.IsZero() {
			opts = append(opts, job.WithQuerySince(f.newest.Add(-followSkew)))
		}
		page, err := f.m.ListLogs(ctx, job.NewQuery(opts...))
		if err != nil {
			return toConnect(err)
		}
		for _, r := range page.Items {
			if _, ok := f.seen[r.Seq]; ok {
				continue
			}
			if err := f.send(r); err != nil {
				return err
			}
			f.seen[r.Seq] = r.Time
			if r.Time.After(f.newest) {
				f.newest = r.Time
			}
		}
		if page.Next == "" {
			f.forget()
			return nil
		}
		cursor = page.Next
	}
}

// forget drops the records the next round cannot read again: those older
// than its start, followSkew before the newest sent.
func (f *follower) forget() {
	from := f.newest.Add(-followSkew)
	for seq, at := range f.seen {
		if at.Before(from) {
			delete(f.seen, seq)
		}
	}
}

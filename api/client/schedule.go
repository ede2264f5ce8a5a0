package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// ScheduleOption configures one instance scheduled with ScheduleJob or
// ScheduleJobs. The options have the names (and meaning) of package job's
// schedule and policy options.
type ScheduleOption func(*jobkitv1.ScheduleRequest) error

// WithArguments sets the executor's arguments, sent as a JSON array. The
// server checks that they fit the executor of a kind some node registers
// (CodeInvalidArgument otherwise).
func WithArguments(args ...any) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		b, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("%w: WithArguments: %w", job.ErrInvalidArguments, err)
		}
		r.ArgsJson = string(b)
		return nil
	}
}

// WithArgumentsJSON sets the executor's arguments from their JSON
// encoding, which must be an array ("[1, 2]"); for arguments already
// encoded, as a command line has them.
func WithArgumentsJSON(args string) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		var a []json.RawMessage
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return fmt.Errorf("%w: arguments %q are not a JSON array (write them as [1, \"a\"]): %w", job.ErrInvalidArguments, args, err)
		}
		r.ArgsJson = args
		return nil
	}
}

// WithScheduleAt makes the instance due at t.
func WithScheduleAt(t time.Time) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if t.IsZero() {
			return errors.New("zero schedule time")
		}
		r.RunAt, r.Delay = timestamppb.New(t), nil
		return nil
	}
}

// WithScheduleAfter makes the instance due d after the server receives
// the call.
func WithScheduleAfter(d time.Duration) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if d < 0 {
			return fmt.Errorf("negative delay %v", d)
		}
		r.Delay, r.RunAt = durationpb.New(d), nil
		return nil
	}
}

// WithJitter delays the instance by a random duration in [0, d).
func WithJitter(d time.Duration) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if d < 0 {
			return fmt.Errorf("negative jitter %v", d)
		}
		r.Jitter = durationpb.New(d)
		return nil
	}
}

// WithIdempotencyKey makes a repeated call safe: the server derives the
// instance ID from kind and key, so a call repeated with the same key
// (after a timeout or a lost connection) returns the instance stored
// first and stores nothing.
func WithIdempotencyKey(key string) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if key == "" {
			return errors.New("empty idempotency key")
		}
		r.IdempotencyKey = key
		return nil
	}
}

// WithUniqueKey makes the instance unique by key for ttl (0: the kind's
// unique policy's TTL, else job.DefaultUniqueTTL): while another instance
// holds the key, ScheduleJob returns an error with CodeAlreadyExists
// (errors.Is job.ErrDuplicate).
func WithUniqueKey(key string, ttl time.Duration) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if key == "" {
			return errors.New("empty unique key")
		}
		if ttl < 0 {
			return fmt.Errorf("negative unique key TTL %v", ttl)
		}
		r.UniqueKey = key
		r.UniqueTtl = nil
		if ttl > 0 {
			r.UniqueTtl = durationpb.New(ttl)
		}
		return nil
	}
}

// WithPriority overrides the kind's priority: higher runs first.
func WithPriority(p job.Priority) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		v := int32(p)
		if job.Priority(v) != p {
			return fmt.Errorf("priority %d does not fit in 32 bits", p)
		}
		r.Priority = &v
		return nil
	}
}

// WithMaxRetries overrides how many times a failed attempt is retried: 0
// never, job.RetryForever without limit.
func WithMaxRetries(n int) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if n < job.RetryForever || n > job.MaxRetriesLimit {
			return fmt.Errorf("max retries %d; use 0 for none, up to job.MaxRetriesLimit (%d), or job.RetryForever", n, job.MaxRetriesLimit)
		}
		v := int32(n)
		r.MaxRetries = &v
		return nil
	}
}

// WithTimeout overrides the bound on each attempt; 0 means none.
func WithTimeout(d time.Duration) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if d < 0 {
			return fmt.Errorf("negative timeout %v", d)
		}
		r.Timeout = durationpb.New(d)
		return nil
	}
}

// WithQueue puts the instance in the named queue instead of its kind's.
func WithQueue(name string) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if name == "" {
			return errors.New("empty queue name")
		}
		r.Queue = name
		return nil
	}
}

// WithMetadata adds string pairs carried from scheduling to every attempt
// (such as a trace context); later pairs replace earlier ones of the same
// key.
func WithMetadata(md map[string]string) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if r.Metadata == nil {
			r.Metadata = make(map[string]string, len(md))
		}
		for k, v := range md {
			r.Metadata[k] = v
		}
		return nil
	}
}

// WithShards schedules a sharded task of n shards (1 to 1000; see
// job.WithShards): the call returns the task's parent, and
// WithQueryParent lists its shards.
func WithShards(n int) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if n < 1 || n > store.MaxShards {
			return fmt.Errorf("WithShards(%d): want 1 to %d shards", n, store.MaxShards)
		}
		r.Shards = int32(n)
		return nil
	}
}

// WithScheduleRequest merges a request message into the call, field by
// field as proto.Merge does (its kind is ignored): for callers that read
// requests from files, as jobctl schedule-batch does.
func WithScheduleRequest(m *jobkitv1.ScheduleRequest) ScheduleOption {
	return func(r *jobkitv1.ScheduleRequest) error {
		if m == nil {
			return errors.New("nil schedule request")
		}
		kind := r.Kind
		proto.Merge(r, m)
		r.Kind = kind
		return nil
	}
}

// buildSchedule returns the request of a schedule call.
func buildSchedule(kind string, opts []ScheduleOption) (*jobkitv1.ScheduleRequest, error) {
	if kind == "" {
		return nil, errors.New("empty kind")
	}
	r := &jobkitv1.ScheduleRequest{Kind: kind}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("nil ScheduleOption")
		}
		if err := o(r); err != nil {
			return nil, err
		}
	}
	if r.RunAt != nil && r.Delay != nil {
		return nil, errors.New("both a run time and a delay; give one of WithScheduleAt and WithScheduleAfter")
	}
	return r, nil
}

// ScheduleJob schedules one instance of kind, which some node must
// register or a stored definition must describe, and returns it as
// stored. Errors: CodeInvalidArgument for unfit arguments or options,
// CodeNotFound for an unknown kind, CodeAlreadyExists (job.ErrDuplicate)
// when a unique key is held.
func (c *Client) ScheduleJob(ctx context.Context, kind string, opts ...ScheduleOption) (*Instance, error) {
	op := fmt.Sprintf("schedule %q", kind)
	req, err := buildSchedule(kind, opts)
	if err != nil {
		return nil, invalid(op, err)
	}
	res, err := c.jobs.Schedule(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, wrapSchedule(op, err)
	}
	return newInstance(res.Msg.GetInstance()), nil
}

// BatchItem is one instance of a ScheduleJobs call.
type BatchItem struct {
	Kind    string
	Options []ScheduleOption
}

// BatchResult is the outcome of one BatchItem: the instance stored, or
// the item's error (an *Error with the item's code; nothing was stored
// for it, unless the error wraps job.ErrOutcomeUnknown: then it may have
// been, and the item is settled by repeating it with the same
// idempotency key).
type BatchResult struct {
	Instance *Instance
	Err      error
}

// ScheduleJobs schedules many instances in one call (at most 1000). Each
// item has its own result, in order; an item's error names it by its
// place counted from 1 ("item 2 of 3" is items[1]). The error is the
// call's, when no item was looked at (an option the client refused, a transport error).
func (c *Client) ScheduleJobs(ctx context.Context, items ...BatchItem) ([]BatchResult, error) {
	op := "schedule batch"
	req := &jobkitv1.ScheduleBatchRequest{Items: make([]*jobkitv1.ScheduleRequest, len(items))}
	for i, it := range items {
		r, err := buildSchedule(it.Kind, it.Options)
		if err != nil {
			return nil, invalid(op, fmt.Errorf("item %d of %d: %w", i+1, len(items), err))
		}
		req.Items[i] = r
	}
	res, err := c.jobs.ScheduleBatch(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, wrapSchedule(op, err)
	}
	if len(res.Msg.GetResults()) != len(items) {
		return nil, wrap(op, fmt.Errorf("the server answered %d results for %d items", len(res.Msg.GetResults()), len(items)))
	}
	out := make([]BatchResult, len(items))
	for i, r := range res.Msg.GetResults() {
		if e := r.GetError(); e != nil {
			out[i].Err = itemError(fmt.Sprintf("%s: item %d of %d (%s)", op, i+1, len(items), items[i].Kind), e)
			continue
		}
		out[i].Instance = newInstance(r.GetInstance())
	}
	return out, nil
}

// itemError turns a batch item's error into an *Error with its code.
func itemError(op string, e *jobkitv1.ItemError) error {
	var code connect.Code
	if err := code.UnmarshalText([]byte(e.GetCode())); err != nil {
		code = connect.CodeUnknown
	}
	ce := &Error{Op: op, err: connect.NewError(code, errors.New(e.GetMessage()))}
	if f := e.GetFix(); f != nil {
		if d, err := connect.NewErrorDetail(f); err == nil {
			ce.err.AddDetail(d)
		}
	}
	if e.GetOutcomeUnknown() {
		ce.also = job.ErrOutcomeUnknown
	}
	return ce
}

package job

import (
	"context"
	"fmt"
	"maps"
	"runtime/debug"
	"time"

	"github.com/jobkit/job/store"
)

// Middleware wraps what a Manager does for each instance: scheduling it
// (ScheduleJob) and running each attempt of it. It is the hook for
// cross-cutting concerns that need the request's or the attempt's
// context, such as tracing (the module github.com/jobkit/job/otel is one):
// Schedule can add Metadata from the scheduling ctx, which travels with
// the instance through the store to every attempt, on any node, and Run
// can derive the executor's ctx from it.
//
// Each method must call next exactly once (or return an error without
// calling it, which fails the call) and return what next returned, or an
// error of its own. Middleware is called on the goroutine of the call it
// wraps, concurrently for concurrent calls, so it must be safe for
// concurrent use. A panic in middleware is recovered like one in an
// executor: Run's becomes the attempt's error; Schedule's fails the call.
//
// Embed MiddlewareDefaults to implement only one of the methods.
type Middleware interface {
	// Schedule wraps one ScheduleJob call, after its options were applied
	// and before anything is stored. It may add or change info.Metadata
	// (what next stores is info.Metadata as it is when next is called);
	// the other fields are for reading. next stores the instance and
	// returns what ScheduleJob returns: the instance, or an error (with the
	// holder of a unique key for ErrDuplicate). Recurring ticks and
	// trigger firings are scheduled by the manager, not by a caller, and do
	// not pass through Schedule.
	Schedule(ctx context.Context, info *ScheduleInfo, next func(ctx context.Context) (*InstanceInfo, error)) (*InstanceInfo, error)
	// Run wraps one attempt of an instance whose kind is registered on
	// this manager, around the call of its executor. inst is the claimed
	// instance (its Info: Attempt counts this attempt; Metadata is what Schedule
	// stored). The ctx given to next is the executor's ctx, so a value put
	// in it (a span) is what the executor's context.Context carries.
	// next returns the attempt's error as the manager records it: nil on
	// success, the executor's error, or one wrapping ErrTimeout when the
	// attempt's timeout passed. Returning another error than next's
	// changes the attempt's outcome (a retry, or its final error).
	Run(ctx context.Context, inst Instance, next func(ctx context.Context) error) error
}

// MiddlewareDefaults implements both Middleware methods by calling next;
// embed it in a Middleware that needs only one of them.
type MiddlewareDefaults struct{}

// Schedule calls next with ctx.
func (MiddlewareDefaults) Schedule(ctx context.Context, _ *ScheduleInfo, next func(ctx context.Context) (*InstanceInfo, error)) (*InstanceInfo, error) {
	return next(ctx)
}

// Run calls next with ctx.
func (MiddlewareDefaults) Run(ctx context.Context, _ Instance, next func(ctx context.Context) error) error {
	return next(ctx)
}

// ScheduleInfo describes the instance a ScheduleJob call is about to
// store, for Middleware.Schedule.
type ScheduleInfo struct {
	// ID is the ID the instance will have. With WithIdempotencyKey a
	// repeated call returns the instance stored first, which has this ID.
	ID string
	// Kind, Queue and Priority are the instance's, after the options.
	Kind     string
	Queue    string
	Priority Priority
	// RunAt is when the instance is due.
	RunAt time.Time
	// Metadata is what the instance will carry (WithMetadata first),
	// never nil: middleware adds its pairs here. It is checked against
	// store.MaxMetadataPairs and store.MaxMetadataBytes when stored.
	Metadata map[string]string
}

// WithMiddleware adds middleware to the manager, in order: the first
// given is the outermost (it sees the call first and the result last).
// Several WithMiddleware options append to one list.
func WithMiddleware(mw ...Middleware) ManagerOption {
	return func(c *config) error {
		for i, x := range mw {
			if x == nil {
				return fmt.Errorf("%w: middleware %d is nil", ErrInvalidOption, i)
			}
		}
		c.middleware = append(c.middleware, mw...)
		return nil
	}
}

// WithMetadata adds the pair key=value to the instance's metadata: string
// pairs stored with the instance and handed to every attempt
// (InstanceInfo.Metadata), on whichever node runs it, for what belongs to the
// request rather than the arguments, such as a trace context, a request
// ID or a tenant. Given twice for one key, the last value wins. An empty
// key is an error; more than store.MaxMetadataPairs pairs or
// store.MaxMetadataBytes in all make ScheduleJob fail with
// ErrInvalidOption.
func WithMetadata(key, value string) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if key == "" {
			return fmt.Errorf("%w: metadata with an empty key (value %q)", ErrInvalidOption, value)
		}
		if c.metadata == nil {
			c.metadata = map[string]string{}
		}
		c.metadata[key] = value
		return nil
	})
}

// schedule stores rec, built by newRecord from c, through the manager's
// middleware; enqueue does the storing.
func (m *Manager) schedule(ctx context.Context, rec *store.Instance, enqueue func(ctx context.Context) (*InstanceInfo, error)) (*InstanceInfo, error) {
	mws := m.cfg.middleware
	if len(mws) == 0 {
		if err := checkMetadata(rec.Metadata); err != nil {
			return nil, fmt.Errorf("job: schedule %q: %w", rec.Kind, err)
		}
		return enqueue(ctx)
	}
	info := &ScheduleInfo{
		ID: rec.ID, Kind: rec.Kind, Queue: rec.Queue, Priority: Priority(rec.Priority), RunAt: rec.RunAt,
		Metadata: maps.Clone(rec.Metadata),
	}
	if info.Metadata == nil {
		info.Metadata = map[string]string{}
	}
	var call func(ctx context.Context, k int) (*InstanceInfo, error)
	call = func(ctx context.Context, k int) (inst *InstanceInfo, err error) {
		if k == len(mws) {
			rec.Metadata = store.CloneMetadata(info.Metadata)
			if err := checkMetadata(rec.Metadata); err != nil {
				return nil, fmt.Errorf("job: schedule %q: %w", rec.Kind, err)
			}
			return enqueue(ctx)
		}
		called := false
		defer func() {
			if r := recover(); r != nil {
				inst, err = nil, fmt.Errorf("%w: middleware %d (%T) panicked in Schedule: %v\n%s", ErrPanic, k, mws[k], r, debug.Stack())
			}
		}()
		inst, err = mws[k].Schedule(ctx, info, func(ctx context.Context) (*InstanceInfo, error) {
			if called {
				return nil, fmt.Errorf("%w: middleware %d (%T) called next twice in Schedule", ErrInvalidOption, k, mws[k])
			}
			called = true
			return call(ctx, k+1)
		})
		if !called && err == nil {
			return nil, fmt.Errorf("%w: middleware %d (%T) returned from Schedule without calling next or returning an error", ErrInvalidOption, k, mws[k])
		}
		return inst, err
	}
	return call(ctx, 0)
}

// checkMetadata checks md against the store's limits, as ScheduleJob's
// own error.
func checkMetadata(md map[string]string) error {
	if err := store.ValidateMetadata(md); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return nil
}

// runAttempt runs one attempt's executor call through the manager's
// middleware: call is the executor call, with ctx its ctx (the attempt's,
// with its timeout); finish turns what call returned into the error the
// manager records (the timeout's wrapping).
func (m *Manager) runAttempt(ctx context.Context, inst Instance, call func(ctx context.Context) ([]any, error), finish func(error) error) ([]any, error) {
	mws := m.cfg.middleware
	if len(mws) == 0 {
		results, err := call(ctx)
		return results, finish(err)
	}
	var results []any
	ran := false
	var next func(ctx context.Context, k int) error
	next = func(ctx context.Context, k int) (err error) {
		if k == len(mws) {
			if ran {
				return fmt.Errorf("%w: middleware called next twice in Run", ErrInvalidOption)
			}
			ran = true
			var err error
			results, err = call(ctx)
			return finish(err)
		}
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w: middleware %d (%T) panicked in Run: %v\n%s", ErrPanic, k, mws[k], r, debug.Stack())
			}
		}()
		called := false
		err = mws[k].Run(ctx, inst, func(ctx context.Context) error { called = true; return next(ctx, k+1) })
		if !called && err == nil {
			return fmt.Errorf("%w: middleware %d (%T) returned from Run without calling next or returning an error", ErrInvalidOption, k, mws[k])
		}
		return err
	}
	err := next(ctx, 0)
	if err != nil {
		results = nil
	}
	return results, err
}

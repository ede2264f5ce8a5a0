package job

import (
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
)

// ScheduleOption configures one instance scheduled with
// Manager.ScheduleJob, or each tick of a recurring job (WithCronSpec,
// WithInterval). The options of this package implement it; see the
// package documentation for how options are named.
type ScheduleOption interface {
	applySchedule(*scheduleConfig) error
}

// scheduleOption is a ScheduleOption that is nothing else.
type scheduleOption func(*scheduleConfig) error

func (o scheduleOption) applySchedule(c *scheduleConfig) error { return o(c) }

type scheduleConfig struct {
	policy      policyOverride
	args        []any
	runAt       time.Time
	after       time.Duration
	jitter      time.Duration
	uniqueKey   string
	idemKey     string
	uniqueTTL   time.Duration
	hasArgs     bool
	typedArgs   bool // the arguments came from a TypedJob's Schedule
	tickKey     string
	tickHoldTil time.Time
	metadata    map[string]string // WithMetadata
	limitKey    *string           // WithLimitKey (limitkey.go)
	shards      int               // WithShards (shards.go)
	deps        []string          // After (workflow.go)
	depFailure  *DepFailure       // WithDepFailure on a task (workflow.go)
	idRand      io.Reader         // the new ID's random bytes (ScheduleJobs: see batchRand); nil: uuid.NewV7's own
}

// workflowOnly reports an option only a workflow task takes.
func (c *scheduleConfig) workflowOnly() error {
	if len(c.deps) > 0 || c.depFailure != nil {
		return fmt.Errorf("%w: After or WithDepFailure outside a workflow; Add the task to a Workflow (NewWorkflow) and ScheduleWorkflow it", ErrInvalidOption)
	}
	return nil
}

// apply applies opts in order, stopping at the first error.
func (c *scheduleConfig) apply(opts []ScheduleOption) error {
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil schedule option", ErrInvalidOption)
		}
		if err := o.applySchedule(c); err != nil {
			return err
		}
	}
	return nil
}

// WithArguments sets the executor's arguments (those after any injected
// context.Context and Instance). They must fit the executor's parameters in
// count and type; ScheduleJob checks that before it stores anything.
func WithArguments(args ...any) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if c.typedArgs {
			return fmt.Errorf("%w: WithArguments on a typed job; pass the arguments to its Schedule instead", ErrInvalidOption)
		}
		c.args = args
		c.hasArgs = true
		return nil
	})
}

// WithScheduleAt makes the instance due at t.
func WithScheduleAt(t time.Time) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if t.IsZero() {
			return fmt.Errorf("%w: zero schedule time", ErrInvalidOption)
		}
		c.runAt = t
		return nil
	})
}

// WithScheduleAfter makes the instance due d from now.
func WithScheduleAfter(d time.Duration) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative delay %v", ErrInvalidOption, d)
		}
		c.after = d
		return nil
	})
}

// WithJitter delays the instance by a random duration in [0, d), spreading
// instances scheduled together.
func WithJitter(d time.Duration) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative jitter %v", ErrInvalidOption, d)
		}
		c.jitter = d
		return nil
	})
}

// WithIdempotencyKey makes a repeated ScheduleJob safe: the instance's ID
// is derived from the job's kind and key, so a call repeated with the same
// key (after a timeout, a canceled ctx or a lost connection, when the
// caller cannot know whether the first call stored the instance) returns
// the instance stored first, with a nil error, and stores nothing; its
// other options are not looked at again. The key holds as long as that
// instance is stored (until retention prunes it), unlike WithUniqueKey,
// which holds for a TTL and answers ErrDuplicate. Use a key that names the
// request, such as an order ID or a client-generated UUID.
func WithIdempotencyKey(key string) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if key == "" {
			return fmt.Errorf("%w: empty idempotency key", ErrInvalidOption)
		}
		c.idemKey = key
		return nil
	})
}

// idemSpace is the UUID namespace of instance IDs derived from
// idempotency keys.
var idemSpace = uuid.MustParse("5b0c5a6e-52f4-4d0e-9a0b-6a6f626b6974")

// idempotentID is the instance ID of a ScheduleJob of kind with
// idempotency key key: a name-based UUID, the same on every manager.
func idempotentID(kind, key string) uuid.UUID {
	return uuid.NewSHA1(idemSpace, []byte(kind+"\x00"+key))
}

// WithUniqueKey makes the instance unique by key for ttl (when 0, the TTL
// of the kind's unique policy if its definition has one, else
// DefaultUniqueTTL): while another instance holds the key, ScheduleJob
// returns that instance and an error wrapping ErrDuplicate. The key is held for the
// whole ttl, whatever happens to the instance.
func WithUniqueKey(key string, ttl time.Duration) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if key == "" {
			return fmt.Errorf("%w: empty unique key", ErrInvalidOption)
		}
		if ttl < 0 {
			return fmt.Errorf("%w: negative unique key TTL %v", ErrInvalidOption, ttl)
		}
		c.uniqueKey, c.uniqueTTL = key, ttl // 0: the kind's unique policy's TTL, else DefaultUniqueTTL
		return nil
	})
}

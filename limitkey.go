package job

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobkit/job/store"
)

// ErrKeyedLimitsUnsupported: the store does not enforce per-key
// concurrency limits (ConcurrencyLimit.PerKey; it is not a
// store.KeyedLimitEnforcer); memdbstore does.
var ErrKeyedLimitsUnsupported = errors.New("job: the store does not enforce per-key concurrency limits; use memdbstore, or a limit of the whole kind or queue (PerKey false)")

// WithLimitKey sets the instance's limit key: a concurrency limit with
// PerKey set counts the instances it matches per key, so at most its Max
// of those with this key run at once (a customer ID, a tenant, an
// account). It overrides the kind's WithLimitKeyFunc. The key is at most
// store.MaxLimitKeyBytes of valid UTF-8; "" is a key of its own. See
// doc/limits.md.
func WithLimitKey(key string) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		if err := store.ValidateLimitKey(key); err != nil {
			return fmt.Errorf("%w: WithLimitKey: %w", ErrInvalidOption, err)
		}
		c.limitKey = &key
		return nil
	})
}

// WithLimitKeyFunc computes the limit key of each instance of the kind
// scheduled without WithLimitKey from its arguments (JSON-encoded as an
// array, as stored): for example the customer ID of a charge. An error
// it returns fails the ScheduleJob (and a trigger's tick). See
// WithLimitKey.
func WithLimitKeyFunc(fn func(args []byte) (string, error)) JobOption {
	return jobOption(func(j *Job) error {
		if fn == nil {
			return fmt.Errorf("%w: WithLimitKeyFunc(nil); leave the option out for no limit key", ErrInvalidJob)
		}
		j.limitKey = fn
		return nil
	})
}

// setLimitKey sets rec.LimitKey from key (WithLimitKey) when given, else
// from the kind's WithLimitKeyFunc.
func (j *Job) setLimitKey(rec *store.Instance, key *string) error {
	switch {
	case key != nil:
		rec.LimitKey = *key
	case j.limitKey != nil:
		k, err := j.limitKey(rec.Args)
		if err != nil {
			return fmt.Errorf("job: the limit key of kind %s: %w", j.kind, err)
		}
		if err := store.ValidateLimitKey(k); err != nil {
			return fmt.Errorf("job: the limit key of kind %s from WithLimitKeyFunc: %w", j.kind, err)
		}
		rec.LimitKey = k
	}
	return nil
}

// explainKeyedLimit sets ex's reason to WaitConcurrencyLimit when the
// per-key limit l, which matches rec, is full for rec's key: "waiting for
// the concurrency limit of kind charge, key customer-42 (1/1 running)"
// ("the empty key" for an instance without one).
// It counts the running instances l matches with rec's key, reading the
// running instances of l's scope.
func (m *Manager) explainKeyedLimit(ctx context.Context, ex *WaitExplanation, rec *store.Instance, l store.ConcurrencyLimit) error {
	q := &store.Query{Kind: l.Kind, Queue: l.Queue, States: []store.State{store.Processing}, Limit: store.MaxPageSize}
	var running int64
	for {
		page, err := m.store.PageInstances(ctx, q)
		if err != nil {
			return fmt.Errorf("job: explain: the running instances of %s: %w", l.Scope(), err)
		}
		for _, in := range page.Instances {
			if in.LimitKey == rec.LimitKey && l.Matches(in.Kind, in.Queue) {
				running++
			}
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	if running >= int64(l.Max) {
		ex.Reason = WaitConcurrencyLimit
		key := "key " + rec.LimitKey
		if rec.LimitKey == "" {
			key = "the empty key"
		}
		ex.Message = fmt.Sprintf("waiting for the concurrency limit of %s, %s (%d/%d running)", l.Scope(), key, running, l.Max)
	}
	return nil
}

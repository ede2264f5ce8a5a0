package store

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// ConcurrencyLimit bounds how many instances run at once across the
// whole cluster (every node sharing the store's namespace): at most Max
// instances that match it are Processing at any moment. It matches an
// instance of Kind (every kind when empty) in Queue (every queue when
// empty); both empty bound every instance of the namespace.
//
// A limit is enforced inside the atomic Claim (see ClaimParams.Limits),
// counting the Processing instances the store counts already for
// Inspector.Counts: an attempt holds its slot from its claim until it
// leaves Processing, whichever way it leaves (Finish with any outcome, a
// hand-back, Rescue of an expired lease or of a dead node's attempt, an
// admin delete), so a slot is never leaked and no second call releases
// it. A repeated Claim (ClaimSeq) claims nothing new and so takes no
// second slot.
type ConcurrencyLimit struct {
	// Kind is the kind the limit bounds; empty: every kind.
	Kind string `json:"kind,omitempty"`
	// Queue is the queue the limit bounds; empty: every queue.
	Queue string `json:"queue,omitempty"`
	// Max is how many matching instances may run at once; 0 lets none
	// start (those running go on to their end).
	Max int `json:"max"`
	// PerKey applies Max to each limit key (Instance.LimitKey) apart: at
	// most Max matching instances with the same key run at once, and a
	// key at its limit holds back only its own instances (a claim skips
	// them and takes the next eligible instance in claim order). Max 1
	// runs each key's instances one at a time, in claim order. Only a
	// store that is a KeyedLimitEnforcer enforces it.
	PerKey bool `json:"per_key,omitempty"`
}

// Matches reports whether the limit bounds instances of kind in queue.
func (l ConcurrencyLimit) Matches(kind, queue string) bool {
	return (l.Kind == "" || l.Kind == kind) && (l.Queue == "" || l.Queue == queue)
}

// Scope names what the limit bounds: "kind email", "queue default",
// "kind email in queue default" or "every instance".
func (l ConcurrencyLimit) Scope() string {
	switch {
	case l.Kind != "" && l.Queue != "":
		return fmt.Sprintf("kind %s in queue %s", l.Kind, l.Queue)
	case l.Kind != "":
		return "kind " + l.Kind
	case l.Queue != "":
		return "queue " + l.Queue
	}
	return "every instance"
}

// String names the limit as messages show it: "kind email (at most 5
// running)".
func (l ConcurrencyLimit) String() string {
	if l.PerKey {
		return fmt.Sprintf("%s (at most %d running per key)", l.Scope(), l.Max)
	}
	return fmt.Sprintf("%s (at most %d running)", l.Scope(), l.Max)
}

// MaxConcurrencyLimits bounds ClaimParams.Limits: each limit costs a
// claim a look at the counts of the pairs (queue, kind) it matches.
const MaxConcurrencyLimits = 256

// Validate reports an unusable limit as ErrInvalid.
func (l ConcurrencyLimit) Validate() error {
	if l.Max < 0 {
		return fmt.Errorf("%w: concurrency limit of %s: max %d; want 0 or more (0 lets none start)", ErrInvalid, l.Scope(), l.Max)
	}
	return nil
}

// validateLimits checks ClaimParams.Limits: each valid, at most
// MaxConcurrencyLimits, no two for the same kind, queue and PerKey (a
// limit of a whole kind and one per key of it may go together).
func validateLimits(ls []ConcurrencyLimit) error {
	if len(ls) > MaxConcurrencyLimits {
		return fmt.Errorf("%w: claim with %d concurrency limits; at most %d", ErrInvalid, len(ls), MaxConcurrencyLimits)
	}
	for i, l := range ls {
		if err := l.Validate(); err != nil {
			return err
		}
		if slices.ContainsFunc(ls[:i], func(o ConcurrencyLimit) bool { return o.Kind == l.Kind && o.Queue == l.Queue && o.PerKey == l.PerKey }) {
			return fmt.Errorf("%w: claim names the concurrency limit of %s twice; keep one", ErrInvalid, l.Scope())
		}
	}
	return nil
}

// LimitEnforcer is an optional capability: a store whose Claim enforces
// ClaimParams.Limits. A store without it ignores them, so the engine
// refuses to set a limit on it (job.ErrLimitsUnsupported) rather than
// let a limit silently not hold.
type LimitEnforcer interface {
	// EnforcesConcurrencyLimits reports whether Claim enforces
	// ClaimParams.Limits (a wrapper reports what the store it wraps does).
	EnforcesConcurrencyLimits() bool
}

// EnforcesLimits reports whether s enforces ClaimParams.Limits.
func EnforcesLimits(s Store) bool {
	e, ok := s.(LimitEnforcer)
	return ok && e.EnforcesConcurrencyLimits()
}

// MaxLimitKeyBytes bounds Instance.LimitKey.
const MaxLimitKeyBytes = 256

// ValidateLimitKey checks an Instance.LimitKey: at most MaxLimitKeyBytes,
// valid UTF-8.
func ValidateLimitKey(k string) error {
	switch {
	case len(k) > MaxLimitKeyBytes:
		return fmt.Errorf("%w: limit key of %d bytes, more than MaxLimitKeyBytes (%d); use a shorter key (a hash of it)", ErrInvalid, len(k), MaxLimitKeyBytes)
	case !utf8.ValidString(k):
		return fmt.Errorf("%w: limit key %q is not valid UTF-8; encode it (hex, base64)", ErrInvalid, k)
	}
	return nil
}

// KeyedLimitEnforcer is an optional capability: a store whose Claim
// enforces the per-key concurrency limits of ClaimParams.Limits
// (ConcurrencyLimit.PerKey) and keeps Instance.LimitKey. A store without
// it must not be passed a per-key limit: the engine refuses to set one
// (job.ErrKeyedLimitsUnsupported).
type KeyedLimitEnforcer interface {
	// EnforcesKeyedLimits reports whether Claim enforces per-key
	// concurrency limits (a wrapper reports what the store it wraps does).
	EnforcesKeyedLimits() bool
}

// EnforcesKeyedLimits reports whether s enforces per-key concurrency
// limits.
func EnforcesKeyedLimits(s Store) bool {
	e, ok := s.(KeyedLimitEnforcer)
	return ok && e.EnforcesKeyedLimits() && EnforcesLimits(s)
}

// HasPerKey reports whether any of ls is a per-key limit.
func HasPerKey(ls []ConcurrencyLimit) bool {
	return slices.ContainsFunc(ls, func(l ConcurrencyLimit) bool { return l.PerKey })
}

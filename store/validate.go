package store

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// MaxRetriesLimit is the largest Instance.MaxRetries a store keeps; more is
// ErrInvalid from Enqueue (a negative value retries forever). Stores may
// keep the retry limit and the attempt count in 32 bits.
const MaxRetriesLimit = math.MaxInt32

// Limits on Instance.Metadata: more is ErrInvalid from Enqueue. Metadata
// rides along with every claim, so it is meant for a few short strings (a
// trace context is two), not for payloads: put those in the arguments.
const (
	// MaxMetadataPairs is the most pairs one instance may carry.
	MaxMetadataPairs = 32
	// MaxMetadataBytes bounds the sum of the lengths of an instance's
	// metadata keys and values.
	MaxMetadataBytes = 4096
)

// Validate checks the parameters every plugin requires.
func (p *ClaimParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil claim parameters", ErrInvalid)
	case p.Queue == "":
		return fmt.Errorf("%w: claim without a queue", ErrInvalid)
	case p.Owner == "":
		return fmt.Errorf("%w: claim without an owner", ErrInvalid)
	case p.Limit <= 0:
		return fmt.Errorf("%w: claim limit %d, want > 0", ErrInvalid, p.Limit)
	case !p.LeaseUntil.After(p.Now):
		return fmt.Errorf("%w: lease deadline %v not after now %v", ErrInvalid, p.LeaseUntil, p.Now)
	}
	for _, k := range p.Kinds {
		if k == "" {
			return fmt.Errorf("%w: claim names an empty kind; leave Kinds empty to take any kind", ErrInvalid)
		}
	}
	if err := ValidateLabels(p.Labels); err != nil {
		return fmt.Errorf("claimer: %w", err)
	}
	if err := validateLimits(p.Limits); err != nil {
		return err
	}
	return validateRateLimits(p.RateLimits)
}

// Validate checks one instance handed to Enqueue.
func (in *Instance) Validate() error {
	switch {
	case in == nil:
		return fmt.Errorf("%w: nil instance", ErrInvalid)
	case in.ID == "":
		return fmt.Errorf("%w: instance without an ID", ErrInvalid)
	case in.Kind == "":
		return fmt.Errorf("%w: instance %s without a kind", ErrInvalid, in.ID)
	case in.Queue == "":
		return fmt.Errorf("%w: instance %s without a queue", ErrInvalid, in.ID)
	case in.CreatedAt.IsZero():
		return fmt.Errorf("%w: instance %s without a creation time", ErrInvalid, in.ID)
	case in.MaxRetries > MaxRetriesLimit:
		return fmt.Errorf("%w: instance %s allows %d retries, more than MaxRetriesLimit (%d); retry forever with a negative value", ErrInvalid, in.ID, in.MaxRetries, MaxRetriesLimit)
	case in.UniqueKey != "" && in.UniqueUntil.IsZero():
		return fmt.Errorf("%w: instance %s has unique key %q without an expiry", ErrInvalid, in.ID, in.UniqueKey)
	}
	if err := ValidateLimitKey(in.LimitKey); err != nil {
		return fmt.Errorf("instance %s: %w", in.ID, err)
	}
	if err := in.validateShard(); err != nil {
		return err
	}
	if err := in.validateTask(); err != nil {
		return err
	}
	if err := ValidateLabelRequirements(in.Labels); err != nil {
		return fmt.Errorf("instance %s: %w", in.ID, err)
	}
	if err := ValidateMetadata(in.Metadata); err != nil {
		return fmt.Errorf("instance %s: %w", in.ID, err)
	}
	return nil
}

// ValidateMetadata checks md against the limits on Instance.Metadata: at
// most MaxMetadataPairs pairs, MaxMetadataBytes of keys and values in all,
// no empty key, all valid UTF-8 (so every store, JSON included, keeps them
// byte for byte).
func ValidateMetadata(md map[string]string) error {
	if len(md) > MaxMetadataPairs {
		return fmt.Errorf("%w: %d metadata pairs, more than MaxMetadataPairs (%d); carry fewer, or put data in the arguments", ErrInvalid, len(md), MaxMetadataPairs)
	}
	n := 0
	for k, v := range md {
		switch {
		case k == "":
			return fmt.Errorf("%w: metadata with an empty key (value %q); name every pair", ErrInvalid, v)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return fmt.Errorf("%w: metadata pair %q is not valid UTF-8; encode binary values (base64)", ErrInvalid, k)
		}
		n += len(k) + len(v)
	}
	if n > MaxMetadataBytes {
		return fmt.Errorf("%w: metadata of %d bytes, more than MaxMetadataBytes (%d); carry less, or put data in the arguments", ErrInvalid, n, MaxMetadataBytes)
	}
	return nil
}

// Validate checks one outcome handed to Finish.
func (o *Outcome) Validate() error {
	switch {
	case o.ID == "":
		return fmt.Errorf("%w: outcome without an instance ID", ErrInvalid)
	case o.State == Scheduled:
		if o.RunAt.IsZero() {
			return fmt.Errorf("%w: outcome for %s reschedules without a run time", ErrInvalid, o.ID)
		}
	case !o.State.Final():
		return fmt.Errorf("%w: outcome for %s has state %v, want a final state or scheduled", ErrInvalid, o.ID, o.State)
	}
	if o.Release && o.State != Scheduled {
		return fmt.Errorf("%w: outcome for %s releases into state %v, want scheduled", ErrInvalid, o.ID, o.State)
	}
	return nil
}

// Validate checks the parameters of an Enqueue: not nil, and every
// instance valid (Instance.Validate). The first invalid instance's error
// is returned, so the call is refused as a whole.
func (p *EnqueueParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: nil enqueue parameters", ErrInvalid)
	}
	for _, in := range p.Instances {
		if err := in.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks the parameters of a Renew: an owner, and an instance ID
// in every lease.
func (p *RenewParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil renew parameters", ErrInvalid)
	case p.Owner == "":
		return fmt.Errorf("%w: renew without an owner", ErrInvalid)
	}
	for _, l := range p.Leases {
		if l.ID == "" {
			return fmt.Errorf("%w: renew of a lease without an instance ID", ErrInvalid)
		}
	}
	return nil
}

// Validate checks the parameters of a Finish: an owner. The outcomes are
// checked one by one (Outcome.Validate): a store may refuse the call for
// an invalid outcome, or report ErrInvalid in that outcome's result.
func (p *FinishParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil finish parameters", ErrInvalid)
	case p.Owner == "":
		return fmt.Errorf("%w: finish without an owner", ErrInvalid)
	}
	return nil
}

// Validate checks the parameters of a Rescue: a positive limit.
func (p *RescueParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil rescue parameters", ErrInvalid)
	case p.Limit <= 0:
		return fmt.Errorf("%w: rescue limit %d, want > 0", ErrInvalid, p.Limit)
	}
	return nil
}

// Validate checks the parameters of a Cancel: an instance ID.
func (p *CancelParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil cancel parameters", ErrInvalid)
	case p.ID == "":
		return fmt.Errorf("%w: cancel without an instance ID", ErrInvalid)
	}
	return nil
}

// Validate checks the parameters of a Prune: KeepFinished and Limit not
// negative.
func (p *PruneParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil prune parameters", ErrInvalid)
	case p.KeepFinished < 0 || p.Limit < 0:
		return fmt.Errorf("%w: prune with KeepFinished %d, Limit %d; want >= 0", ErrInvalid, p.KeepFinished, p.Limit)
	}
	return nil
}

// Validate checks one log record handed to AppendLogs: not nil, with an
// instance ID.
func (l *LogRecord) Validate() error {
	if l == nil || l.InstanceID == "" {
		return fmt.Errorf("%w: log record without an instance ID", ErrInvalid)
	}
	return nil
}

// Validate checks the parameters of a Counts: not nil (an empty
// CountsParams counts every group).
func (p *CountsParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: nil counts parameters; pass &store.CountsParams{} for every group", ErrInvalid)
	}
	return nil
}

// Validate checks the parameters of a Lag: Now set.
func (p *LagParams) Validate() error {
	if p == nil || p.Now.IsZero() {
		return fmt.Errorf("%w: lag without Now; set LagParams.Now to the time readiness is judged at", ErrInvalid)
	}
	return nil
}

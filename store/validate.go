package store

import (
	"fmt"
	"math"
)

// MaxRetriesLimit is the largest Instance.MaxRetries a store keeps; more is
// ErrInvalid from Enqueue (a negative value retries forever). Stores may
// keep the retry limit and the attempt count in 32 bits.
const MaxRetriesLimit = math.MaxInt32

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
	return nil
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
	if err := ValidateLabels(in.Labels); err != nil {
		return fmt.Errorf("instance %s: %w", in.ID, err)
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

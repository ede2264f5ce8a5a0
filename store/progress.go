package store

import (
	"context"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// MaxProgressMessage bounds ProgressParams.Message in bytes: a progress
// message is a short status line ("3 of 7 files"), not a log.
const MaxProgressMessage = 200

// Progress keeps the progress a running attempt reports through
// job.Instance: a fraction done and a short message. It is kept beside the
// instance, not in it, so Enqueue, Claim and the lookups of instances never
// read or write it; a store removes it with the instance (Prune, Delete).
type Progress interface {
	// SetProgress stores p's progress of instance p.ID, replacing what was
	// stored, only while the instance is Processing in attempt p.Attempt
	// under a lease owned by p.Owner. Otherwise nothing changes and the
	// error wraps ErrLeaseLost (ErrNotFound when there is no such
	// instance). Parameters failing ProgressParams.Validate are ErrInvalid.
	SetProgress(ctx context.Context, p *ProgressParams) error
	// LookupProgress returns the stored progress of the instances ids, in
	// the order of ids; an instance without progress (or not stored) is
	// left out. The progress of an attempt stays after it ends, until the
	// instance is removed or a later attempt reports its own.
	LookupProgress(ctx context.Context, ids []string) ([]*ProgressRecord, error)
}

// ProgressParams is the argument of Progress.SetProgress.
type ProgressParams struct {
	ID      string
	Owner   string // the lease owner the attempt must still belong to
	Attempt int    // the attempt reporting, as Claim numbered it
	// Fraction done, in [0, 1].
	Fraction float64
	// Message is a short status line, at most MaxProgressMessage bytes of
	// UTF-8.
	Message string
	// Now is when the progress was reported; it is stored as its time.
	Now time.Time
}

// Validate reports, wrapping ErrInvalid, what makes p unusable: a missing
// ID, owner or attempt, a fraction outside [0, 1] (or NaN), a message too
// long or not UTF-8.
func (p *ProgressParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: SetProgress without parameters", ErrInvalid)
	case p.ID == "" || p.Owner == "":
		return fmt.Errorf("%w: SetProgress needs the instance ID and the lease owner", ErrInvalid)
	case p.Attempt < 1:
		return fmt.Errorf("%w: SetProgress of instance %s: attempt %d, want the running attempt (1 or more)", ErrInvalid, p.ID, p.Attempt)
	case math.IsNaN(p.Fraction) || p.Fraction < 0 || p.Fraction > 1:
		return fmt.Errorf("%w: SetProgress of instance %s: fraction %v is outside [0, 1]", ErrInvalid, p.ID, p.Fraction)
	case len(p.Message) > MaxProgressMessage:
		return fmt.Errorf("%w: SetProgress of instance %s: message of %d bytes, want at most %d (shorten it; write details to the log)", ErrInvalid, p.ID, len(p.Message), MaxProgressMessage)
	case !utf8.ValidString(p.Message):
		return fmt.Errorf("%w: SetProgress of instance %s: message is not UTF-8", ErrInvalid, p.ID)
	}
	return nil
}

// ProgressRecord is the stored progress of one instance.
type ProgressRecord struct {
	InstanceID string
	Attempt    int // the attempt that reported it
	Fraction   float64
	Message    string
	Time       time.Time // ProgressParams.Now of the report
}

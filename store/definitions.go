package store

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Definitions keeps job definitions: a kind's policy as data (queue,
// priority, retries, backoff, timeout, unique policy, required labels), so
// any process sharing the store can schedule the kind without the Go
// function that runs it. A definition is keyed by its kind; every change
// is one atomic compare-and-set on its Version.
type Definitions interface {
	// PutDefinition creates or replaces the definition of p.Definition.Kind
	// if p.IfVersion holds (see PutDefinitionParams), and returns it as
	// stored: Version one above the replaced one (1 for a new one),
	// CreatedAt kept from the replaced one (p.Now for a new one), UpdatedAt
	// p.Now. A definition that fails Validate is ErrInvalid and nothing is
	// stored; a version that does not hold is ErrConflict and nothing
	// changes.
	PutDefinition(ctx context.Context, p *PutDefinitionParams) (*Definition, error)
	// GetDefinition returns the definition of kind, or ErrNotFound.
	GetDefinition(ctx context.Context, kind string) (*Definition, error)
	// ListDefinitions returns a page of definitions sorted by kind (byte
	// order), those after p.After, at most p.Limit of them (see
	// ListDefinitionsParams). The next page starts after the last kind
	// returned; a page shorter than its limit is the last.
	ListDefinitions(ctx context.Context, p *ListDefinitionsParams) ([]*Definition, error)
	// DeleteDefinition removes the definition of p.Kind: ErrNotFound when
	// there is none, ErrConflict when p.IfVersion is set and is not its
	// version. Instances already scheduled are not touched.
	DeleteDefinition(ctx context.Context, p *DeleteDefinitionParams) error
}

// AnyVersion, as PutDefinitionParams.IfVersion, creates or replaces the
// definition whatever its version.
const AnyVersion int64 = -1

// Limits of definitions and their listing.
const (
	// DefaultDefinitionsPage is the page size of a ListDefinitions whose
	// Limit is 0.
	DefaultDefinitionsPage = 100
	// MaxDefinitionsPage is the largest ListDefinitionsParams.Limit.
	MaxDefinitionsPage = 1000
	// MaxKindBytes bounds a definition's kind.
	MaxKindBytes = 256
	// MaxLabels bounds how many labels a definition requires.
	MaxLabels = 64
	// MaxLabelBytes bounds one label.
	MaxLabelBytes = 256
	// MaxDescriptionBytes bounds a definition's description.
	MaxDescriptionBytes = 4096
)

// PutDefinitionParams is the argument of Definitions.PutDefinition.
type PutDefinitionParams struct {
	// Definition to store. Its Version, CreatedAt and UpdatedAt are set by
	// the store; the values given are ignored.
	Definition *Definition
	// IfVersion is the compare-and-set condition: 0 stores only when no
	// definition of the kind exists (create), N > 0 only when the stored
	// one is at version N (update what was read), AnyVersion always.
	IfVersion int64
	// Now is the time recorded as UpdatedAt (and CreatedAt of a new one).
	Now time.Time
}

// Validate checks the parameters every plugin requires, the definition
// included.
func (p *PutDefinitionParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil put-definition parameters", ErrInvalid)
	case p.Definition == nil:
		return fmt.Errorf("%w: put-definition without a definition", ErrInvalid)
	case p.IfVersion < AnyVersion:
		return fmt.Errorf("%w: definition %q: IfVersion %d; want 0 (create), the version read (update) or store.AnyVersion", ErrInvalid, p.Definition.Kind, p.IfVersion)
	case p.Now.IsZero():
		return fmt.Errorf("%w: definition %q: put without a time (Now)", ErrInvalid, p.Definition.Kind)
	}
	return p.Definition.Validate()
}

// ListDefinitionsParams is the argument of Definitions.ListDefinitions.
type ListDefinitionsParams struct {
	// After is the cursor: only kinds that sort after it are listed. ""
	// starts at the first.
	After string
	// Limit is the page size: 0 means DefaultDefinitionsPage; at most
	// MaxDefinitionsPage.
	Limit int
}

// Validate checks the parameters and returns the page size to use.
func (p *ListDefinitionsParams) Validate() (int, error) {
	switch {
	case p == nil:
		return DefaultDefinitionsPage, nil
	case p.Limit < 0 || p.Limit > MaxDefinitionsPage:
		return 0, fmt.Errorf("%w: list definitions with limit %d; want 0 (the default, %d) up to %d, and page with After", ErrInvalid, p.Limit, DefaultDefinitionsPage, MaxDefinitionsPage)
	case p.Limit == 0:
		return DefaultDefinitionsPage, nil
	}
	return p.Limit, nil
}

// DeleteDefinitionParams is the argument of Definitions.DeleteDefinition.
type DeleteDefinitionParams struct {
	Kind string
	// IfVersion, when not 0, deletes only the definition at that version.
	IfVersion int64
}

// Validate checks the parameters every plugin requires.
func (p *DeleteDefinitionParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil delete-definition parameters", ErrInvalid)
	case p.Kind == "":
		return fmt.Errorf("%w: delete a definition without a kind", ErrInvalid)
	case p.IfVersion < 0:
		return fmt.Errorf("%w: delete definition %q with IfVersion %d; want 0 (any version) or the version read", ErrInvalid, p.Kind, p.IfVersion)
	}
	return nil
}

// DefinitionNotFound is the error of a lookup of a kind that has no
// definition; it wraps ErrNotFound.
func DefinitionNotFound(kind string) error {
	return fmt.Errorf("%w: no definition of kind %q; store one with PutDefinition", ErrNotFound, kind)
}

// VersionConflict is the error of a compare-and-set on the definition of
// kind that wanted version want (0: absent) and found have (0: absent); it
// wraps ErrConflict.
func VersionConflict(kind string, want, have int64) error {
	switch {
	case have == 0:
		return fmt.Errorf("%w: definition %q does not exist (wanted version %d); create it with IfVersion 0", ErrConflict, kind, want)
	case want == 0:
		return fmt.Errorf("%w: definition %q exists already (version %d); update it with IfVersion %d", ErrConflict, kind, have, have)
	}
	return fmt.Errorf("%w: definition %q is at version %d, not %d (changed by someone else); read it again and retry", ErrConflict, kind, have, want)
}

// Definition is a job kind's policy as data. The engine builds the
// instances of a kind it has no registered job for from it.
type Definition struct {
	// Kind names the job; the key of the definition.
	Kind string `json:"kind"`
	// Queue the instances wait in. Required.
	Queue string `json:"queue"`
	// Priority of the instances: higher runs first.
	Priority int `json:"priority,omitempty"`
	// MaxRetries is how many times a failed attempt is retried: 0 never,
	// -1 forever, at most MaxRetriesLimit.
	MaxRetries int `json:"max_retries"`
	// Backoff is the wait before each retry.
	Backoff Backoff `json:"backoff,omitzero"`
	// Timeout bounds one attempt; 0 means none.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Unique, when set, makes scheduled instances unique (see
	// UniquePolicy); nil means not unique.
	Unique *UniquePolicy `json:"unique,omitempty"`
	// Labels are what the node that runs an instance must satisfy: label
	// requirements such as "region=eu", "region=eu|us", "gpu" or "!gpu"
	// (see LabelRequirement for every form), no duplicates.
	Labels []string `json:"labels,omitempty"`
	// Description is free text for people.
	Description string `json:"description,omitempty"`
	// Executor, when set, names the built-in executor type that runs the
	// kind (webhook, command, wasm) and its configuration, so managers
	// that enable the type run it with no Go code (issue 22). Nil: the
	// kind is run by a Go function registered under it.
	Executor *ExecutorSpec `json:"executor,omitempty"`
	// ConvertArguments: the managers that run the kind convert an
	// argument that does not decode into its parameter's type as it is
	// (a string "42" for an int, JSON text for a struct), the way the
	// root package's WithArgumentConversion describes. False: arguments
	// must decode as they are.
	ConvertArguments bool `json:"convert_arguments,omitempty"`

	// Version is assigned by the store: 1 when created, one more on each
	// update. PutDefinitionParams.IfVersion and
	// DeleteDefinitionParams.IfVersion compare against it.
	Version int64 `json:"version,omitempty"`
	// CreatedAt and UpdatedAt are set by the store from PutDefinition's
	// Now.
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// BackoffKind names how the wait before a retry grows.
type BackoffKind string

// The backoff kinds.
const (
	// BackoffDefault leaves the wait to the engine's default (exponential
	// from one second to ten minutes, half of each wait random). Base,
	// Limit and Jitter must be zero.
	BackoffDefault BackoffKind = ""
	// BackoffConstant waits Base before every retry.
	BackoffConstant BackoffKind = "constant"
	// BackoffExponential waits Base after the first failure and doubles
	// the wait after each further one, up to Limit.
	BackoffExponential BackoffKind = "exponential"
)

// Backoff is the wait before each retry, as data.
type Backoff struct {
	Kind BackoffKind `json:"kind,omitempty"`
	// Base is the wait of a constant backoff, the first wait of an
	// exponential one.
	Base time.Duration `json:"base,omitempty"`
	// Limit is the longest wait of an exponential backoff (at least Base);
	// 0 for a constant one.
	Limit time.Duration `json:"limit,omitempty"`
	// Jitter is the fraction of each wait that is random, in [0, 1]: 0
	// none, 0.5 "equal jitter" (a wait d becomes d/2 plus a random part of
	// d/2), 1 a random wait up to d.
	Jitter float64 `json:"jitter,omitempty"`
}

// Validate reports an unusable backoff as ErrInvalid.
func (b Backoff) Validate() error {
	switch b.Kind {
	case BackoffDefault:
		if b != (Backoff{}) {
			return fmt.Errorf("%w: backoff without a kind but with Base, Limit or Jitter; set Kind to %q or %q", ErrInvalid, BackoffConstant, BackoffExponential)
		}
		return nil
	case BackoffConstant:
		if b.Base < 0 {
			return fmt.Errorf("%w: constant backoff with a negative Base %v; want 0 or more", ErrInvalid, b.Base)
		}
		if b.Limit != 0 {
			return fmt.Errorf("%w: constant backoff with a Limit (%v); leave Limit 0 or use kind %q", ErrInvalid, b.Limit, BackoffExponential)
		}
	case BackoffExponential:
		if b.Base <= 0 {
			return fmt.Errorf("%w: exponential backoff with Base %v; want the first wait, more than 0", ErrInvalid, b.Base)
		}
		if b.Limit < b.Base {
			return fmt.Errorf("%w: exponential backoff with Limit %v below Base %v; want the longest wait, at least Base", ErrInvalid, b.Limit, b.Base)
		}
	default:
		return fmt.Errorf("%w: unknown backoff kind %q; want %q or %q (or empty for the default)", ErrInvalid, b.Kind, BackoffConstant, BackoffExponential)
	}
	if math.IsNaN(b.Jitter) || b.Jitter < 0 || b.Jitter > 1 {
		return fmt.Errorf("%w: backoff jitter %v; want a fraction from 0 (none) to 1 (all of each wait random)", ErrInvalid, b.Jitter)
	}
	return nil
}

// UniqueBy says what makes two instances of a kind the same under a
// UniquePolicy.
type UniqueBy string

// The unique policies.
const (
	// UniqueByArgs: instances of the kind with the same arguments (the
	// same encoded JSON) are the same; a schedule that gives a unique key
	// of its own uses that key instead.
	UniqueByArgs UniqueBy = "args"
	// UniqueByKey: instances scheduled with the same unique key are the
	// same, as with a key given at schedule time; a schedule without a key
	// is not unique. The policy sets the TTL of the keys.
	UniqueByKey UniqueBy = "key"
)

// UniquePolicy makes the instances of a kind unique: while an instance
// holds a key (for TTL after it was scheduled), scheduling the same one
// again returns ErrDuplicate and the holder.
type UniquePolicy struct {
	By  UniqueBy      `json:"by"`
	TTL time.Duration `json:"ttl"`
}

// Validate reports an unusable policy as ErrInvalid.
func (u *UniquePolicy) Validate() error {
	if u == nil {
		return nil
	}
	if u.By != UniqueByArgs && u.By != UniqueByKey {
		return fmt.Errorf("%w: unique policy by %q; want %q or %q", ErrInvalid, u.By, UniqueByArgs, UniqueByKey)
	}
	if u.TTL <= 0 {
		return fmt.Errorf("%w: unique policy with TTL %v; want how long a key is held, more than 0", ErrInvalid, u.TTL)
	}
	return nil
}

// Validate reports a definition a store must not keep as ErrInvalid, with
// a message that names the field and the fix.
func (d *Definition) Validate() error {
	if d == nil {
		return fmt.Errorf("%w: nil definition", ErrInvalid)
	}
	if err := ValidateKind(d.Kind); err != nil {
		return err
	}
	wrap := func(err error) error { return fmt.Errorf("definition %q: %w", d.Kind, err) }
	switch {
	case d.Queue == "":
		return wrap(fmt.Errorf("%w: no queue; set Queue (the engine's default queue is \"default\")", ErrInvalid))
	case d.MaxRetries < -1:
		return wrap(fmt.Errorf("%w: max retries %d; want 0 (none), a positive count, or -1 (forever)", ErrInvalid, d.MaxRetries))
	case d.MaxRetries > MaxRetriesLimit:
		return wrap(fmt.Errorf("%w: max retries %d is more than MaxRetriesLimit (%d); use -1 to retry forever", ErrInvalid, d.MaxRetries, MaxRetriesLimit))
	case d.Timeout < 0:
		return wrap(fmt.Errorf("%w: negative timeout %v; want 0 (none) or more", ErrInvalid, d.Timeout))
	case len(d.Description) > MaxDescriptionBytes:
		return wrap(fmt.Errorf("%w: description of %d bytes; keep it within %d", ErrInvalid, len(d.Description), MaxDescriptionBytes))
	case len(d.Labels) > MaxLabels:
		return wrap(fmt.Errorf("%w: %d labels; at most %d", ErrInvalid, len(d.Labels), MaxLabels))
	}
	if err := d.Backoff.Validate(); err != nil {
		return wrap(err)
	}
	if err := d.Unique.Validate(); err != nil {
		return wrap(err)
	}
	if err := d.Executor.Validate(); err != nil {
		return wrap(err)
	}
	seen := make(map[string]bool, len(d.Labels))
	for _, l := range d.Labels {
		if err := ValidateLabelRequirement(l); err != nil {
			return wrap(err)
		}
		if seen[l] {
			return wrap(fmt.Errorf("%w: label %q given twice; list each once", ErrInvalid, l))
		}
		seen[l] = true
	}
	return nil
}

// ValidateKind reports an unusable kind as ErrInvalid: empty, longer than
// MaxKindBytes, not UTF-8, or holding control characters.
func ValidateKind(kind string) error {
	switch {
	case kind == "":
		return fmt.Errorf("%w: definition without a kind; set Kind to the name jobs are scheduled by", ErrInvalid)
	case len(kind) > MaxKindBytes:
		return fmt.Errorf("%w: kind of %d bytes; keep it within %d", ErrInvalid, len(kind), MaxKindBytes)
	case !utf8.ValidString(kind) || strings.ContainsFunc(kind, unicode.IsControl):
		return fmt.Errorf("%w: kind %q holds invalid UTF-8 or control characters; use printable text", ErrInvalid, kind)
	}
	return nil
}

// Clone returns a deep copy of d.
func (d *Definition) Clone() *Definition {
	if d == nil {
		return nil
	}
	c := *d
	if d.Labels != nil {
		c.Labels = append([]string(nil), d.Labels...)
	}
	if d.Unique != nil {
		u := *d.Unique
		c.Unique = &u
	}
	c.Executor = d.Executor.Clone()
	return &c
}

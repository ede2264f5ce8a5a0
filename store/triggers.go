package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/jobkit/job/schedule"
)

// Triggers keeps stored triggers: cron or interval schedules created at
// run time, by any process, that the engine's scheduler role turns into
// instances once per tick per cluster. A trigger is named; its name is
// unique in the namespace.
//
// Triggers are not a part of Store of their own: they are documents of
// TriggerCollection, and TriggersIn gives the Triggers of a store's
// Documents. A plugin implements nothing for them (see TriggerUpgrader
// for the triggers of a plugin's earlier releases).
//
// Every write is a compare-and-set on the trigger's Version, so two
// writers (an operator pausing a trigger while a scheduler records a tick)
// never lose each other's change: the loser gets ErrConflict, reads the
// trigger again and retries.
type Triggers interface {
	// PutTrigger creates or replaces a trigger after checking it with
	// Trigger.Validate (an invalid trigger is ErrInvalid and nothing is
	// stored). p.IfVersion 0 creates: ErrConflict when the name is taken.
	// AnyVersion creates or replaces whatever is stored. Otherwise it
	// replaces the trigger stored with that Version: ErrConflict when the
	// stored Version differs, ErrNotFound when there is none. The store
	// assigns the new Version as PutDocument does (one more at each
	// change; a trigger created again after a delete never takes an old
	// Version back), keeps CreatedAt of a replaced trigger (p.Now for a
	// new one) and sets UpdatedAt to p.Now. It returns the trigger as
	// stored.
	PutTrigger(ctx context.Context, p *PutTriggerParams) (*Trigger, error)
	// GetTrigger returns the trigger of that name, or ErrNotFound.
	GetTrigger(ctx context.Context, name string) (*Trigger, error)
	// ListTriggers returns up to p.Limit triggers in name order, starting
	// after p.After. A page is never larger than MaxTriggerPage.
	ListTriggers(ctx context.Context, p *ListTriggersParams) (*TriggerPage, error)
	// DeleteTrigger removes a trigger: ErrNotFound when there is none, and
	// ErrConflict when p.IfVersion is not 0 and differs from the stored
	// Version. Instances it scheduled stay.
	DeleteTrigger(ctx context.Context, p *DeleteTriggerParams) error
}

// OverlapPolicy says what a trigger does at a tick while the instance of
// its previous tick is still Scheduled or Processing.
type OverlapPolicy string

// The overlap policies, as Kubernetes CronJob's concurrencyPolicy has them.
const (
	// OverlapAllow fires every tick, whatever the previous run does. The
	// default (also when empty).
	OverlapAllow OverlapPolicy = "allow"
	// OverlapForbid skips a tick while the previous run is still active;
	// the skip is counted (Trigger.Skipped, Trigger.LastSkipped).
	OverlapForbid OverlapPolicy = "forbid"
	// OverlapReplace cancels the previous run (as Queue.Cancel does), then
	// fires the tick.
	OverlapReplace OverlapPolicy = "replace"
)

// MissedTickPolicy says what a trigger does with ticks missed while no
// scheduler ran (or none could reach the store).
type MissedTickPolicy string

// The missed-tick policies.
const (
	// MissedSkip drops missed ticks: the trigger fires from now on. The
	// default (also when empty).
	MissedSkip MissedTickPolicy = "skip"
	// MissedCatchUpOnce fires one instance for the latest missed tick when
	// it is at most Trigger.CatchUpWithin old (Kubernetes CronJob's
	// startingDeadlineSeconds), then goes on from now.
	MissedCatchUpOnce MissedTickPolicy = "catch-up-once"
)

// Trigger is a stored cron or interval schedule of one kind. The fields
// down to CatchUpWithin are what a user sets; the engine maintains the
// tick state below them, and the store the Version and the times.
type Trigger struct {
	// Name identifies the trigger, unique in the namespace: 1 to
	// MaxTriggerName bytes, no control characters.
	Name string `json:"name"`
	// Kind is the job kind each tick schedules an instance of. Exactly
	// one of Kind and Workflow is set.
	Kind string `json:"kind"`
	// Args are the instance's arguments: a JSON array, or empty for none.
	// Only with Kind.
	Args []byte `json:"args,omitempty"`
	// Workflow names a stored workflow template (job.WorkflowTemplate)
	// each tick runs as a workflow, with Params, instead of an instance
	// of Kind. The workflow's ID is the tick's (LastInstanceID), and the
	// overlap policy looks at, and cancels, whole workflows.
	Workflow string `json:"workflow,omitempty"`
	// Params are the template's parameters: a JSON object of values by
	// parameter name, or empty for none. Only with Workflow.
	Params []byte `json:"params,omitempty"`
	// Cron is a cron spec: five fields, an optional leading seconds field,
	// or a descriptor (@hourly, @daily, ...). No time zone prefix and no
	// @every: set TimeZone, or Interval. Exactly one of Cron and Interval
	// is set.
	Cron string `json:"cron,omitempty"`
	// TimeZone is the IANA zone the Cron fields are read in ("Europe/Paris").
	// Empty means UTC, so every node computes the same ticks. Only with
	// Cron.
	TimeZone string `json:"time_zone,omitempty"`
	// Interval fires the trigger every Interval, at multiples of Interval
	// since the Unix epoch; at least MinTriggerInterval.
	Interval time.Duration `json:"interval,omitempty"`
	// Paused stops the trigger's ticks until it is cleared. Ticks that fall
	// while it is paused are not caught up.
	Paused bool `json:"paused,omitempty"`
	// Overlap is the overlap policy; empty means OverlapAllow.
	Overlap OverlapPolicy `json:"overlap,omitempty"`
	// Missed is the missed-tick policy; empty means MissedSkip.
	Missed MissedTickPolicy `json:"missed,omitempty"`
	// CatchUpWithin bounds how old a missed tick MissedCatchUpOnce fires
	// may be; required (positive) with that policy.
	CatchUpWithin time.Duration `json:"catch_up_within,omitempty"`
	// Calendar names a stored calendar (see Calendar) that shapes the
	// ticks under CalendarPolicy; empty for none. Its ticks come from
	// Spec().Next with the calendar's rules (Calendar.Compile).
	Calendar string `json:"calendar,omitempty"`
	// CalendarPolicy says what the calendar does to the ticks; empty
	// means schedule.Workdays. Only with Calendar.
	CalendarPolicy schedule.Policy `json:"calendar_policy,omitempty"`

	// LastTick is the time of the last tick fired (an instance scheduled
	// for it, by any node). Maintained by the engine.
	LastTick time.Time `json:"last_tick,omitzero"`
	// LastInstanceID is the instance of LastTick. Maintained by the
	// engine; the overlap policy looks at its state.
	LastInstanceID string `json:"last_instance_id,omitempty"`
	// Skipped counts the ticks OverlapForbid skipped, and LastSkipped is
	// the latest of them. Maintained by the engine.
	Skipped     int64     `json:"skipped,omitempty"`
	LastSkipped time.Time `json:"last_skipped,omitzero"`

	// Version is assigned by the store at each write; pass it back as
	// PutTriggerParams.IfVersion to replace the trigger.
	Version int64 `json:"version,omitempty"`
	// CreatedAt and UpdatedAt are set by the store from PutTriggerParams.Now.
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Limits of triggers.
const (
	// MaxTriggerName is the longest trigger name, in bytes.
	MaxTriggerName = 200
	// MinTriggerInterval is the shortest Interval: the engine's minimum
	// period (job.MinInterval), cron's own resolution.
	MinTriggerInterval = time.Second
	// DefaultTriggerPage is the page size of a ListTriggers with no Limit,
	// and MaxTriggerPage the largest page it returns.
	DefaultTriggerPage = 100
	MaxTriggerPage     = 1000
)

// PutTriggerParams is the argument of Triggers.PutTrigger.
type PutTriggerParams struct {
	// Trigger to store. Its Version, CreatedAt and UpdatedAt are ignored.
	Trigger *Trigger
	// IfVersion is 0 to create, the Version of the stored trigger to
	// replace, or AnyVersion to create or replace.
	IfVersion int64
	// Now is the time of the write.
	Now time.Time
}

// ListTriggersParams is the argument of Triggers.ListTriggers.
type ListTriggersParams struct {
	// After is the name to start after; empty starts at the first.
	After string
	// Limit bounds the page: 0 means DefaultTriggerPage, more than
	// MaxTriggerPage means MaxTriggerPage.
	Limit int
}

// TriggerPage is one page of ListTriggers.
type TriggerPage struct {
	// Triggers in name order.
	Triggers []*Trigger
	// Next is the After of the next page, or empty when this is the last.
	Next string
}

// DeleteTriggerParams is the argument of Triggers.DeleteTrigger.
type DeleteTriggerParams struct {
	Name string
	// IfVersion, when not 0, deletes only the trigger of that Version.
	IfVersion int64
}

// Validate checks the parameters of a ListTriggers and returns the page
// size they ask for (PageLimit).
func (p *ListTriggersParams) Validate() (int, error) { return p.PageLimit() }

// PageLimit returns the page size p asks for: DefaultTriggerPage for 0,
// at most MaxTriggerPage. A negative Limit is ErrInvalid.
func (p *ListTriggersParams) PageLimit() (int, error) {
	switch {
	case p == nil || p.Limit == 0:
		return DefaultTriggerPage, nil
	case p.Limit < 0:
		return 0, fmt.Errorf("%w: trigger page limit %d; want 0 (default) or more", ErrInvalid, p.Limit)
	}
	return min(p.Limit, MaxTriggerPage), nil
}

// Validate checks the params of a PutTrigger and the trigger in them.
func (p *PutTriggerParams) Validate() error {
	if p == nil || p.Trigger == nil {
		return fmt.Errorf("%w: put trigger without a trigger", ErrInvalid)
	}
	if p.Now.IsZero() {
		return fmt.Errorf("%w: put trigger %q without a time (set Now)", ErrInvalid, p.Trigger.Name)
	}
	if p.IfVersion < AnyVersion {
		return fmt.Errorf("%w: put trigger %q: IfVersion %d; want 0 (create), the version read (replace) or store.AnyVersion", ErrInvalid, p.Trigger.Name, p.IfVersion)
	}
	return p.Trigger.Validate()
}

// Validate checks the params of a DeleteTrigger.
func (p *DeleteTriggerParams) Validate() error {
	switch {
	case p == nil || p.Name == "":
		return fmt.Errorf("%w: delete trigger without a name", ErrInvalid)
	case p.IfVersion < 0:
		return fmt.Errorf("%w: delete trigger %q: IfVersion %d; want 0 (whatever version) or the version read", ErrInvalid, p.Name, p.IfVersion)
	}
	return nil
}

// CheckTriggerName returns an error wrapping ErrInvalid when name cannot
// name a trigger.
func CheckTriggerName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: trigger without a name", ErrInvalid)
	case len(name) > MaxTriggerName:
		return fmt.Errorf("%w: trigger name of %d bytes; at most %d", ErrInvalid, len(name), MaxTriggerName)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: trigger name %q holds a control character", ErrInvalid, name)
	}
	return nil
}

// Validate checks what a user sets: a name, a kind, arguments that are a
// JSON array, exactly one of Cron and Interval (a cron spec that parses
// and fires, a known zone, an interval of at least MinTriggerInterval),
// known policies, and CatchUpWithin with MissedCatchUpOnce. Every error
// wraps ErrInvalid and names the fix.
func (t *Trigger) Validate() error {
	if t == nil {
		return fmt.Errorf("%w: nil trigger", ErrInvalid)
	}
	if err := CheckTriggerName(t.Name); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: trigger %q: %s", ErrInvalid, t.Name, fmt.Sprintf(format, args...))
	}
	if err := t.checkTarget(bad); err != nil {
		return err
	}
	if err := t.checkSchedule(bad); err != nil {
		return err
	}
	return t.checkPolicies(bad)
}

// checkTarget is Validate's check of what each tick starts: an instance
// of Kind with Args, or a workflow of the template Workflow with Params.
func (t *Trigger) checkTarget(bad func(format string, args ...any) error) error {
	switch {
	case t.Kind == "" && t.Workflow == "":
		return bad("no kind; set the kind of job each tick schedules (or Workflow, a workflow template each tick runs)")
	case t.Kind != "" && t.Workflow != "":
		return bad("both a kind (%q) and a workflow template (%q); set one", t.Kind, t.Workflow)
	case t.Workflow != "" && len(bytes.TrimSpace(t.Args)) > 0:
		return bad("arguments with a workflow template; give the template's parameters in Params")
	case t.Kind != "" && len(bytes.TrimSpace(t.Params)) > 0:
		return bad("parameters with a kind; parameters go to a workflow template (Workflow), arguments to a kind (Args)")
	}
	if a := bytes.TrimSpace(t.Args); len(a) > 0 && (a[0] != '[' || !json.Valid(a)) {
		return bad("arguments %.40q are not a JSON array; encode them as one, e.g. [1, \"x\"]", t.Args)
	}
	if p := bytes.TrimSpace(t.Params); len(p) > 0 && (p[0] != '{' || !json.Valid(p)) {
		return bad("parameters %.40q are not a JSON object; encode them as one, e.g. {\"url\": \"https://...\"}", t.Params)
	}
	return nil
}

// checkSchedule is Validate's check of the cron spec or interval.
func (t *Trigger) checkSchedule(bad func(format string, args ...any) error) error {
	switch {
	case t.Cron != "" && t.Interval != 0:
		return bad("both a cron spec and an interval; set one")
	case t.Cron == "" && t.Interval == 0:
		return bad("no schedule; set a cron spec or an interval")
	case t.Interval != 0 && t.Interval < MinTriggerInterval:
		return bad("interval %v is shorter than %v; run more frequent work in a loop inside one job", t.Interval, MinTriggerInterval)
	case t.Interval != 0 && t.TimeZone != "":
		return bad("a time zone with an interval; intervals fall on multiples since the Unix epoch, drop the zone")
	}
	if t.Cron != "" {
		if err := (schedule.Spec{Cron: t.Cron, TimeZone: t.TimeZone}).Check(); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// checkPolicies is Validate's check of the overlap, missed-tick and
// calendar policies.
func (t *Trigger) checkPolicies(bad func(format string, args ...any) error) error {
	switch t.Overlap {
	case "", OverlapAllow, OverlapForbid, OverlapReplace:
	default:
		return bad("unknown overlap policy %q; want %q, %q or %q", t.Overlap, OverlapAllow, OverlapForbid, OverlapReplace)
	}
	switch t.Missed {
	case "", MissedSkip:
		if t.CatchUpWithin < 0 {
			return bad("negative CatchUpWithin %v", t.CatchUpWithin)
		}
	case MissedCatchUpOnce:
		if t.CatchUpWithin <= 0 {
			return bad("missed-tick policy %q needs a positive CatchUpWithin (how old a missed tick may be to run)", t.Missed)
		}
	default:
		return bad("unknown missed-tick policy %q; want %q or %q", t.Missed, MissedSkip, MissedCatchUpOnce)
	}
	if t.Calendar == "" && t.CalendarPolicy != "" {
		return bad("calendar policy %q without a calendar; name the calendar (Calendar) or drop the policy", t.CalendarPolicy)
	}
	if t.Calendar != "" {
		if err := CheckTriggerName(t.Calendar); err != nil {
			return bad("calendar name: %v", err)
		}
		if err := schedule.CheckPolicy(t.CalendarPolicy); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// Spec returns the trigger's schedule: its cron spec or interval and
// its calendar. Its ticks are Spec().Next(after, rules), with the rules
// of its calendar when it names one (Calendar.Compile), nil otherwise.
func (t *Trigger) Spec() schedule.Spec {
	return schedule.Spec{Cron: t.Cron, TimeZone: t.TimeZone, Interval: t.Interval, Calendar: t.Calendar, Policy: t.CalendarPolicy}
}

// Clone returns a deep copy of t.
func (t *Trigger) Clone() *Trigger {
	if t == nil {
		return nil
	}
	c := *t
	c.Args = bytes.Clone(t.Args)
	c.Params = bytes.Clone(t.Params)
	return &c
}

package alert

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ErrInvalid is the error of a rule, silence or channel that cannot be
// stored as given; the message names the field and the fix. Nothing is
// stored when it is returned.
var ErrInvalid = errors.New("alert: invalid")

// ErrUnknown is the error of a rule or silence that names a kind, queue,
// trigger, rule or channel the namespace does not have; the message names
// it. Nothing is stored when it is returned.
var ErrUnknown = errors.New("alert: unknown name")

// Condition is what a rule watches.
type Condition string

// The conditions a rule can watch.
const (
	// Failed fires when an instance ends Terminated or TimedOut (after
	// Rule.Failures such ends in a row of one kind), and clears when an
	// instance of that kind completes.
	Failed Condition = "failed"
	// LongRun fires while an attempt has been running longer than
	// Rule.Threshold (before it ends), and clears when it ends.
	LongRun Condition = "long_run"
	// MissedTick fires when a stored trigger's tick was skipped by its
	// overlap policy (forbid) or was not fired because no scheduler ran,
	// and clears when the trigger fires a tick again.
	MissedTick Condition = "missed_tick"
	// QueueLag fires when a queue's (or a kind's) oldest ready instance
	// has waited longer than Rule.Threshold for Rule.For, and clears when
	// the lag is at or below the threshold.
	QueueLag Condition = "queue_lag"
	// NoNode fires when a kind has scheduled work (instances waiting, or a
	// trigger that is not paused) and no live node runs it, and clears
	// when one does or the work is gone.
	NoNode Condition = "no_node"
)

// Conditions lists every Condition, in the order the docs give them.
var Conditions = []Condition{Failed, LongRun, MissedTick, QueueLag, NoNode}

// Rule is an alert rule, stored as data. It watches one condition within
// its scope: one kind, one trigger, one queue, or (none of them) the whole
// namespace.
type Rule struct {
	// Name identifies the rule in the namespace: 1 to MaxName bytes of
	// letters, digits and "._-".
	Name      string    `json:"name"`
	Condition Condition `json:"condition"`
	// Kind, Trigger and Queue scope the rule; at most one is set, and none
	// means every kind, trigger or queue of the namespace.
	Kind    string `json:"kind,omitempty"`
	Trigger string `json:"trigger,omitempty"`
	Queue   string `json:"queue,omitempty"`
	// Failures is how many Terminated or TimedOut ends in a row of one
	// kind open an incident (Failed only). 0 means 1.
	Failures int `json:"failures,omitempty"`
	// Threshold is the run time (LongRun) or the lag (QueueLag) above
	// which the rule fires. Required (> 0) for those conditions.
	Threshold time.Duration `json:"threshold,omitempty"`
	// For is how long the lag must stay above Threshold before QueueLag
	// fires; 0 fires at the first evaluation that sees it.
	For time.Duration `json:"for,omitempty"`
	// RepeatEvery repeats the notification at most this often while the
	// incident stays open; 0 never repeats.
	RepeatEvery time.Duration `json:"repeat_every,omitempty"`
	// Channels are the names of the channels notified.
	Channels []string `json:"channels,omitempty"`
	// Disabled keeps the rule stored but unevaluated (its open incidents
	// resolve).
	Disabled bool `json:"disabled,omitempty"`
	// Description is free text shown with the rule.
	Description string `json:"description,omitempty"`

	// Version, CreatedAt and UpdatedAt are set by the store.
	Version   int64     `json:"-"`
	CreatedAt time.Time `json:"-"`
	UpdatedAt time.Time `json:"-"`
}

// MaxName bounds the names of rules, silences and channels, in bytes.
const MaxName = 128

// checkName reports a name that is empty, too long, or has a character
// other than letters, digits and "._-".
func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s name is empty; name it with letters, digits and \"._-\"", ErrInvalid, what)
	}
	if len(name) > MaxName {
		return fmt.Errorf("%w: %s name is %d bytes; at most %d", ErrInvalid, what, len(name), MaxName)
	}
	for _, r := range name {
		if !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)) || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%w: %s name %q has %q; use letters, digits and \"._-\"", ErrInvalid, what, name, r)
		}
	}
	return nil
}

// Validate checks what a rule says on its own (the names it references
// are checked against the namespace by Service.PutRule): a name, a known
// condition, a scope the condition applies to, thresholds above zero
// where the condition needs one, and none of them negative.
func (r *Rule) Validate() error {
	if err := checkName("rule", r.Name); err != nil {
		return err
	}
	scopes := 0
	for _, s := range []string{r.Kind, r.Trigger, r.Queue} {
		if s != "" {
			scopes++
		}
	}
	if scopes > 1 {
		return fmt.Errorf("%w: rule %q names more than one of kind, trigger and queue; attach it to one (or to none for the whole namespace)", ErrInvalid, r.Name)
	}
	if err := r.checkCondition(scopes); err != nil {
		return err
	}
	if err := r.checkSettings(); err != nil {
		return err
	}
	return r.checkChannels()
}

// checkCondition is Validate's check of the condition, of the scope it
// applies to (scopes: how many of kind, trigger and queue are set) and
// of the setting it needs.
func (r *Rule) checkCondition(scopes int) error {
	switch r.Condition {
	case Failed:
		if r.Failures < 0 {
			return fmt.Errorf("%w: rule %q: failures %d; give 1 or more (0 means 1)", ErrInvalid, r.Name, r.Failures)
		}
	case LongRun:
		if r.Threshold <= 0 {
			return fmt.Errorf("%w: rule %q: threshold %v; a long_run rule needs a run time above zero", ErrInvalid, r.Name, r.Threshold)
		}
	case MissedTick:
		if r.Queue != "" {
			return fmt.Errorf("%w: rule %q: a missed_tick rule attaches to a trigger, a kind or the namespace, not a queue", ErrInvalid, r.Name)
		}
	case QueueLag:
		if r.Threshold <= 0 {
			return fmt.Errorf("%w: rule %q: threshold %v; a queue_lag rule needs a lag above zero", ErrInvalid, r.Name, r.Threshold)
		}
		if r.Trigger != "" {
			return fmt.Errorf("%w: rule %q: a queue_lag rule attaches to a queue, a kind or the namespace, not a trigger", ErrInvalid, r.Name)
		}
	case NoNode:
		if r.Queue != "" {
			return fmt.Errorf("%w: rule %q: a no_node rule attaches to a kind, a trigger or the namespace, not a queue", ErrInvalid, r.Name)
		}
	case WorkflowFailed:
		if scopes > 0 {
			return fmt.Errorf("%w: rule %q: a workflow_failed rule watches every workflow of the namespace; leave kind, trigger and queue empty", ErrInvalid, r.Name)
		}
	case "":
		return fmt.Errorf("%w: rule %q has no condition; give one of %s", ErrInvalid, r.Name, conditionList())
	default:
		return fmt.Errorf("%w: rule %q: condition %q; give one of %s", ErrInvalid, r.Name, r.Condition, conditionList())
	}
	return nil
}

// checkSettings is Validate's check that the threshold, failures and
// duration are set only for the conditions that read them, and of the
// repeat interval.
func (r *Rule) checkSettings() error {
	if r.Condition != LongRun && r.Condition != QueueLag && r.Threshold != 0 {
		return fmt.Errorf("%w: rule %q: a threshold means nothing to a %s rule; leave it 0", ErrInvalid, r.Name, r.Condition)
	}
	if r.Condition != Failed && r.Failures != 0 {
		return fmt.Errorf("%w: rule %q: failures means nothing to a %s rule; leave it 0", ErrInvalid, r.Name, r.Condition)
	}
	if r.For < 0 || (r.For != 0 && r.Condition != QueueLag) {
		return fmt.Errorf("%w: rule %q: for %v; only a queue_lag rule takes a duration, 0 or more", ErrInvalid, r.Name, r.For)
	}
	if r.RepeatEvery < 0 {
		return fmt.Errorf("%w: rule %q: repeat_every %v; give 0 (never repeat) or more", ErrInvalid, r.Name, r.RepeatEvery)
	}
	return nil
}

// checkChannels is Validate's check of the channel names: each valid,
// none twice.
func (r *Rule) checkChannels() error {
	seen := map[string]bool{}
	for _, c := range r.Channels {
		if seen[c] {
			return fmt.Errorf("%w: rule %q names channel %q twice", ErrInvalid, r.Name, c)
		}
		seen[c] = true
		if err := checkName("channel", c); err != nil {
			return err
		}
	}
	return nil
}

// failures returns how many failures in a row open an incident.
func (r *Rule) failures() int {
	if r.Failures < 1 {
		return 1
	}
	return r.Failures
}

// Scope describes the rule's scope for people ("kind report").
func (r *Rule) Scope() string {
	switch {
	case r.Kind != "":
		return "kind " + r.Kind
	case r.Trigger != "":
		return "trigger " + r.Trigger
	case r.Queue != "":
		return "queue " + r.Queue
	}
	return "namespace"
}

func conditionList() string {
	s := make([]string, len(Conditions))
	for i, c := range Conditions {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

package alert

import (
	"fmt"
	"time"
)

// Silence mutes the notifications of one rule, or of every rule about one
// kind, until End. An incident opens and resolves as usual while
// silenced; its notifications are kept in the history as "silenced" and
// sent nowhere.
type Silence struct {
	// Name identifies the silence in the namespace (letters, digits,
	// "._-").
	Name string `json:"name"`
	// Rule or Kind (exactly one) says what is silenced.
	Rule string `json:"rule,omitempty"`
	Kind string `json:"kind,omitempty"`
	// End is when the silence stops; it must be in the future when the
	// silence is stored.
	End time.Time `json:"end"`
	// Comment says why, for the people who read it.
	Comment string `json:"comment,omitempty"`

	// Version, CreatedAt and UpdatedAt are set by the store.
	Version   int64     `json:"-"`
	CreatedAt time.Time `json:"-"`
	UpdatedAt time.Time `json:"-"`
}

// Validate checks a silence on its own at now: a name, exactly one of
// Rule and Kind, and an End after now.
func (s *Silence) Validate(now time.Time) error {
	if err := checkName("silence", s.Name); err != nil {
		return err
	}
	if (s.Rule == "") == (s.Kind == "") {
		return fmt.Errorf("%w: silence %q: name exactly one of a rule and a kind to silence", ErrInvalid, s.Name)
	}
	if s.End.IsZero() {
		return fmt.Errorf("%w: silence %q has no end time; give when it stops", ErrInvalid, s.Name)
	}
	if !s.End.After(now) {
		return fmt.Errorf("%w: silence %q ends at %s, which is not in the future", ErrInvalid, s.Name, s.End.UTC().Format(time.RFC3339))
	}
	return nil
}

// Mutes reports whether s, active at now, silences the notifications of
// an incident of rule about kind.
func (s *Silence) Mutes(rule, kind string, now time.Time) bool {
	if !now.Before(s.End) {
		return false
	}
	return (s.Rule != "" && s.Rule == rule) || (s.Kind != "" && s.Kind == kind)
}

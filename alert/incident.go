package alert

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// IncidentState says whether an incident's condition holds.
type IncidentState string

// The incident states.
const (
	Open     IncidentState = "open"
	Resolved IncidentState = "resolved"
)

// Event is what a notification tells.
type Event string

// The notification events.
const (
	// Firing: an incident opened.
	Firing Event = "firing"
	// Repeat: an incident is still open after the rule's RepeatEvery.
	Repeat Event = "repeat"
	// ResolvedEvent: the incident's condition cleared.
	ResolvedEvent Event = "resolved"
	// Test: a "send test notification" of a channel.
	Test Event = "test"
)

// Subject is what an incident is about: the kind, queue, trigger or
// instance the condition holds for, with what the evaluation saw.
type Subject struct {
	Kind       string `json:"kind,omitempty"`
	Queue      string `json:"queue,omitempty"`
	Trigger    string `json:"trigger,omitempty"`
	InstanceID string `json:"instance_id,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`
	// Workflow is the workflow's name (WorkflowFailed; InstanceID is then
	// the workflow's ID).
	Workflow string `json:"workflow,omitempty"`
	// Error is the last error seen (Failed).
	Error string `json:"error,omitempty"`
	// Detail says in words what holds ("3 failures in a row", "lag 2m
	// above 1m for 5m").
	Detail string `json:"detail,omitempty"`
}

// Incident is one occurrence of a rule's condition for one subject, from
// the evaluation that saw it hold until the one that saw it clear. Its ID
// is derived from the rule and the subject, so every evaluator in the
// cluster names the same incident the same way; each transition is one
// compare-and-set on the stored incident.
type Incident struct {
	ID        string        `json:"id"`
	Rule      string        `json:"rule"`
	Condition Condition     `json:"condition"`
	State     IncidentState `json:"state"`
	Subject   Subject       `json:"subject"`
	// OpenedAt, ResolvedAt and NotifiedAt are the times of its opening,
	// its resolution (zero while open) and its latest notification.
	OpenedAt   time.Time `json:"opened_at"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	NotifiedAt time.Time `json:"notified_at,omitzero"`
	// Seq counts the incident's notifications (firing, repeats,
	// resolved), across reopenings; LastEvent is the latest.
	Seq       int   `json:"seq"`
	LastEvent Event `json:"last_event"`
	// Emitted is the Seq whose notifications are stored: below Seq, an
	// evaluator that crashed after the transition left them to be written
	// (by whichever evaluator looks next, under the same names).
	Emitted int `json:"emitted"`

	Version int64 `json:"-"`
}

// subjectKey is the part of an incident's identity that the subject
// gives: the instance for LongRun, the queue or kind for QueueLag, the
// trigger for MissedTick, the kind otherwise.
func subjectKey(c Condition, s Subject) string {
	switch c {
	case LongRun:
		return "instance:" + s.InstanceID
	case QueueLag:
		if s.Queue != "" {
			return "queue:" + s.Queue
		}
		return "kind:" + s.Kind
	case MissedTick:
		return "trigger:" + s.Trigger
	case WorkflowFailed:
		return "workflow:" + s.Workflow
	}
	return "kind:" + s.Kind
}

// incidentID names the incident of rule about subject key: the rule's
// name and a hash of the key, so it is a valid document name whatever the
// kind or queue is called.
func incidentID(rule, key string) string {
	sum := sha256.Sum256([]byte(rule + "\x00" + key))
	return rule + "." + hex.EncodeToString(sum[:8])
}

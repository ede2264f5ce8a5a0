package alert

import (
	"fmt"
	"math"
	"time"
)

// Status says where a notification's delivery stands.
type Status string

// The notification statuses.
const (
	// Pending: waiting for its first attempt, or for a retry after a
	// failed one (Attempts and LastError say so).
	Pending Status = "pending"
	// Delivered: the channel accepted it.
	Delivered Status = "delivered"
	// Failed: every attempt failed; LastError says why.
	Undelivered Status = "failed"
	// Silenced: a silence muted it; it was sent nowhere.
	Silenced Status = "silenced"
)

// Notification is one message of one incident to one channel, kept in
// the history whatever became of it.
type Notification struct {
	ID        string    `json:"id"`
	Incident  string    `json:"incident,omitempty"`
	Rule      string    `json:"rule,omitempty"`
	Condition Condition `json:"condition,omitempty"`
	Event     Event     `json:"event"`
	Channel   string    `json:"channel,omitempty"`
	Subject   Subject   `json:"subject"`
	// At is the time of the transition it tells.
	At     time.Time `json:"at"`
	Status Status    `json:"status"`
	// Silence names the silence that muted it.
	Silence     string    `json:"silence,omitempty"`
	Attempts    int       `json:"attempts,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`

	// NextAttemptAt, Owner and LeaseUntil are the delivery's: when it may
	// be tried next, and which node claimed it until when.
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	Owner         string    `json:"owner,omitempty"`
	LeaseUntil    time.Time `json:"lease_until,omitzero"`

	Version int64 `json:"-"`
}

// notificationID names a notification so that the history lists newest
// first in name order, and every evaluator writing the same transition
// writes the same name.
func notificationID(at time.Time, incident string, seq int, channel string) string {
	return fmt.Sprintf("%019d.%s.%d.%s", math.MaxInt64-at.UnixNano(), incident, seq, channel)
}

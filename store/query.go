package store

import (
	"fmt"
	"slices"
	"time"
)

// Validate reports a query that cannot match as intended.
func (q *Query) Validate() error {
	if q == nil {
		return fmt.Errorf("%w: nil query", ErrInvalid)
	}
	if len(q.IDs) > MaxQueryIDs {
		return fmt.Errorf("%w: query names %d IDs, more than MaxQueryIDs (%d); look them up in parts", ErrInvalid, len(q.IDs), MaxQueryIDs)
	}
	if err := validIDs("query", q.IDs); err != nil {
		return err
	}
	if q.Limit < 0 {
		return fmt.Errorf("%w: negative query limit %d", ErrInvalid, q.Limit)
	}
	for _, s := range q.States {
		if !s.Valid() {
			return fmt.Errorf("%w: query state %v", ErrInvalid, s)
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return fmt.Errorf("%w: query time range [%v, %v) is empty", ErrInvalid, q.Since, q.Until)
	}
	return nil
}

// InRange reports whether t falls in [q.Since, q.Until), open-ended where a
// bound is zero.
func (q *Query) InRange(t time.Time) bool {
	if !q.Since.IsZero() && t.Before(q.Since) {
		return false
	}
	if !q.Until.IsZero() && !t.Before(q.Until) {
		return false
	}
	return true
}

// MatchInstance reports whether in matches q (CreatedAt is the time).
func (q *Query) MatchInstance(in *Instance) bool {
	return (q.InstanceID == "" || q.InstanceID == in.ID) &&
		(q.Kind == "" || q.Kind == in.Kind) &&
		(q.Queue == "" || q.Queue == in.Queue) &&
		(q.Parent == "" || q.Parent == in.Parent) &&
		(len(q.IDs) == 0 || slices.Contains(q.IDs, in.ID)) &&
		(len(q.States) == 0 || slices.Contains(q.States, in.State)) &&
		q.InRange(in.CreatedAt)
}

// MatchHistory reports whether h matches q. Query.Queue is not kept in
// history records and is ignored.
func (q *Query) MatchHistory(h *HistoryRecord) bool {
	return (q.InstanceID == "" || q.InstanceID == h.InstanceID) &&
		(q.Kind == "" || q.Kind == h.Kind) &&
		(len(q.States) == 0 || slices.Contains(q.States, h.State)) &&
		q.InRange(h.Time)
}

// MatchLog reports whether l matches q. Query.Queue and Query.States are
// ignored.
func (q *Query) MatchLog(l *LogRecord) bool {
	return (q.InstanceID == "" || q.InstanceID == l.InstanceID) &&
		(q.Kind == "" || q.Kind == l.Kind) &&
		(len(q.Levels) == 0 || slices.Contains(q.Levels, l.Level)) &&
		q.InRange(l.Time)
}

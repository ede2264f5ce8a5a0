package alert

import (
	"context"
	"errors"
	"fmt"

	"time"

	"github.com/jobkit/job/store"
)

// resolvedRetain is how long a resolved incident stays listed.
const resolvedRetain = 24 * time.Hour

// reconcile opens, repeats and resolves incidents to match the firing
// set. Each transition is a compare-and-set on the stored incident, so
// when several evaluators reconcile at once each transition happens once
// and is notified once; the loser of a race moves on.
func (s *Service) reconcile(ctx context.Context, rules map[string]*Rule, fire map[string]*firing, now time.Time) error {
	incs, err := decodeAll(ctx, s, colIncidents, func(v *Incident, d *store.Document) { v.Version = d.Version })
	if err != nil {
		return fmt.Errorf("alert: list incidents: %w", err)
	}
	byID := make(map[string]*Incident, len(incs))
	for _, in := range incs {
		byID[in.ID] = in
	}
	var silences []*Silence
	silencesRead := false
	emit := func(in *Incident) error {
		if !silencesRead {
			if silences, err = s.ListSilences(ctx); err != nil {
				return err
			}
			silencesRead = true
		}
		return s.emit(ctx, in, rules[in.Rule], silences)
	}
	var errs []error
	for id, f := range fire {
		in := byID[id]
		r := rules[f.Rule]
		var next Incident
		var ifVersion int64
		switch {
		case in == nil:
			next = Incident{ID: id, Rule: f.Rule, Condition: f.Condition}
		case in.Emitted < in.Seq:
			errs = append(errs, emit(in))
			continue
		case in.State == Resolved:
			next, ifVersion = *in, in.Version
		case r != nil && r.RepeatEvery > 0 && !now.Before(in.NotifiedAt.Add(r.RepeatEvery)):
			next, ifVersion = *in, in.Version
			next.Seq++
			next.LastEvent, next.NotifiedAt, next.Subject = Repeat, now, f.Subject
			errs = append(errs, s.transition(ctx, &next, ifVersion, emit))
			continue
		default:
			continue
		}
		next.State, next.Subject = Open, f.Subject
		next.OpenedAt, next.ResolvedAt, next.NotifiedAt = now, time.Time{}, now
		next.Seq++
		next.LastEvent = Firing
		if err := s.transition(ctx, &next, ifVersion, emit); err != nil {
			errs = append(errs, err)
		} else if next.Version != 0 && s.cfg.Observer != nil {
			s.cfg.Observer.AlertFired(s.cfg.Namespace, next.Rule, string(next.Condition))
		}
	}
	for _, in := range incs {
		if _, ok := fire[in.ID]; ok {
			continue
		}
		switch {
		case in.Emitted < in.Seq:
			errs = append(errs, emit(in))
		case in.State == Open:
			next := *in
			next.Seq++
			next.State, next.LastEvent, next.ResolvedAt, next.NotifiedAt = Resolved, ResolvedEvent, now, now
			errs = append(errs, s.transition(ctx, &next, in.Version, emit))
		case now.Sub(in.ResolvedAt) > resolvedRetain:
			err := s.cfg.Store.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: colIncidents, Name: in.ID, IfVersion: in.Version})
			if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// transition writes in if ifVersion holds, and when it does, stores its
// notifications. A lost race is no error: another evaluator made the
// transition (and notifies); in.Version stays 0 then.
func (s *Service) transition(ctx context.Context, in *Incident, ifVersion int64, emit func(*Incident) error) error {
	in.Version = 0
	d, err := s.putDoc(ctx, colIncidents, in.ID, in, ifVersion)
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("alert: incident %s: %w", in.ID, err)
	}
	in.Version = d.Version
	s.log.Info("alert: incident "+string(in.LastEvent), "namespace", s.cfg.Namespace, "incident", in.ID, "rule", in.Rule, "detail", in.Subject.Detail)
	return emit(in)
}

// emit stores the notifications of in's latest transition (Seq): one per
// channel of its rule, in the history and, unless silenced, in the
// outbox the deliverers work from; then it records them emitted. Every
// name is derived from the transition, so an evaluator that emits again
// (the first crashed before recording it) writes nothing twice.
func (s *Service) emit(ctx context.Context, in *Incident, r *Rule, silences []*Silence) error {
	var channels []string
	if r != nil {
		channels = r.Channels
	}
	if len(channels) == 0 {
		channels = []string{""} // kept in the history, sent nowhere
	}
	var silence string
	for _, sl := range silences {
		if sl.Mutes(in.Rule, in.Subject.Kind, in.NotifiedAt) {
			silence = sl.Name
			break
		}
	}
	for _, ch := range channels {
		n := &Notification{
			ID: notificationID(in.NotifiedAt, in.ID, in.Seq, ch), Incident: in.ID, Rule: in.Rule,
			Condition: in.Condition, Event: in.LastEvent, Channel: ch, Subject: in.Subject, At: in.NotifiedAt,
			Status: Pending,
		}
		switch {
		case silence != "":
			n.Status, n.Silence = Silenced, silence
		case ch == "":
			n.Status, n.LastError = Undelivered, "the rule names no channel"
		}
		_, err := s.putDoc(ctx, colNotifications, n.ID, n, 0)
		if errors.Is(err, store.ErrConflict) {
			// Emitted before: deliver it only while its history says pending.
			have := new(Notification)
			if _, err := s.getDoc(ctx, colNotifications, n.ID, have); err != nil {
				return fmt.Errorf("alert: read notification %s: %w", n.ID, err)
			}
			if have.Status != Pending {
				continue
			}
		} else if err != nil {
			return fmt.Errorf("alert: store notification %s: %w", n.ID, err)
		}
		if n.Status != Pending {
			continue
		}
		if _, err := s.putDoc(ctx, colOutbox, n.ID, n, 0); err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("alert: queue notification %s: %w", n.ID, err)
		}
	}
	done := *in
	done.Emitted = in.Seq
	if d, err := s.putDoc(ctx, colIncidents, in.ID, &done, in.Version); err == nil {
		in.Emitted, in.Version = in.Seq, d.Version
	} else if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("alert: incident %s: %w", in.ID, err)
	}
	return nil
}

package alert

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobkit/job/store"
)

// Deliver sends the notifications due in the outbox: each is claimed by
// a compare-and-set (owner and lease), so one node sends it; a failed
// attempt is retried with backoff up to Config.MaxAttempts, and every
// attempt is counted in the channel's status. It runs apart from the
// engine, so a slow or failing channel never holds up a job.
func (s *Service) Deliver(ctx context.Context) error {
	var due []*store.Document
	now := s.now()
	err := s.listDocs(ctx, colOutbox, func(d *store.Document) error {
		n := new(Notification)
		if err := decodeInto(d, n); err != nil {
			return nil
		}
		if n.NextAttemptAt.After(now) || (n.Owner != "" && n.LeaseUntil.After(now)) {
			return nil
		}
		due = append(due, d)
		return nil
	})
	if err != nil {
		return fmt.Errorf("alert: list the outbox: %w", err)
	}
	var errs []error
	for _, d := range due {
		if ctx.Err() != nil {
			break
		}
		errs = append(errs, s.deliverOne(ctx, d))
	}
	return errors.Join(errs...)
}

// deliverOne claims one outbox entry, sends it, and records the outcome.
func (s *Service) deliverOne(ctx context.Context, d *store.Document) error {
	n := new(Notification)
	if err := decodeInto(d, n); err != nil {
		return err
	}
	now := s.now()
	n.Owner, n.LeaseUntil = s.cfg.Node, now.Add(s.cfg.SendTimeout+5*time.Second)
	claimed, err := s.putDoc(ctx, colOutbox, d.Name, n, d.Version)
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return nil // another node took it
	}
	if err != nil {
		return fmt.Errorf("alert: claim notification %s: %w", d.Name, err)
	}
	drop := func() error {
		err := s.cfg.Store.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: colOutbox, Name: d.Name, IfVersion: claimed.Version})
		if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("alert: drop notification %s from the outbox: %w", d.Name, err)
		}
		return nil
	}
	// The history decides: an entry emitted again after its delivery is
	// dropped unsent.
	hist := new(Notification)
	if _, err := s.getDoc(ctx, colNotifications, n.ID, hist); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("alert: read notification %s: %w", n.ID, err)
	} else if err == nil && hist.Status != Pending {
		return drop()
	}
	ch, err := s.GetChannel(ctx, n.Channel)
	var sendErr error
	switch {
	case errors.Is(err, store.ErrNotFound):
		sendErr = fmt.Errorf("channel %q was deleted", n.Channel)
	case err != nil:
		return err
	default:
		sctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
		sendErr = s.send(sctx, ch, n)
		cancel()
	}
	if sendErr != nil && ctx.Err() != nil {
		return nil // stopping: the lease lapses and another node sends it
	}
	n.Attempts++
	n.Owner, n.LeaseUntil = "", time.Time{}
	done := s.now()
	typ := ""
	if ch != nil {
		typ = string(ch.Type)
	}
	if sendErr == nil {
		n.Status, n.DeliveredAt, n.LastError, n.NextAttemptAt = Delivered, done, "", time.Time{}
		if s.cfg.Observer != nil {
			s.cfg.Observer.Delivered(s.cfg.Namespace, n.Channel, typ)
		}
		if err := s.updateHistory(ctx, n); err != nil {
			return err
		}
		s.recordChannel(ctx, n.Channel, nil, done)
		return drop()
	}
	n.LastError = sendErr.Error()
	s.recordChannel(ctx, n.Channel, sendErr, done)
	if s.cfg.Observer != nil {
		s.cfg.Observer.DeliveryFailed(s.cfg.Namespace, n.Channel, typ)
	}
	s.log.Warn("alert: delivery failed", "namespace", s.cfg.Namespace, "channel", n.Channel, "notification", n.ID, "attempt", n.Attempts, "err", sendErr)
	if n.Attempts >= s.cfg.MaxAttempts || ch == nil {
		n.Status = Undelivered
		if err := s.updateHistory(ctx, n); err != nil {
			return err
		}
		return drop()
	}
	n.NextAttemptAt = done.Add(s.backoff(n.Attempts))
	if err := s.updateHistory(ctx, n); err != nil {
		return err
	}
	if _, err := s.putDoc(ctx, colOutbox, d.Name, n, claimed.Version); err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("alert: reschedule notification %s: %w", d.Name, err)
	}
	return nil
}

// backoff is the wait after the attempt-th failed attempt: RetryBase
// doubled for each earlier failure, at most RetryMax.
func (s *Service) backoff(attempt int) time.Duration {
	d := s.cfg.RetryBase
	for i := 1; i < attempt && d < s.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, s.cfg.RetryMax)
}

// updateHistory writes a notification's delivery state to the history.
func (s *Service) updateHistory(ctx context.Context, n *Notification) error {
	h := *n
	h.Owner, h.LeaseUntil = "", time.Time{}
	if _, err := s.putDoc(ctx, colNotifications, n.ID, &h, store.AnyVersion); err != nil {
		return fmt.Errorf("alert: record notification %s: %w", n.ID, err)
	}
	return nil
}

// recordChannel counts one delivery attempt of channel name in its
// status (a read-modify-write retried on conflicts).
func (s *Service) recordChannel(ctx context.Context, name string, sendErr error, at time.Time) {
	if name == "" {
		return
	}
	for range 10 {
		st := &ChannelStatus{Name: name}
		var ver int64
		if d, err := s.getDoc(ctx, colChannelStatus, name, st); err == nil {
			ver = d.Version
		} else if !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("alert: read channel status", "channel", name, "err", err)
			return
		}
		if sendErr == nil {
			st.ConsecutiveFailures, st.LastSuccessAt = 0, at
			st.Delivered++
		} else {
			st.ConsecutiveFailures++
			st.LastError, st.LastErrorAt = sendErr.Error(), at
			st.Failed++
		}
		_, err := s.putDoc(ctx, colChannelStatus, name, st, ver)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			s.log.Warn("alert: record channel status", "channel", name, "err", err)
		}
		return
	}
}

// TestChannel sends a test notification to the channel at once and
// returns what the channel answered (nil when it accepted it); the
// attempt is kept in the history and counted in the channel's status.
func (s *Service) TestChannel(ctx context.Context, name string) (*Notification, error) {
	ch, err := s.GetChannel(ctx, name)
	if err != nil {
		return nil, err
	}
	now := s.now()
	n := &Notification{
		ID: notificationID(now, "test-"+s.cfg.Node, 0, name), Event: Test, Channel: name, At: now,
		Subject: Subject{Detail: "a test notification sent from node " + s.cfg.Node},
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	sendErr := s.send(sctx, ch, n)
	cancel()
	done := s.now()
	n.Attempts = 1
	if sendErr == nil {
		n.Status, n.DeliveredAt = Delivered, done
		if s.cfg.Observer != nil {
			s.cfg.Observer.Delivered(s.cfg.Namespace, name, string(ch.Type))
		}
	} else {
		n.Status, n.LastError = Undelivered, sendErr.Error()
		if s.cfg.Observer != nil {
			s.cfg.Observer.DeliveryFailed(s.cfg.Namespace, name, string(ch.Type))
		}
	}
	s.recordChannel(ctx, name, sendErr, done)
	if err := s.updateHistory(ctx, n); err != nil {
		return n, err
	}
	if sendErr != nil {
		return n, fmt.Errorf("%w: %v", ErrDelivery, sendErr) // the caller named the channel
	}
	return n, nil
}

// ErrDelivery is the error of a notification the channel did not accept.
var ErrDelivery = errors.New("alert: delivery failed")

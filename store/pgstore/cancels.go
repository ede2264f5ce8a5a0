package pgstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// cancelBuffer is the channel capacity of a SubscribeCancels subscriber.
const cancelBuffer = 64

var _ store.CancelNotifier = (*Store)(nil)

// cancelChannel returns the schema's cancel channel: Cancel notifies on
// it, with cancelPayload, for each Processing instance it marks.
func cancelChannel(schema string) string {
	ch := "jobkitcancels_" + schema // never a wake-up channel: those begin "jobkit_"
	if len(ch) > 63 {
		ch = ch[:63] // PostgreSQL's identifier limit, as for the wake-up channel
	}
	return ch
}

// cancelPayload is the payload of a cancel notice: the namespace's prefix
// (as on the wake-up channel), the attempt and the instance ID.
func (s *Store) cancelPayload(attempt int, id string) string {
	return s.payload("") + strconv.Itoa(attempt) + " " + id
}

// notifyCancel sends the notice of attempt of id's cancel inside tx:
// PostgreSQL delivers it when tx commits, and never when it rolls back.
func (s *Store) notifyCancel(ctx context.Context, tx pgx.Tx, attempt int, id string) error {
	_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", s.cancels, s.cancelPayload(attempt, id))
	return err
}

// parseCancel reads a cancel notice's payload; ok is false when it is of
// another namespace or malformed.
func (s *Store) parseCancel(payload string) (ref store.LeaseRef, ok bool) {
	rest, ok := strings.CutPrefix(payload, s.payload(""))
	if !ok {
		return ref, false
	}
	a, id, ok := strings.Cut(rest, " ")
	if !ok || id == "" {
		return ref, false
	}
	n, err := strconv.Atoi(a)
	if err != nil {
		return ref, false
	}
	return store.LeaseRef{ID: id, Attempt: n}, true
}

// SubscribeCancels implements store.CancelNotifier: the channel receives
// the attempt of every Processing instance of the namespace that Cancel
// marks, through any Store on the database, when its transaction commits
// (a NOTIFY on the schema's cancel channel, heard on the store's one
// listening connection). It is closed when ctx ends or the store is
// closed. A notice that finds the channel full is dropped, as are those
// sent while the listening connection is down: the owner still learns of
// the request at its next Renew.
func (s *Store) SubscribeCancels(ctx context.Context) (<-chan store.LeaseRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.wrap(ctx, "subscribe to cancels", err)
	}
	l := s.ensureListener()
	ch := make(chan store.LeaseRef, cancelBuffer)
	l.mu.Lock()
	l.cancels[ch] = struct{}{}
	l.mu.Unlock()
	// Wait (briefly) for the LISTEN, as Subscribe does, so a cancel
	// committed after SubscribeCancels returns is not missed.
	select {
	case <-l.ready:
	case <-ctx.Done():
	case <-s.closed:
	case <-time.After(5 * time.Second):
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-ctx.Done():
		case <-s.closed:
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.cancels, ch)
		close(ch)
	}()
	return ch, nil
}

// noticeCancel hands ref to every SubscribeCancels subscriber that has
// room for it.
func (l *listener) noticeCancel(ref store.LeaseRef) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.cancels {
		select {
		case ch <- ref:
		default: // the owner sees it at its next Renew
		}
	}
}

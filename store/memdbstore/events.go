package memdbstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jobkit/job/store"
)

// DefaultEventBuffer is how many events a Store keeps for followers that
// resume from a cursor, when New is given no WithEventBuffer.
const DefaultEventBuffer = 16384

// WithEventBuffer sets how many of the latest events the store keeps so a
// follower can resume from a cursor (store.Events). A follower whose
// position falls further behind than that (a consumer slower than the
// writes, or a cursor from long ago) gets store.ErrCursorExpired. An event
// costs a few dozen bytes and keeps its instance's record alive until it
// leaves the buffer. Defaults to DefaultEventBuffer; n must be positive.
func WithEventBuffer(n int) Option {
	return func(s *Store) error {
		if n <= 0 {
			return fmt.Errorf("%w: memdbstore.WithEventBuffer(%d); want a positive number of events", store.ErrInvalid, n)
		}
		s.events.size = n
		return nil
	}
}

// putRec is one put of an instance record that added history: old is nil
// for a new instance.
type putRec struct{ old, r *rec }

// ringEvent is one event in the ring: the instance version that holds the
// history record, and the record's index in it (evCreated and evScheduled
// for the enqueue records, which are implied).
type ringEvent struct {
	r *rec
	i int32
}

const (
	evCreated   = -2
	evScheduled = -1
)

// eventLog is the store's ring of the latest events. Events are numbered
// from 1 in the order the writes made them (under the write lock); a
// cursor is the number of the last event delivered. Writers append under
// mu and wake the followers by closing wake; followers read under mu.
type eventLog struct {
	epoch string // tells this store's cursors from another's (or an earlier process's)
	size  int

	mu      sync.Mutex
	ring    []ringEvent
	last    uint64        // number of the newest event; 0 before the first
	wake    chan struct{} // closed and replaced when events are added and someone waits
	waiting bool          // a follower took wake to wait on it
	names   []string      // the name table as of the newest event
}

func (l *eventLog) init() {
	var b [6]byte
	_, _ = rand.Read(b[:])
	l.epoch = hex.EncodeToString(b[:])
	l.wake = make(chan struct{})
}

// first returns the number of the oldest event still in the ring (last+1
// when it is empty). mu is held.
func (l *eventLog) first() uint64 { return l.last - uint64(len(l.ring)) + 1 }

// at returns event n, which must be in the ring. mu is held.
func (l *eventLog) at(n uint64) ringEvent {
	return l.ring[(n-1)%uint64(l.size)]
}

// publish appends the history records the journal's puts added to the
// ring and wakes the followers; called under the store's write lock, so
// events are numbered in the order of the writes.
func (s *Store) publish() {
	if len(s.journal) == 0 {
		return
	}
	l := &s.events
	l.mu.Lock()
	add := func(e ringEvent) {
		l.last++
		if len(l.ring) < l.size {
			l.ring = append(l.ring, e)
		} else {
			l.ring[(l.last-1)%uint64(l.size)] = e
		}
	}
	for _, p := range s.journal {
		from := 0
		if p.old == nil {
			if p.r.enqPruned&1 == 0 {
				add(ringEvent{p.r, evCreated})
			}
			if p.r.enqPruned&2 == 0 {
				add(ringEvent{p.r, evScheduled})
			}
		} else {
			from = len(p.old.hist())
		}
		for i := from; i < len(p.r.hist()); i++ {
			add(ringEvent{p.r, int32(i)})
		}
	}
	l.names = s.nameList()
	if l.waiting {
		close(l.wake)
		l.wake, l.waiting = make(chan struct{}), false
	}
	l.mu.Unlock()
	clear(s.journal)
	s.journal = s.journal[:0]
}

// event materialises e as event number n.
func (l *eventLog) event(e ringEvent, n uint64, names []string) store.Event {
	r := e.r
	ev := store.Event{
		Cursor:     l.cursor(n),
		InstanceID: r.id(),
		Kind:       names[r.kind],
		Queue:      names[r.qid],
	}
	switch e.i {
	case evCreated, evScheduled:
		ev.State, ev.Seq = store.Created, r.seq+1
		if e.i == evScheduled {
			ev.State, ev.Seq = store.Scheduled, r.seq+2
		}
		ev.Time, ev.Node = fromNanos(r.enqAt), names[r.enqNode]
	default:
		h := &r.hist()[e.i]
		ev.State, ev.Attempt, ev.Time, ev.Node, ev.Error, ev.Seq = h.state, int(h.attempt), fromNanos(h.t), h.node, h.err, h.seq
		if h.state == store.Processing {
			// r is the record as the claim left it: RunAt is what it
			// waited for.
			ev.ReadyAt = fromNanos(r.runAt)
		}
	}
	return ev
}

// match reports whether e passes f's filters, before it is materialised.
func match(f *store.FollowParams, e ringEvent, names []string) bool {
	return (f.InstanceID == "" || f.InstanceID == e.r.id()) &&
		(len(f.Kinds) == 0 || slices.Contains(f.Kinds, names[e.r.kind]))
}

func (l *eventLog) cursor(n uint64) string {
	return "m:" + l.epoch + ":" + strconv.FormatUint(n, 10)
}

// parse returns the event number of cursor c: ErrInvalid when c is not a
// cursor of this store (or a number it has not reached), ErrCursorExpired
// when it is of another store or process (whose events are gone) or older
// than the ring.
func (l *eventLog) parse(c string) (uint64, error) {
	rest, ok := strings.CutPrefix(c, "m:")
	epoch, num, ok2 := strings.Cut(rest, ":")
	n, err := strconv.ParseUint(num, 10, 64)
	if !ok || !ok2 || err != nil || len(epoch) != len(l.epoch) {
		return 0, fmt.Errorf("%w: memdbstore: event cursor %q is not a cursor of this store; pass one from an Event or from EventCursor, or none to follow from now", store.ErrInvalid, c)
	}
	if epoch != l.epoch {
		return 0, fmt.Errorf("%w: memdbstore: event cursor %q is from another memdbstore.Store (or an earlier process), whose events are gone; catch up by listing instances, then follow from EventCursor", store.ErrCursorExpired, c)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n > l.last {
		return 0, fmt.Errorf("%w: memdbstore: event cursor %q is past the newest event (%d); pass a cursor this store gave", store.ErrInvalid, c, l.last)
	}
	if n+1 < l.first() {
		return 0, l.expired(n)
	}
	return n, nil
}

// expired is the error of a position n that fell out of the ring. mu is
// held.
func (l *eventLog) expired(n uint64) error {
	return fmt.Errorf("%w: memdbstore: events after %s left the buffer of the latest %d events (raise WithEventBuffer, or consume faster); catch up by listing instances, then follow from EventCursor",
		store.ErrCursorExpired, l.cursor(n), l.size)
}

// EventCursor implements store.Events.
func (s *Store) EventCursor(ctx context.Context) (string, error) {
	if err := ctxErr(ctx, "event cursor"); err != nil {
		return "", err
	}
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	return s.events.cursor(s.events.last), nil
}

// followBatch bounds how many events a follower copies out of the ring
// under its lock at a time.
const followBatch = 256

// Follow implements store.Events: a goroutine per follower reads the ring
// from its position, woken by every write that adds events; it holds no
// events of its own beyond its channel, so a slow follower never slows a
// write, and one that falls more than the ring's size behind ends with an
// error wrapping store.ErrCursorExpired.
func (s *Store) Follow(ctx context.Context, p *store.FollowParams) (<-chan store.Event, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: %w", err)
	}
	if err := ctxErr(ctx, "follow"); err != nil {
		return nil, err
	}
	l := &s.events
	var pos uint64
	if p.Cursor == "" {
		l.mu.Lock()
		pos = l.last
		l.mu.Unlock()
	} else {
		var err error
		if pos, err = l.parse(p.Cursor); err != nil {
			return nil, err
		}
	}
	f := *p
	f.Kinds = append([]string(nil), p.Kinds...)
	out := make(chan store.Event, p.BufferOrDefault())
	go func() {
		defer close(out)
		batch := make([]store.Event, 0, followBatch)
		for {
			batch = batch[:0]
			l.mu.Lock()
			if pos+1 < l.first() {
				err := l.expired(pos)
				l.mu.Unlock()
				select {
				case out <- store.Event{Err: err}:
				case <-ctx.Done():
				}
				return
			}
			names := l.names
			for pos < l.last && len(batch) < cap(batch) {
				pos++
				if e := l.at(pos); match(&f, e, names) {
					batch = append(batch, l.event(e, pos, names))
				}
			}
			wake := l.wake
			caught := pos == l.last
			if caught {
				l.waiting = true
			}
			l.mu.Unlock()
			for _, ev := range batch {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			if caught {
				select {
				case <-wake:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

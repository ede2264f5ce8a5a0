package pgstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// listener is a store's one listening connection: it LISTENs on the
// schema's channel and wakes the subscribers of the queues named in the
// notifications of the store's namespace (and every event feed). When the
// connection fails it reconnects with backoff and then wakes everyone, as
// notifications may have been lost meanwhile.
type listener struct {
	mu     sync.Mutex
	queues map[string]map[chan struct{}]struct{}
	all    map[chan struct{}]struct{}
	// cancels are the SubscribeCancels channels, fed from the schema's
	// cancel channel.
	cancels map[chan store.LeaseRef]struct{}
	ready   chan struct{} // closed once the first LISTEN is in force
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ensureListener starts the listener goroutine on first use.
func (s *Store) ensureListener() *listener {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.listener == nil {
		s.listener = &listener{queues: map[string]map[chan struct{}]struct{}{}, all: map[chan struct{}]struct{}{}, cancels: map[chan store.LeaseRef]struct{}{}, ready: make(chan struct{})}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.listen(s.listener)
		}()
	}
	return s.listener
}

// Subscribe implements store.Notifier: the channel receives a value when
// an Enqueue, retry, rescue, release or resume of queue commits
// (PostgreSQL delivers the transaction's notifications at its commit,
// once per distinct queue). It is closed when ctx ends or the store is
// closed.
func (s *Store) Subscribe(ctx context.Context, queue string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.wrap(ctx, "subscribe", err)
	}
	l := s.ensureListener()
	in := make(chan struct{}, 1)
	l.mu.Lock()
	if l.queues[queue] == nil {
		l.queues[queue] = map[chan struct{}]struct{}{}
	}
	l.queues[queue][in] = struct{}{}
	l.mu.Unlock()
	// Wait (briefly) for the LISTEN, so a notification sent after
	// Subscribe returns is not missed; when the database is unreachable
	// the subscription still works once the listener connects, and it
	// wakes every subscriber then.
	select {
	case <-l.ready:
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	out := make(chan struct{}, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer func() {
			l.mu.Lock()
			delete(l.queues[queue], in)
			if len(l.queues[queue]) == 0 {
				delete(l.queues, queue)
			}
			l.mu.Unlock()
		}()
		for {
			select {
			case <-in:
				if s.cfg.debounce > 0 {
					select {
					case <-time.After(s.cfg.debounce):
					case <-ctx.Done():
						return
					case <-s.closed:
						return
					}
				}
				poke(out)
			case <-ctx.Done():
				return
			case <-s.closed:
				return
			}
		}
	}()
	return out, nil
}

// subscribeAll returns a channel woken by every notification of the
// namespace, for an event feed, and the func that ends it.
func (s *Store) subscribeAll() (<-chan struct{}, func()) {
	l := s.ensureListener()
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	l.all[ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.all, ch)
		l.mu.Unlock()
	}
}

// wakeAll wakes every subscriber (after a reconnect).
func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, subs := range l.queues {
		for ch := range subs {
			poke(ch)
		}
	}
	for ch := range l.all {
		poke(ch)
	}
}

func (l *listener) wake(queue string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.queues[queue] {
		poke(ch)
	}
	for ch := range l.all {
		poke(ch)
	}
}

// listen runs until the store is closed.
func (s *Store) listen(l *listener) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.closed
		cancel()
	}()
	wait := 50 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, l, &first)
		if ctx.Err() != nil {
			return
		}
		_ = err // the connection failed: reconnect after a pause
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// listenOnce takes a connection out of the pool (it never goes back),
// LISTENs and delivers notifications until the connection fails.
func (s *Store) listenOnce(ctx context.Context, l *listener, first *bool) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack()
	defer conn.Close(context.Background())
	// The wake-up channel last: pg_stat_activity shows the connection's
	// last statement, LISTEN "jobkit_<schema>".
	for _, ch := range []string{s.cancels, s.channel} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	if *first {
		close(l.ready)
	} else {
		l.wakeAll() // notifications may have been lost while disconnected
	}
	*first = false
	prefix := strconv.Itoa(len(s.cfg.ns)) + ":" + s.cfg.ns
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Channel == s.cancels {
			if ref, ok := s.parseCancel(n.Payload); ok {
				l.noticeCancel(ref)
			}
			continue
		}
		if q, ok := strings.CutPrefix(n.Payload, prefix); ok {
			l.wake(q)
		}
	}
}

package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Event cursors are "pg1-<tag>-<pos>": the position of the last history
// record delivered, and a tag of the schema and namespace so a cursor of
// another store is refused. History positions are taken in commit order
// (see final), so following them in order misses nothing.

func (s *Store) cursorTag() string {
	h := fnv.New32a()
	h.Write([]byte(s.cfg.schema + "\x00" + s.cfg.ns))
	return fmt.Sprintf("%08x", h.Sum32())
}

func (s *Store) cursor(pos int64) string {
	return "pg1-" + s.cursorTag() + "-" + strconv.FormatInt(pos, 10)
}

func (s *Store) parseCursor(c string) (int64, error) {
	parts := strings.Split(c, "-")
	if len(parts) != 3 || parts[0] != "pg1" {
		return 0, fmt.Errorf("%w: event cursor %q is not a pgstore cursor; take one with EventCursor", store.ErrInvalid, c)
	}
	if parts[1] != s.cursorTag() {
		return 0, fmt.Errorf("%w: event cursor %q belongs to another schema or namespace than %q/%q", store.ErrInvalid, c, s.cfg.schema, s.cfg.ns)
	}
	pos, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || pos < 0 {
		return 0, fmt.Errorf("%w: event cursor %q is malformed", store.ErrInvalid, c)
	}
	return pos, nil
}

// EventCursor implements store.Events.
func (s *Store) EventCursor(ctx context.Context) (string, error) {
	var pos int64
	err := s.q(ctx).QueryRow(ctx, `SELECT greatest(
			coalesce((SELECT max(pos) FROM `+s.t("history")+` WHERE ns = $1), 0),
			coalesce((SELECT events_floor FROM `+s.t("meta")+` WHERE ns = $1), 0))`, s.cfg.ns).Scan(&pos)
	if err != nil {
		return "", s.wrap(ctx, "event cursor", err)
	}
	return s.cursor(pos), nil
}

// check returns an error when pos is from the future (never given out) or
// before what the history still holds.
func (s *Store) checkPos(ctx context.Context, pos int64) error {
	var last, floor int64
	err := s.q(ctx).QueryRow(ctx, `SELECT (SELECT last_value FROM `+s.t("seq")+`),
		coalesce((SELECT events_floor FROM `+s.t("meta")+` WHERE ns = $1), 0)`, s.cfg.ns).Scan(&last, &floor)
	if err != nil {
		return s.wrap(ctx, "follow", err)
	}
	if pos > last {
		return fmt.Errorf("%w: event cursor at position %d is from the future (the newest is %d); take one with EventCursor", store.ErrInvalid, pos, last)
	}
	return s.expired(pos, floor)
}

func (s *Store) expired(pos, floor int64) error {
	if pos < floor {
		return fmt.Errorf("pgstore: follow from position %d: history up to %d was pruned: %w; catch up: take a cursor with EventCursor, list the instances, then follow from that cursor", pos, floor, store.ErrCursorExpired)
	}
	return nil
}

// Follow implements store.Events: it reads the history in position order,
// woken by the store's notifications and polling every WithPollInterval.
func (s *Store) Follow(ctx context.Context, p *store.FollowParams) (<-chan store.Event, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: follow: %w", err)
	}
	var pos int64
	if p.Cursor == "" {
		c, err := s.EventCursor(ctx)
		if err != nil {
			return nil, err
		}
		pos, _ = s.parseCursor(c)
	} else {
		var err error
		if pos, err = s.parseCursor(p.Cursor); err != nil {
			return nil, err
		}
		if err := s.checkPos(ctx, pos); err != nil {
			return nil, err
		}
	}
	f := *p
	f.Kinds = append([]string(nil), p.Kinds...)
	out := make(chan store.Event, p.BufferOrDefault())
	wake, stop := s.subscribeAll()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer stop()
		s.feed(ctx, &f, pos, wake, out)
	}()
	return out, nil
}

// feedBatch is how many history records one read of a feed takes.
const feedBatch = 500

func (s *Store) feed(ctx context.Context, f *store.FollowParams, pos int64, wake <-chan struct{}, out chan<- store.Event) {
	fail := func(err error) {
		select {
		case out <- store.Event{Err: err}:
		case <-ctx.Done():
		case <-s.closed:
		}
	}
	poll := time.NewTimer(s.cfg.poll)
	defer poll.Stop()
	errWait := 50 * time.Millisecond
	for {
		n, err := s.feedOnce(ctx, f, &pos, out)
		switch {
		case ctx.Err() != nil || errors.Is(err, errClosed):
			return
		case err != nil && isExpired(err):
			fail(err)
			return
		case err != nil:
			// The database is unreachable: try again, backing off.
			select {
			case <-time.After(errWait):
			case <-ctx.Done():
				return
			case <-s.closed:
				return
			}
			errWait = min(2*errWait, 5*time.Second)
			continue
		}
		errWait = 50 * time.Millisecond
		if n == feedBatch {
			continue
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(s.cfg.poll)
		select {
		case <-wake:
		case <-poll.C:
		case <-ctx.Done():
			return
		case <-s.closed:
			return
		}
	}
}

func isExpired(err error) bool { return errors.Is(err, store.ErrCursorExpired) }

var errClosed = errors.New("pgstore: store closed")

// feedOnce delivers the records after *pos, at most feedBatch, advancing
// *pos; it returns how many it read.
func (s *Store) feedOnce(ctx context.Context, f *store.FollowParams, pos *int64, out chan<- store.Event) (int, error) {
	// A Processing record's ready time is the instance's run_at while the
	// instance is at that attempt and not Scheduled again (a retry moves
	// run_at to the next attempt's).
	rows, err := s.pool.Query(ctx, `SELECT coalesce((SELECT events_floor FROM `+s.t("meta")+` WHERE ns = $1), 0), h.pos,
			h.instance_id, h.kind, h.queue, h.state, h.attempt, h.t, h.node, h.error,
			CASE WHEN h.state = 3 THEN (SELECT i.run_at FROM `+s.t("instances")+` i
				WHERE i.ns = $1 AND i.id = h.instance_id AND i.attempt = h.attempt AND i.state <> 2) END
		FROM (SELECT 1) AS one LEFT JOIN LATERAL (SELECT * FROM `+s.t("history")+` WHERE ns = $1 AND pos > $2 ORDER BY pos LIMIT $3) AS h ON true`,
		s.cfg.ns, *pos, feedBatch)
	if err != nil {
		return 0, err
	}
	var evs []store.Event
	var floor int64
	for rows.Next() {
		var hp, t, ready *int64
		var id, kind, queue, node, msg *string
		var st *int16
		var att *int32
		if err := rows.Scan(&floor, &hp, &id, &kind, &queue, &st, &att, &t, &node, &msg, &ready); err != nil {
			rows.Close()
			return 0, err
		}
		if hp == nil {
			continue
		}
		evs = append(evs, store.Event{Cursor: s.cursor(*hp), InstanceID: *id, Kind: *kind, Queue: *queue,
			State: store.State(*st), Attempt: int(*att), Time: fromNanos(*t), Node: *node, Error: *msg, Seq: uint64(*hp)})
		if ready != nil {
			evs[len(evs)-1].ReadyAt = fromNanos(*ready)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if err := s.expired(*pos, floor); err != nil {
		return 0, err
	}
	for i := range evs {
		e := &evs[i]
		if f.Match(e) {
			select {
			case out <- *e:
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-s.closed:
				return 0, errClosed
			}
		}
		*pos = int64(e.Seq)
	}
	return len(evs), nil
}

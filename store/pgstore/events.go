package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Event cursors are "pg2-<tag>-<rec>": the number of the last history
// record delivered, and a tag of the schema and namespace so a cursor of
// another store is refused. A history row at position pos holds record
// 2*pos+1, and, when its created flag is set (migration 0007), the
// instance's Created record 2*pos just before it (recNum). History
// positions are taken in commit order (see final), so following them in
// order misses nothing. A "pg1-<tag>-<pos>" cursor, given out before
// version 7, names position pos: record 2*pos+1.

// recNum is the number of a record of the history row at pos: its own
// (created false), or the Created record the row holds.
func recNum(pos int64, created bool) int64 {
	if created {
		return 2 * pos
	}
	return 2*pos + 1
}

func (s *Store) cursorTag() string {
	h := fnv.New32a()
	h.Write([]byte(s.cfg.schema + "\x00" + s.cfg.ns))
	return fmt.Sprintf("%08x", h.Sum32())
}

func (s *Store) cursor(rec int64) string {
	return "pg2-" + s.cursorTag() + "-" + strconv.FormatInt(rec, 10)
}

// parseCursor returns the record number c names.
func (s *Store) parseCursor(c string) (int64, error) {
	parts := strings.Split(c, "-")
	if len(parts) != 3 || parts[0] != "pg2" && parts[0] != "pg1" {
		return 0, fmt.Errorf("%w: event cursor %q is not a pgstore cursor; take one with EventCursor", store.ErrInvalid, c)
	}
	if parts[1] != s.cursorTag() {
		return 0, fmt.Errorf("%w: event cursor %q belongs to another schema or namespace than %q/%q", store.ErrInvalid, c, s.cfg.schema, s.cfg.ns)
	}
	n, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || n < 0 || parts[0] == "pg1" && n > (math.MaxInt64-1)/2 {
		return 0, fmt.Errorf("%w: event cursor %q is malformed", store.ErrInvalid, c)
	}
	if parts[0] == "pg1" {
		return recNum(n, false), nil
	}
	return n, nil
}

// EventCursor implements store.Events.
func (s *Store) EventCursor(ctx context.Context) (string, error) {
	var pos int64
	// The running attempts' Processing records (migration 0008) are on
	// their instance rows, and may be newer than every history row.
	err := s.q(ctx).QueryRow(ctx, `SELECT greatest(
			coalesce((SELECT max(pos) FROM `+s.t("history")+` WHERE ns = $1), 0),
			coalesce((SELECT max(proc_pos) FROM `+s.t("instances")+` WHERE ns = $1 AND state = 3), 0),
			coalesce((SELECT events_floor FROM `+s.t("meta")+` WHERE ns = $1), 0))`, s.cfg.ns).Scan(&pos)
	if err != nil {
		return "", s.wrap(ctx, "event cursor", err)
	}
	return s.cursor(recNum(pos, false)), nil
}

// checkPos returns an error when record rec is from the future (never
// given out) or before what the history still holds.
func (s *Store) checkPos(ctx context.Context, rec int64) error {
	var last, floor int64
	err := s.q(ctx).QueryRow(ctx, `SELECT (SELECT last_value FROM `+s.t("seq")+`),
		coalesce((SELECT events_floor FROM `+s.t("meta")+` WHERE ns = $1), 0)`, s.cfg.ns).Scan(&last, &floor)
	if err != nil {
		return s.wrap(ctx, "follow", err)
	}
	if rec > recNum(last, false) {
		return fmt.Errorf("%w: event cursor at record %d is from the future (the newest is %d); take one with EventCursor", store.ErrInvalid, rec, recNum(last, false))
	}
	return s.expired(rec, floor)
}

// expired returns ErrCursorExpired when record rec is before the records
// of the rows up to position floor, which were pruned.
func (s *Store) expired(rec, floor int64) error {
	if rec < recNum(floor, false) {
		return fmt.Errorf("pgstore: follow from record %d: history up to %d was pruned: %w; catch up: take a cursor with EventCursor, list the instances, then follow from that cursor", rec, recNum(floor, false), store.ErrCursorExpired)
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

// feedOnce delivers the records after record *rec, from at most
// feedBatch rows of each of the three places records are read from,
// advancing *rec; it returns feedBatch when a place had more.
//
// The places, all read in one statement (one snapshot): history rows
// (their own record, and the Created record a row may hold), the
// Processing records of finished attempts (in the outcome's history row,
// proc_pos, migration 0008) and those of running attempts (on the
// instance row). Each is read in position order from the position of
// the first record after *rec, (*rec+1)/2 (see recNum); a Processing
// record at proc_pos is record 2*proc_pos+1. When a place returns a full
// batch, only records up to its last position are delivered, so the
// merged order has no gap.
func (s *Store) feedOnce(ctx context.Context, f *store.FollowParams, rec *int64, out chan<- store.Event) (int, error) {
	from := max((*rec+1)/2, 1)
	rows, err := s.pool.Query(ctx, feedSQL(s),
		s.cfg.ns, from, feedBatch)
	if err != nil {
		return 0, err
	}
	var evs []store.Event
	var floor int64
	var count [3]int
	var last [3]int64
	for rows.Next() {
		var part *int32
		var hp, t, ready *int64
		var created *bool
		var id, kind, queue, node, msg *string
		var st *int16
		var att *int32
		if err := rows.Scan(&floor, &part, &hp, &created, &id, &kind, &queue, &st, &att, &t, &node, &msg, &ready); err != nil {
			rows.Close()
			return 0, err
		}
		if hp == nil {
			continue
		}
		count[*part]++
		last[*part] = max(last[*part], *hp)
		if *created && recNum(*hp, true) > *rec {
			c := recNum(*hp, true)
			evs = append(evs, store.Event{Cursor: s.cursor(c), InstanceID: *id, Kind: *kind, Queue: *queue,
				State: store.Created, Time: fromNanos(*t), Node: *node, Seq: uint64(c)})
		}
		c := recNum(*hp, false)
		evs = append(evs, store.Event{Cursor: s.cursor(c), InstanceID: *id, Kind: *kind, Queue: *queue,
			State: store.State(*st), Attempt: int(*att), Time: fromNanos(*t), Node: *node, Error: *msg, Seq: uint64(c)})
		if ready != nil {
			evs[len(evs)-1].ReadyAt = fromNanos(*ready)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if err := s.expired(*rec, floor); err != nil {
		return 0, err
	}
	// Deliver up to the last position of every place that had more.
	upTo, n := int64(math.MaxInt64), 0
	for p := range count {
		if count[p] == feedBatch {
			upTo, n = min(upTo, recNum(last[p], false)), feedBatch
		}
	}
	slices.SortFunc(evs, func(a, b store.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	for i := range evs {
		e := &evs[i]
		if int64(e.Seq) > upTo {
			break
		}
		if f.Match(e) {
			select {
			case out <- *e:
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-s.closed:
				return 0, errClosed
			}
		}
		*rec = int64(e.Seq)
	}
	return n, nil
}

// feedSQL is feedOnce's statement: $1 the namespace, $2 the first
// position to read, $3 the rows to read from each place.
func feedSQL(s *Store) string {
	// A Processing record's ready time is the instance's run_at while
	// the instance is at that attempt and not Scheduled again (a retry
	// moves run_at to the next attempt's).
	ready := func(id, attempt string) string {
		return `(SELECT i.run_at FROM ` + s.t("instances") + ` i WHERE i.ns = $1 AND i.id = ` + id + ` AND i.attempt = ` + attempt + ` AND i.state <> 2)`
	}
	return `SELECT coalesce((SELECT events_floor FROM ` + s.t("meta") + ` WHERE ns = $1), 0),
			h.part, h.pos, h.created, h.instance_id, h.kind, h.queue, h.state, h.attempt, h.t, h.node, h.error, h.ready
		FROM (SELECT 1) AS one LEFT JOIN LATERAL (
			(SELECT 0 AS part, pos, created, instance_id, kind, queue, state, attempt, t, node, error,
					CASE WHEN state = 3 THEN ` + ready("history.instance_id", "history.attempt") + ` END AS ready
				FROM ` + s.t("history") + ` WHERE ns = $1 AND pos >= $2 ORDER BY pos LIMIT $3)
			UNION ALL
			(SELECT 1, proc_pos, false, instance_id, kind, queue, 3::int2, attempt, proc_t, coalesce(proc_node, node), '',
					` + ready("history.instance_id", "history.attempt") + `
				FROM ` + s.t("history") + ` WHERE ns = $1 AND proc_pos >= $2 AND proc_pos > 0 ORDER BY proc_pos LIMIT $3)
			UNION ALL
			(SELECT 2, proc_pos, false, id, kind, queue, 3::int2, attempt, proc_t, coalesce(lease_owner, ''), '', run_at
				FROM ` + s.t("instances") + ` WHERE ns = $1 AND state = 3 AND proc_pos >= $2 AND proc_pos > 0 ORDER BY proc_pos LIMIT $3)
		) AS h ON true`
}

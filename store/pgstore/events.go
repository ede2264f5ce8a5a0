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

// The event feed's order (migration 0010): each history record has a
// place (hx, rec), where hx is the id of the transaction that wrote it,
// raised to its instance's previous record's hx when that is higher, and
// rec the record's number from its row's position: a history row at
// position pos holds record 2*pos+1 and, when its created flag is set
// (migration 0007), the instance's Created record 2*pos just before it
// (recNum). The feed delivers records in place order, and only those
// whose hx is below the xmin of the snapshot it reads with: every
// transaction that could still commit a record with such a place has
// ended, so no record ever commits behind the feed, and no lock orders
// the writers. Records of one instance keep their order (a later
// transition locks the instance row after the earlier one committed: its
// pos is greater and its hx no lower). Rows written before version 10
// have hx 0, and come first in position order, their commit order then.
// An enqueue's records (migration 0012) are the pairs of a row of
// enqueued, at the place (hx, 2*Seq) and (hx, 2*Seq+1) of each instance
// it stored: a Seq comes from the sequence history positions come from,
// and the row's hx is its transaction's id, as a history row's. The
// outcome a finished instance row holds (migration 0013) is at (hx,
// 2*fin_pos+1), hx being the finish's, which no later write changes
// (Admin.Retry first moves the row's records into a history row at the
// same places).
//
// Event cursors are "pg3-<tag>-<hx>-<rec>": the place of the last record
// delivered, with a tag of the schema and namespace so a cursor of another
// store is refused. Cursors of before version 10 are still followed: a
// "pg2-<tag>-<rec>" names record rec, place (0, rec), and a
// "pg1-<tag>-<pos>" (before version 7) position pos, record 2*pos+1.

// recNum is the number of a record of the history row at pos: its own
// (created false), or the Created record the row holds.
func recNum(pos int64, created bool) int64 {
	if created {
		return 2 * pos
	}
	return 2*pos + 1
}

// place is a record's place in the feed's order.
type place struct {
	hx  uint64 // the writing transaction's id, raised (see above)
	rec int64
}

func (a place) cmp(b place) int { return cmp.Or(cmp.Compare(a.hx, b.hx), cmp.Compare(a.rec, b.rec)) }

// xid8 is the text of hx as PostgreSQL reads an xid8.
func (a place) xid8() string { return strconv.FormatUint(a.hx, 10) }

// parseXid8 reads the text of an xid8.
func parseXid8(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

func (s *Store) cursorTag() string {
	h := fnv.New32a()
	h.Write([]byte(s.cfg.schema + "\x00" + s.cfg.ns))
	return fmt.Sprintf("%08x", h.Sum32())
}

func (s *Store) cursor(p place) string {
	return "pg3-" + s.cursorTag() + "-" + p.xid8() + "-" + strconv.FormatInt(p.rec, 10)
}

// parseCursor returns the place c names.
func (s *Store) parseCursor(c string) (place, error) {
	parts := strings.Split(c, "-")
	switch {
	case len(parts) == 4 && parts[0] == "pg3":
	case len(parts) == 3 && (parts[0] == "pg2" || parts[0] == "pg1"):
		parts = []string{parts[0], parts[1], "0", parts[2]}
	default:
		return place{}, fmt.Errorf("%w: event cursor %q is not a pgstore cursor; take one with EventCursor", store.ErrInvalid, c)
	}
	if parts[1] != s.cursorTag() {
		return place{}, fmt.Errorf("%w: event cursor %q belongs to another schema or namespace than %q/%q", store.ErrInvalid, c, s.cfg.schema, s.cfg.ns)
	}
	hx, err := parseXid8(parts[2])
	n, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || err2 != nil || hx > math.MaxInt64 || n < 0 || parts[0] == "pg1" && n > (math.MaxInt64-1)/2 {
		return place{}, fmt.Errorf("%w: event cursor %q is malformed", store.ErrInvalid, c)
	}
	if parts[0] == "pg1" {
		n = recNum(n, false)
	}
	return place{hx, n}, nil
}

// EventCursor implements store.Events. The cursor is the place (xmax, 0)
// of the snapshot EventCursor reads with: every record committed before
// the call is before it, and every record of a transaction that starts
// after is after it. EventCursor then waits until the writing
// transactions open at its call (anywhere in the cluster) have ended, so
// what a caller reads after it (listing the instances to catch up) holds
// every record before the cursor. Inside a caller's transaction (WithTx)
// it does not wait.
func (s *Store) EventCursor(ctx context.Context) (string, error) {
	p, err := s.nowPlace(ctx, txFrom(ctx) == nil)
	if err != nil {
		return "", err
	}
	return s.cursor(p), nil
}

// nowPlace returns the place (xmax, 0) of a snapshot taken now, once the
// transactions that snapshot saw running have ended when wait is set.
func (s *Store) nowPlace(ctx context.Context, wait bool) (place, error) {
	var xmin, xmax string
	err := s.q(ctx).QueryRow(ctx, `SELECT pg_snapshot_xmin(c)::text, pg_snapshot_xmax(c)::text FROM pg_current_snapshot() AS c`).Scan(&xmin, &xmax)
	if err != nil {
		return place{}, s.wrap(ctx, "event cursor", err)
	}
	top, err := parseXid8(xmax)
	if err != nil {
		return place{}, fmt.Errorf("pgstore: event cursor: snapshot xmax %q: %w", xmax, err)
	}
	pause := time.Millisecond
	for wait && xmin != xmax {
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return place{}, s.wrap(ctx, "event cursor", ctx.Err())
		}
		pause = min(2*pause, 50*time.Millisecond)
		var done bool
		err := s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::text::xid8`, xmax).Scan(&done)
		if err != nil {
			return place{}, s.wrap(ctx, "event cursor", err)
		}
		if done {
			break
		}
	}
	return place{top, 0}, nil
}

// checkPlace returns an error when p is from the future (never given
// out) or before what the history still holds.
func (s *Store) checkPlace(ctx context.Context, p place) error {
	var last int64
	var xmax, floorHx string
	var floor int64
	err := s.q(ctx).QueryRow(ctx, `SELECT (SELECT last_value FROM `+s.t("seq")+`), pg_snapshot_xmax(pg_current_snapshot())::text,
		coalesce((SELECT events_floor_hx FROM `+s.t("meta")+` WHERE ns = $1), '0')::text,
		coalesce((SELECT events_floor FROM `+s.t("meta")+` WHERE ns = $1), 0)`, s.cfg.ns).Scan(&last, &xmax, &floorHx, &floor)
	if err != nil {
		return s.wrap(ctx, "follow", err)
	}
	top, err1 := parseXid8(xmax)
	fhx, err2 := parseXid8(floorHx)
	if err := cmp.Or(err1, err2); err != nil {
		return fmt.Errorf("pgstore: follow: %w", err)
	}
	if p.hx > top || p.rec > recNum(last, false) {
		return fmt.Errorf("%w: event cursor at %s is from the future (the newest record is %d, the next transaction %d); take one with EventCursor",
			store.ErrInvalid, s.cursor(p), recNum(last, false), top)
	}
	return s.expired(p, place{fhx, recNum(floor, false)})
}

// expired returns ErrCursorExpired when p is before floor, the place of
// the newest record pruned.
func (s *Store) expired(p, floor place) error {
	if p.cmp(floor) < 0 {
		return fmt.Errorf("pgstore: follow from %s: history up to %s was pruned: %w; catch up: take a cursor with EventCursor, list the instances, then follow from that cursor",
			s.cursor(p), s.cursor(floor), store.ErrCursorExpired)
	}
	return nil
}

// Follow implements store.Events: it reads the history in the feed's
// order (see place), woken by the store's notifications and polling every
// WithPollInterval. A follow without a cursor starts at the place of a
// snapshot taken at the call (without EventCursor's wait): writes still
// open then are before it.
func (s *Store) Follow(ctx context.Context, p *store.FollowParams) (<-chan store.Event, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: follow: %w", err)
	}
	var from place
	if p.Cursor == "" {
		var err error
		if from, err = s.nowPlace(ctx, false); err != nil {
			return nil, err
		}
	} else {
		var err error
		if from, err = s.parseCursor(p.Cursor); err != nil {
			return nil, err
		}
		if err := s.checkPlace(ctx, from); err != nil {
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
		s.feed(ctx, &f, from, wake, out)
	}()
	return out, nil
}

// feedBatch is how many history records one read of a feed takes.
const feedBatch = 500

func (s *Store) feed(ctx context.Context, f *store.FollowParams, at place, wake <-chan struct{}, out chan<- store.Event) {
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
		n, err := s.feedOnce(ctx, f, &at, out)
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

// feedOnce delivers the records after place *at, from at most feedBatch
// records of each of the six places records are read from, advancing *at;
// it returns feedBatch when a place had more.
//
// The places, all read in one statement (one snapshot, whose xmin bounds
// the hx of what is read): history rows (their own record, and the
// Created record a row may hold), the Processing records of finished
// attempts (in the outcome's history row, proc_pos and proc_hx,
// migrations 0008 and 0010), those of running attempts (on the
// instance row) and the Created and Scheduled records of enqueues (the
// pairs of enqueued rows, migration 0012, each read as a history row
// holding a Created record at position Seq: the rows in (hx, last)
// order from the one that holds the first record after *at, their pairs
// in Seq order), and the outcome and Processing record a finished
// instance row holds (migration 0013). Each is read in the feed's order from (hx, pos) of the
// first record after *at, pos (rec+1)/2 (see recNum); a Processing record
// at proc_pos is record 2*proc_pos+1. When a place returns a full batch,
// only records up to its last place are delivered, so the merged order
// has no gap.
func (s *Store) feedOnce(ctx context.Context, f *store.FollowParams, at *place, out chan<- store.Event) (int, error) {
	from := max((at.rec+1)/2, 1)
	rows, err := s.pool.Query(ctx, feedSQL(s), s.cfg.ns, at.xid8(), from, feedBatch)
	if err != nil {
		return 0, err
	}
	type placed struct {
		at place
		ev store.Event
	}
	var evs []placed
	var floorHx string
	var floor int64
	var count [6]int
	var last [6]place
	for rows.Next() {
		var part *int32
		var hx *string
		var hp, t, ready *int64
		var created *bool
		var id, kind, queue, node, msg *string
		var st *int16
		var att *int32
		if err := rows.Scan(&floorHx, &floor, &part, &hx, &hp, &created, &id, &kind, &queue, &st, &att, &t, &node, &msg, &ready); err != nil {
			rows.Close()
			return 0, err
		}
		if hp == nil {
			continue
		}
		k, err := parseXid8(*hx)
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("pgstore: follow: record hx %q: %w", *hx, err)
		}
		count[*part]++
		if p := (place{k, recNum(*hp, false)}); p.cmp(last[*part]) > 0 {
			last[*part] = p
		}
		if c := (place{k, recNum(*hp, true)}); *created && c.cmp(*at) > 0 {
			evs = append(evs, placed{c, store.Event{Cursor: s.cursor(c), InstanceID: *id, Kind: *kind, Queue: *queue,
				State: store.Created, Time: fromNanos(*t), Node: *node, Seq: uint64(c.rec)}})
		}
		c := place{k, recNum(*hp, false)}
		e := store.Event{Cursor: s.cursor(c), InstanceID: *id, Kind: *kind, Queue: *queue,
			State: store.State(*st), Attempt: int(*att), Time: fromNanos(*t), Node: *node, Error: *msg, Seq: uint64(c.rec)}
		if ready != nil {
			e.ReadyAt = fromNanos(*ready)
		}
		evs = append(evs, placed{c, e})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	fhx, err := parseXid8(floorHx)
	if err != nil {
		return 0, fmt.Errorf("pgstore: follow: floor hx %q: %w", floorHx, err)
	}
	if err := s.expired(*at, place{fhx, recNum(floor, false)}); err != nil {
		return 0, err
	}
	// Deliver up to the last place of every part that had more.
	upTo, n := place{math.MaxUint64, math.MaxInt64}, 0
	for p := range count {
		if count[p] == feedBatch {
			n = feedBatch
			if last[p].cmp(upTo) < 0 {
				upTo = last[p]
			}
		}
	}
	slices.SortFunc(evs, func(a, b placed) int { return a.at.cmp(b.at) })
	for i := range evs {
		e := &evs[i]
		if e.at.cmp(*at) <= 0 {
			continue // at or before the cursor (the rest of a row read again)
		}
		if e.at.cmp(upTo) > 0 {
			break
		}
		if f.Match(&e.ev) {
			select {
			case out <- e.ev:
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-s.closed:
				return 0, errClosed
			}
		}
		*at = e.at
	}
	return n, nil
}

// feedSQL is feedOnce's statement: $1 the namespace, $2 and $3 the hx
// (text) and the position to read from, $4 the rows to read from each
// place.
func feedSQL(s *Store) string {
	// A Processing record's ready time is the instance's run_at while
	// the instance is at that attempt and not Scheduled again (a retry
	// moves run_at to the next attempt's).
	ready := func(id, attempt string) string {
		return `(SELECT i.run_at FROM ` + s.t("instances") + ` i WHERE i.ns = $1 AND i.id = ` + id + ` AND i.attempt = ` + attempt + ` AND i.state <> 2)`
	}
	// What every transaction that could still write has ended before.
	const horizon = `pg_snapshot_xmin(pg_current_snapshot())`
	const procHx = `coalesce(proc_hx, '0'::xid8)`
	return `SELECT coalesce((SELECT events_floor_hx FROM ` + s.t("meta") + ` WHERE ns = $1), '0')::text,
			coalesce((SELECT events_floor FROM ` + s.t("meta") + ` WHERE ns = $1), 0),
			h.part, h.hx::text, h.pos, h.created, h.instance_id, h.kind, h.queue, h.state, h.attempt, h.t, h.node, h.error, h.ready
		FROM (SELECT 1) AS one LEFT JOIN LATERAL (
			(SELECT 0 AS part, hx, pos, created, instance_id, kind, queue, state, attempt, t, node, error,
					CASE WHEN state = 3 THEN ` + ready("history.instance_id", "history.attempt") + ` END AS ready
				FROM ` + s.t("history") + ` WHERE ns = $1 AND (hx, pos) >= ($2::text::xid8, $3) AND hx < ` + horizon + `
				ORDER BY hx, pos LIMIT $4)
			UNION ALL
			(SELECT 1, ` + procHx + `, proc_pos, false, instance_id, kind, queue, 3::int2, attempt, proc_t, coalesce(proc_node, node), '',
					` + ready("history.instance_id", "history.attempt") + `
				FROM ` + s.t("history") + ` WHERE ns = $1 AND proc_pos > 0 AND (` + procHx + `, proc_pos) >= ($2::text::xid8, $3) AND ` + procHx + ` < ` + horizon + `
				ORDER BY ` + procHx + `, proc_pos LIMIT $4)
			UNION ALL
			(SELECT 2, ` + procHx + `, proc_pos, false, id, kind, queue, 3::int2, attempt, proc_t, coalesce(lease_owner, ''), '', run_at
				FROM ` + s.t("instances") + ` WHERE ns = $1 AND state = 3 AND proc_pos > 0 AND (` + procHx + `, proc_pos) >= ($2::text::xid8, $3) AND ` + procHx + ` < ` + horizon + `
				ORDER BY ` + procHx + `, proc_pos LIMIT $4)
			UNION ALL
			(SELECT 3, e.hx, r.seq, 2 * r.o - 2 >= e.cut, r.id, r.kind, r.queue, 2::int2, 0, e.t, e.node, '', NULL::int8
				FROM ` + s.t("enqueued") + ` e, LATERAL unnest(e.seqs, e.ids, e.kinds, e.queues) WITH ORDINALITY AS r(seq, id, kind, queue, o)
				WHERE e.ns = $1 AND (e.hx, e.last) >= ($2::text::xid8, $3) AND e.hx < ` + horizon + `
					AND (e.hx, r.seq) >= ($2::text::xid8, $3) AND r.id IS NOT NULL AND 2 * r.o - 1 >= e.cut
				ORDER BY e.hx, r.seq LIMIT $4)
			UNION ALL
			(SELECT 4, hx, fin_pos, false, id, kind, queue, state, attempt, finished_at, coalesce(fin_node, ''), error, NULL::int8
				FROM ` + s.t("instances") + ` WHERE ns = $1 AND state >= 4 AND fin_pos > 0 AND (hx, fin_pos) >= ($2::text::xid8, $3) AND hx < ` + horizon + `
				ORDER BY hx, fin_pos LIMIT $4)
			UNION ALL
			(SELECT 5, ` + procHx + `, proc_pos, false, id, kind, queue, 3::int2, attempt, proc_t, coalesce(fin_node, ''), '', run_at
				FROM ` + s.t("instances") + ` WHERE ns = $1 AND state >= 4 AND fin_pos > 0 AND proc_pos > 0
					AND (` + procHx + `, proc_pos) >= ($2::text::xid8, $3) AND ` + procHx + ` < ` + horizon + `
				ORDER BY ` + procHx + `, proc_pos LIMIT $4)
		) AS h ON true`
}

package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// DefaultPageSize is the page size of a paged lookup whose Query.Limit is
// 0.
const DefaultPageSize = 100

// MaxPageSize is the largest Query.Limit a paged lookup takes; more is
// ErrInvalid, so no page is unbounded.
const MaxPageSize = 1000

// pageSize returns the page size q asks for.
func pageSize(q *Query) (int, error) {
	switch {
	case q.Limit < 0:
		return 0, fmt.Errorf("%w: negative page size %d", ErrInvalid, q.Limit)
	case q.Limit == 0:
		return DefaultPageSize, nil
	case q.Limit > MaxPageSize:
		return 0, fmt.Errorf("%w: page size %d is above MaxPageSize (%d); ask for at most %d and follow the Next cursor", ErrInvalid, q.Limit, MaxPageSize, MaxPageSize)
	}
	return q.Limit, nil
}

// The lookups a cursor can continue.
const (
	orderInstances byte = 1
	orderHistory   byte = 2
	orderLogs      byte = 3
)

var orderNames = map[byte]string{orderInstances: "instances", orderHistory: "history", orderLogs: "logs"}

// cursorVersion is the first byte of every cursor; a cursor of another
// version is refused, so the format can change.
const cursorVersion = 1

// position is where a page ended: the time, sequence number and instance
// ID of its last item.
type position struct {
	t   int64
	seq uint64
	id  string
}

// queryHash is a digest of what q selects (everything but Limit and
// Cursor), so a cursor is only taken by the query that made it.
func queryHash(q *Query) [8]byte {
	var b bytes.Buffer
	str := func(s string) {
		_ = binary.Write(&b, binary.BigEndian, uint32(len(s)))
		b.WriteString(s)
	}
	str(q.InstanceID)
	str(q.Kind)
	str(q.Queue)
	if q.Parent != "" {
		str("parent:" + q.Parent) // left out when empty: cursors made before Parent stay valid
	}
	if len(q.IDs) > 0 {
		ids := slices.Clone(q.IDs)
		slices.Sort(ids)
		str("ids:" + strings.Join(ids, ","))
	}
	states := slices.Clone(q.States)
	slices.Sort(states)
	levels := slices.Clone(q.Levels)
	slices.Sort(levels)
	_ = binary.Write(&b, binary.BigEndian, uint32(len(states)))
	for _, s := range states {
		b.WriteByte(byte(s))
	}
	_ = binary.Write(&b, binary.BigEndian, uint32(len(levels)))
	for _, l := range levels {
		b.WriteByte(byte(l))
	}
	_ = binary.Write(&b, binary.BigEndian, q.Since.UnixNano())
	_ = binary.Write(&b, binary.BigEndian, q.Since.IsZero())
	_ = binary.Write(&b, binary.BigEndian, q.Until.UnixNano())
	_ = binary.Write(&b, binary.BigEndian, q.Until.IsZero())
	sum := sha256.Sum256(b.Bytes())
	return [8]byte(sum[:8])
}

// encodeCursor packs a position of lookup order for q in namespace ns:
// version, order, query hash, position, namespace, then the first 8 bytes
// of a SHA-256 of all that, in URL-safe base64.
func encodeCursor(order byte, ns string, q *Query, p position) string {
	var b bytes.Buffer
	b.WriteByte(cursorVersion)
	b.WriteByte(order)
	h := queryHash(q)
	b.Write(h[:])
	_ = binary.Write(&b, binary.BigEndian, p.t)
	_ = binary.Write(&b, binary.BigEndian, p.seq)
	_ = binary.Write(&b, binary.BigEndian, uint16(len(p.id)))
	b.WriteString(p.id)
	_ = binary.Write(&b, binary.BigEndian, uint16(len(ns)))
	b.WriteString(ns)
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:8])
	return base64.RawURLEncoding.EncodeToString(b.Bytes())
}

// errCursor wraps ErrInvalid for a cursor the lookup cannot take.
func errCursor(why string, args ...any) error {
	return fmt.Errorf("%w: page cursor %s; start again from the first page (an empty Cursor)", ErrInvalid, fmt.Sprintf(why, args...))
}

// decodeCursor returns the position q.Cursor names, or ok false for the
// first page. A cursor that is damaged, of another version, another
// lookup, another query or another namespace is ErrInvalid.
func decodeCursor(order byte, ns string, q *Query) (p position, ok bool, err error) {
	if q.Cursor == "" {
		return p, false, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err != nil {
		return p, false, errCursor("is not a cursor this store made (not base64)")
	}
	if len(raw) < 2+8+8+8+2+2+8 {
		return p, false, errCursor("is truncated")
	}
	body, sum := raw[:len(raw)-8], raw[len(raw)-8:]
	if want := sha256.Sum256(body); !bytes.Equal(want[:8], sum) {
		return p, false, errCursor("fails its integrity check (changed or truncated)")
	}
	if body[0] != cursorVersion {
		return p, false, errCursor("has version %d, this store makes version %d (made by another release?)", body[0], cursorVersion)
	}
	if body[1] != order {
		return p, false, errCursor("was made by a lookup of %s, not of %s", orderNames[body[1]], orderNames[order])
	}
	if h := queryHash(q); !bytes.Equal(h[:], body[2:10]) {
		return p, false, errCursor("was made by another query (filters must stay the same from page to page)")
	}
	r := bytes.NewReader(body[10:])
	var idLen, nsLen uint16
	_ = binary.Read(r, binary.BigEndian, &p.t)
	_ = binary.Read(r, binary.BigEndian, &p.seq)
	if binary.Read(r, binary.BigEndian, &idLen) != nil || r.Len() < int(idLen) {
		return p, false, errCursor("is malformed")
	}
	id := make([]byte, idLen)
	_, _ = r.Read(id)
	p.id = string(id)
	if binary.Read(r, binary.BigEndian, &nsLen) != nil || r.Len() != int(nsLen) {
		return p, false, errCursor("is malformed")
	}
	cns := make([]byte, nsLen)
	_, _ = r.Read(cns)
	if string(cns) != ns {
		return p, false, errCursor("was made in namespace %q, not %q", cns, ns)
	}
	return p, true, nil
}

// Lookup is a store's LookupInstances, LookupHistory or LookupLogs.
type Lookup[T any] func(ctx context.Context, q *Query) ([]T, error)

// PageInstances answers Inspector.PageInstances for a store whose
// namespace is ns with the store's own LookupInstances: a plugin's
// PageInstances is this one call. A page continues strictly after the
// previous page's last instance in the lookup's order (CreatedAt, then
// Seq, newest first): an instance stored for the whole paging is returned
// once, never skipped nor repeated, whatever is enqueued or removed
// between pages; one enqueued meanwhile with a CreatedAt before the
// position is returned when its turn comes. Each page is one lookup
// narrowed to the position's time (and a few more when many instances
// share one time), so it costs what a lookup of one page costs.
func PageInstances(ctx context.Context, ns string, lookup Lookup[*Instance], q *Query) (*InstancePage, error) {
	recs, next, err := page(ctx, orderInstances, ns, lookup, q, func(in *Instance) (time.Time, uint64, string) {
		return in.CreatedAt, in.Seq, in.ID
	})
	if recs == nil && err != nil && !errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	return &InstancePage{Instances: recs, Next: next}, err
}

// PageHistory answers Inspector.PageHistory with the store's own
// LookupHistory (see PageInstances). Records come oldest first by (Time,
// InstanceID, Seq), and a page continues after the previous page's last
// record, so a record stored for the whole paging is returned once.
func PageHistory(ctx context.Context, ns string, lookup Lookup[*HistoryRecord], q *Query) (*HistoryPage, error) {
	recs, next, err := page(ctx, orderHistory, ns, lookup, q, func(h *HistoryRecord) (time.Time, uint64, string) {
		return h.Time, h.Seq, h.InstanceID
	})
	if recs == nil && err != nil && !errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	return &HistoryPage{Records: recs, Next: next}, err
}

// PageLogs answers Inspector.PageLogs with the store's own LookupLogs (see
// PageHistory).
func PageLogs(ctx context.Context, ns string, lookup Lookup[*LogRecord], q *Query) (*LogPage, error) {
	recs, next, err := page(ctx, orderLogs, ns, lookup, q, func(l *LogRecord) (time.Time, uint64, string) {
		return l.Time, l.Seq, l.InstanceID
	})
	if recs == nil && err != nil && !errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	return &LogPage{Records: recs, Next: next}, err
}

// page runs one page of a lookup of order. Instances come newest first by
// (CreatedAt, Seq), which is unique in a store. History and log records
// come oldest first by (Time, InstanceID, Seq), unique too: a store's own
// lookup orders records of one time as it likes, so page sorts what it
// reads, and when a read was cut at its limit it keeps only the records
// before the last time read (the records at that time may be cut
// anywhere). Each page continues strictly after the previous page's last
// item in that order.
func page[T any](ctx context.Context, order byte, ns string, lookup Lookup[T], q *Query, key func(T) (time.Time, uint64, string)) ([]T, string, error) {
	if err := q.Validate(); err != nil {
		return nil, "", err
	}
	size, err := pageSize(q)
	if err != nil {
		return nil, "", err
	}
	pos, ok, err := decodeCursor(order, ns, q)
	if err != nil {
		return nil, "", err
	}
	newest := order == orderInstances
	sub, empty := pageQuery(q, pos, ok, newest)
	if empty {
		return nil, "", nil
	}
	past := func(it T) bool {
		t, seq, id := key(it)
		return !ok || pos.cmp(t, seq, id, newest) > 0
	}
	kept, full, lookupErr, err := readPage(ctx, lookup, &sub, size, ok, newest, past, key)
	if err != nil {
		return nil, "", err
	}
	if len(kept) <= size && !full {
		return kept, "", lookupErr
	}
	kept = kept[:min(size, len(kept))]
	if len(kept) == 0 {
		return kept, "", lookupErr
	}
	t, seq, id := key(kept[len(kept)-1])
	return kept, encodeCursor(order, ns, q, position{t: t.UnixNano(), seq: seq, id: id}), lookupErr
}

// cmp orders an item at (t, seq, id) against p in the page order: newest
// first by (time, seq), or oldest first by (time, id, seq).
func (p position) cmp(t time.Time, seq uint64, id string, newest bool) int {
	c := cmp.Compare(t.UnixNano(), p.t)
	if c == 0 && !newest {
		c = cmp.Compare(id, p.id)
	}
	if c == 0 {
		c = cmp.Compare(seq, p.seq)
	}
	if newest {
		return -c
	}
	return c
}

// pageQuery is q without its cursor, its time range narrowed to what is
// at or past pos (when ok) in the page order. empty reports a range with
// no time left in it.
func pageQuery(q *Query, pos position, ok, newest bool) (sub Query, empty bool) {
	sub = *q
	sub.Cursor = ""
	if !ok {
		return sub, false
	}
	pt := time.Unix(0, pos.t).UTC()
	if newest {
		// Everything up to the position's time (every store keeps times
		// to the microsecond at least).
		if u := pt.Add(time.Microsecond); sub.Until.IsZero() || u.Before(sub.Until) {
			sub.Until = u
		}
	} else if sub.Since.IsZero() || pt.After(sub.Since) {
		sub.Since = pt
	}
	return sub, !sub.Since.IsZero() && !sub.Until.IsZero() && !sub.Until.After(sub.Since)
}

// readPage reads sub through lookup, asking for more each round, until it
// holds more than size items past the cursor or the read was not cut at
// its limit (full false). With a cursor (cursor true) it asks for a few
// more from the start, as items at the cursor's time are read again.
// lookupErr is an ErrCorrupt the lookup returned with its items; err any
// other error.
func readPage[T any](ctx context.Context, lookup Lookup[T], sub *Query, size int, cursor, newest bool, past func(T) bool, key func(T) (time.Time, uint64, string)) (kept []T, full bool, lookupErr, err error) {
	extra := 0
	if cursor {
		extra = 16
	}
	for {
		sub.Limit = size + extra + 1
		got, err := lookup(ctx, sub)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return nil, false, nil, err
		}
		lookupErr = err
		full = len(got) >= sub.Limit
		got = slices.Clone(got)
		if !newest {
			got = oldestFirst(got, full, key)
		}
		kept = slices.DeleteFunc(got, func(it T) bool { return !past(it) })
		if !full || len(kept) > size {
			return kept, full, lookupErr, nil
		}
		extra = 2*extra + 16
	}
}

// oldestFirst sorts records by (time, instance, seq) and, when the read
// was cut at its limit (full), keeps only those before its last time
// (the records at that time may be cut anywhere).
func oldestFirst[T any](got []T, full bool, key func(T) (time.Time, uint64, string)) []T {
	slices.SortStableFunc(got, func(a, b T) int {
		ta, sa, ia := key(a)
		tb, sb, ib := key(b)
		return cmp.Or(ta.Compare(tb), cmp.Compare(ia, ib), cmp.Compare(sa, sb))
	})
	if !full {
		return got
	}
	last, _, _ := key(got[len(got)-1])
	return slices.DeleteFunc(got, func(it T) bool { t, _, _ := key(it); return !t.Before(last) })
}

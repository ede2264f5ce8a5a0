package redisscript

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// StreamWaiter is what a Runner offers for the event feed: a wait for new
// entries of a stream (XREAD BLOCK). A Runner without it is polled.
type StreamWaiter interface {
	// WaitStream returns when stream key has an entry after ID after, when
	// a while of the runner's choosing has passed, or when ctx ends; it
	// returns an error only when the server could not be asked. The
	// caller reads the entries itself.
	WaitStream(ctx context.Context, key, after string) error
	// Closed reports whether err (from any call) says the client was
	// closed, so retrying is pointless: the feed ends with it once
	// closedTries calls in a row said so (valkey-go's ErrClosing reads
	// "closing or unable to connect", so one such error alone is not
	// taken as final).
	Closed(err error) bool
}

var _ store.Events = (*Core)(nil)

// eventsPage is how many history entries one read of the feed takes.
const eventsPage = 100

// closedTries is how many calls in a row must fail as closed (see
// StreamWaiter.Closed) before a feed gives up: with the retry backoff,
// about 0.3 s.
const closedTries = 5

// streamID is a stream entry ID, ms-seq.
type streamID struct{ ms, seq uint64 }

func parseStreamID(s string) (streamID, bool) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return streamID{}, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return streamID{ms, seq}, err1 == nil && err2 == nil
}

func (id streamID) String() string {
	return strconv.FormatUint(id.ms, 10) + "-" + strconv.FormatUint(id.seq, 10)
}

func (id streamID) cmp(o streamID) int {
	switch {
	case id.ms != o.ms:
		if id.ms < o.ms {
			return -1
		}
		return 1
	case id.seq != o.seq:
		if id.seq < o.seq {
			return -1
		}
		return 1
	}
	return 0
}

// position is a place in the history stream: every record of the entries
// before entry id is delivered, and of entry id the first skip records,
// or all of them when skip is -1.
type position struct {
	id   streamID
	skip int
}

// cursor spells p: "r:<id>" after all of entry id, "r:<id>:<n>" after its
// first n records.
func (p position) cursor() string {
	if p.skip < 0 {
		return "r:" + p.id.String()
	}
	return "r:" + p.id.String() + ":" + strconv.Itoa(p.skip)
}

func (c *Core) parseCursor(s string) (position, error) {
	bad := fmt.Errorf("%w: %s: event cursor %q is not a cursor of this store; pass one from an Event or from EventCursor, or none to follow from now", store.ErrInvalid, c.name, s)
	rest, ok := strings.CutPrefix(s, "r:")
	if !ok {
		return position{}, bad
	}
	idPart, skipPart, partial := strings.Cut(rest, ":")
	id, ok := parseStreamID(idPart)
	if !ok {
		return position{}, bad
	}
	p := position{id: id, skip: -1}
	if partial {
		n, err := strconv.Atoi(skipPart)
		if err != nil || n <= 0 || strconv.Itoa(n) != skipPart {
			return position{}, bad
		}
		p.skip = n
	}
	return p, nil
}

// eventsPage is one read of the feed's script.
type eventsRead struct {
	last, deleted streamID
	entries       []streamEntry
	meta          map[string]eventMeta // by stored ID
}

// eventMeta is what the events script read of an instance: its kind and
// queue, and the attempt its state is at with when that attempt became
// ready (a Processing event of that attempt gets it as ReadyAt).
type eventMeta struct {
	kind, queue string
	attempt     int
	ready       time.Time
}

type streamEntry struct {
	id  streamID
	raw string
}

// readEvents runs the events script from entry from (inclusive; nil reads
// only the bounds).
func (c *Core) readEvents(ctx context.Context, from *streamID) (*eventsRead, error) {
	arg := ""
	if from != nil {
		arg = from.String()
	}
	v, err := c.run(ctx, EventsRead, arg, itoa(eventsPage))
	if err != nil {
		return nil, err
	}
	a := asArray(v)
	if len(a) != 4 {
		return nil, fmt.Errorf("%s: events: malformed reply", c.name)
	}
	r := &eventsRead{meta: map[string]eventMeta{}}
	var ok1, ok2 bool
	r.last, ok1 = parseStreamID(asString(a[0]))
	r.deleted, ok2 = parseStreamID(asString(a[1]))
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%s: events: malformed stream IDs %v, %v", c.name, a[0], a[1])
	}
	flat := asArray(a[2])
	for i := 0; i+1 < len(flat); i += 2 {
		id, ok := parseStreamID(asString(flat[i]))
		if !ok {
			return nil, fmt.Errorf("%s: events: malformed entry ID %v", c.name, flat[i])
		}
		r.entries = append(r.entries, streamEntry{id, asString(flat[i+1])})
	}
	meta := asArray(a[3])
	for i := 0; i+4 < len(meta); i += 5 {
		att, err1 := strconv.Atoi(asString(meta[i+3]))
		us, err2 := strconv.ParseInt(asString(meta[i+4]), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: events: malformed instance attempt %v or ready time %v", c.name, meta[i+3], meta[i+4])
		}
		m := eventMeta{kind: asString(meta[i+1]), queue: asString(meta[i+2]), attempt: att}
		if us != 0 {
			m.ready = FromMicros(us)
		}
		r.meta[asString(meta[i])] = m
	}
	return r, nil
}

// expired reports whether entries after p may have been deleted: the
// largest deleted ID is after p's entry, or is p's entry while p is in
// the middle of it.
func (r *eventsRead) expired(p position) bool {
	c := r.deleted.cmp(p.id)
	return c > 0 || (c == 0 && p.skip >= 0)
}

func (c *Core) expiredErr(p position) error {
	return fmt.Errorf("%w: %s: history after event cursor %q was removed (history retention, or its instances were pruned); catch up by listing instances, then follow from EventCursor",
		store.ErrCursorExpired, c.name, p.cursor())
}

// EventCursor implements store.Events: after the last history entry.
func (c *Core) EventCursor(ctx context.Context) (string, error) {
	r, err := c.readEvents(ctx, nil)
	if err != nil {
		return "", err
	}
	return position{id: r.last, skip: -1}.cursor(), nil
}

// Follow implements store.Events on the history stream, which every
// transition script appends to: a read-only script reads entries after
// the feed's position, with their instances' kinds and queues, and checks
// that nothing after the position was deleted (the stream's
// max-deleted-entry-id, Redis 7 and Valkey 7.2); when caught up, the feed
// waits with XREAD BLOCK (see StreamWaiter). A connection that fails is
// retried with backoff from the same position, so nothing is lost or
// repeated across it; a closed client ends the feed with an error event. An undecodable history entry yields no events
// (LookupHistory reports it).
func (c *Core) Follow(ctx context.Context, p *store.FollowParams) (<-chan store.Event, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var pos position
	var first *eventsRead
	if p.Cursor == "" {
		r, err := c.readEvents(ctx, nil)
		if err != nil {
			return nil, err
		}
		pos = position{id: r.last, skip: -1}
	} else {
		var err error
		if pos, err = c.parseCursor(p.Cursor); err != nil {
			return nil, err
		}
		if first, err = c.readEvents(ctx, &pos.id); err != nil {
			return nil, err
		}
		if pos.id.cmp(first.last) > 0 {
			return nil, fmt.Errorf("%w: %s: event cursor %q is past the newest history entry %s; pass a cursor this store gave", store.ErrInvalid, c.name, p.Cursor, first.last)
		}
		if first.expired(pos) {
			return nil, c.expiredErr(pos)
		}
	}
	f := *p
	f.Kinds = append([]string(nil), p.Kinds...)
	out := make(chan store.Event, p.BufferOrDefault())
	go c.feed(ctx, &f, pos, first, out)
	return out, nil
}

// feed is a Follow's goroutine: it delivers the entries of r (the first
// read, or nil) after pos, then reads on.
func (c *Core) feed(ctx context.Context, f *store.FollowParams, pos position, r *eventsRead, out chan<- store.Event) {
	defer close(out)
	w, _ := c.r.(StreamWaiter)
	backoff := 10 * time.Millisecond
	// fail waits before a retry of what failed with err; false when ctx
	// ended, or when the client was closed (then the feed ends with err).
	closed := 0 // calls in a row that failed as closed
	fail := func(err error) bool {
		if w != nil && w.Closed(err) {
			closed++
		} else {
			closed = 0
		}
		if closed >= closedTries {
			select {
			case out <- store.Event{Err: fmt.Errorf("%s: follow: the client was closed: %w", c.name, err)}:
			case <-ctx.Done():
			}
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		return true
	}
	for {
		if r == nil {
			var err error
			if r, err = c.readEvents(ctx, &pos.id); err != nil {
				if !fail(err) {
					return
				}
				continue
			}
			if r.expired(pos) {
				select {
				case out <- store.Event{Err: c.expiredErr(pos)}:
				case <-ctx.Done():
				}
				return
			}
		}
		backoff, closed = 10*time.Millisecond, 0
		waited := false
		for _, e := range r.entries {
			if !c.deliver(ctx, f, &pos, e, r.meta, out, &waited) {
				return
			}
		}
		full := len(r.entries) == eventsPage
		r = nil
		if full || waited {
			// More may follow at once; and after waiting for the
			// consumer, read again rather than wait: what came after
			// meanwhile may have been deleted, which only a read tells.
			continue
		}
		// Caught up: wait for an entry after pos.
		for {
			if ctx.Err() != nil {
				return
			}
			if w == nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
				break
			}
			if err := w.WaitStream(ctx, c.keys.Script[3], pos.id.String()); err != nil {
				if !fail(err) {
					return
				}
				continue
			}
			break
		}
	}
}

// deliver sends the records of entry e after pos that match f, moving pos
// past each, and sets waited when out was full; false when ctx ended.
func (c *Core) deliver(ctx context.Context, f *store.FollowParams, pos *position, e streamEntry, meta map[string]eventMeta, out chan<- store.Event, waited *bool) bool {
	switch d := e.id.cmp(pos.id); {
	case d < 0, d == 0 && pos.skip < 0:
		return true // delivered already
	}
	skip := 0
	if e.id == pos.id {
		skip = pos.skip
	}
	recs, err := decodeHistory(e.raw)
	if err != nil {
		*pos = position{id: e.id, skip: -1}
		return true
	}
	for i := skip; i < len(recs); i++ {
		h := recs[i]
		*pos = position{id: e.id, skip: i + 1}
		if i+1 == len(recs) {
			pos.skip = -1
		}
		ev := store.Event{
			Cursor: pos.cursor(), InstanceID: h.InstanceID, State: h.State, Attempt: h.Attempt,
			Time: h.Time, Node: h.Node, Error: h.Error, Seq: h.Seq,
		}
		if m, ok := meta[EncodeID(h.InstanceID)]; ok {
			ev.Kind, ev.Queue = m.kind, m.queue
			if h.State == store.Processing && h.Attempt == m.attempt {
				ev.ReadyAt = m.ready
			}
		}
		if !f.Match(&ev) {
			continue
		}
		select {
		case out <- ev:
			continue
		default:
		}
		*waited = true
		select {
		case out <- ev:
		case <-ctx.Done():
			return false
		}
	}
	if skip >= len(recs) {
		*pos = position{id: e.id, skip: -1}
	}
	return true
}

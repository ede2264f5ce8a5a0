package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

var _ store.Events = (*Store)(nil)

// evPos is a place in the feed: every history record of the revisions
// before rev is delivered, and of rev the first skip, or all when skip is
// -1. The history records of a revision are those its puts of dynamic
// records (s/) appended (dynRec.HN), in key order, then record order.
type evPos struct {
	rev  int64
	skip int
}

// cursor spells p: "e:<rev>" after all of revision rev, "e:<rev>:<n>"
// after its first n history records.
func (p evPos) cursor() string {
	if p.skip < 0 {
		return "e:" + strconv.FormatInt(p.rev, 10)
	}
	return "e:" + strconv.FormatInt(p.rev, 10) + ":" + strconv.Itoa(p.skip)
}

// start is the revision a watch from p starts at.
func (p evPos) start() int64 {
	if p.skip < 0 {
		return p.rev + 1
	}
	return p.rev
}

func parseEvCursor(s string) (evPos, error) {
	bad := fmt.Errorf("%w: etcdstore: event cursor %q is not a cursor of this store; pass one from an Event or from EventCursor, or none to follow from now", store.ErrInvalid, s)
	rest, ok := strings.CutPrefix(s, "e:")
	if !ok {
		return evPos{}, bad
	}
	revPart, skipPart, partial := strings.Cut(rest, ":")
	rev, err := strconv.ParseInt(revPart, 10, 64)
	if err != nil || rev < 0 || strconv.FormatInt(rev, 10) != revPart {
		return evPos{}, bad
	}
	p := evPos{rev: rev, skip: -1}
	if partial {
		n, err := strconv.Atoi(skipPart)
		if err != nil || n <= 0 || strconv.Itoa(n) != skipPart {
			return evPos{}, bad
		}
		p.skip = n
	}
	return p, nil
}

// revision returns etcd's current revision.
func (s *Store) revision(ctx context.Context) (int64, error) {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	resp, err := s.cli.Get(ctx, s.k.seq(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// EventCursor implements store.Events: after etcd's current revision.
func (s *Store) EventCursor(ctx context.Context) (string, error) {
	rev, err := s.revision(ctx)
	if err != nil {
		return "", s.wrap("event cursor", ctx, err)
	}
	return evPos{rev: rev, skip: -1}.cursor(), nil
}

func (s *Store) expiredErr(p evPos, compacted int64) error {
	return fmt.Errorf("%w: etcdstore: event cursor %q is before etcd's compaction (revision %d), which removed what followed it; catch up by listing instances, then follow from EventCursor",
		store.ErrCursorExpired, p.cursor(), compacted)
}

// check refuses a cursor from the future (ErrInvalid) or from before the
// last compaction (ErrCursorExpired).
func (s *Store) check(ctx context.Context, p evPos) error {
	rev, err := s.revision(ctx)
	if err != nil {
		return s.wrap("follow", ctx, err)
	}
	if p.rev > rev {
		return fmt.Errorf("%w: etcdstore: event cursor %q is past etcd's current revision %d; pass a cursor this store gave", store.ErrInvalid, p.cursor(), rev)
	}
	if p.start() > rev {
		return nil // nothing after it yet
	}
	octx, cancel, err := s.op(ctx)
	if err != nil {
		return s.wrap("follow", ctx, err)
	}
	defer cancel()
	_, err = s.cli.Get(octx, s.k.seq(), clientv3.WithRev(p.start()), clientv3.WithCountOnly())
	if errors.Is(err, rpctypes.ErrCompacted) {
		return s.expiredErr(p, 0)
	}
	return s.wrap("follow", ctx, err)
}

// Follow implements store.Events with an etcd Watch on the dynamic
// records (s/), from the revision after the cursor: each put carries the
// history records it appended. etcd keeps every
// revision until it is compacted, so a cursor stays good until a
// compaction passes it (history retention deletes records, but a watch
// from before the delete still sees their puts). The feed holds one watch
// response at a time: when the consumer has not taken an event for 100 ms,
// it cancels the watch instead of letting the client buffer responses, and
// watches again from its position once the consumer took the event. A watch that
// ends on its own (a lost leader, a broken connection) is resumed from
// the same position. An undecodable history record yields no event
// (LookupHistory reports it). Close ends the feed with an error event
// when the channel has room for it; a closed client ends it with an error
// event.
func (s *Store) Follow(ctx context.Context, p *store.FollowParams) (<-chan store.Event, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	var pos evPos
	if p.Cursor == "" {
		rev, err := s.revision(ctx)
		if err != nil {
			return nil, s.wrap("follow", ctx, err)
		}
		pos = evPos{rev: rev, skip: -1}
	} else {
		var err error
		if pos, err = parseEvCursor(p.Cursor); err != nil {
			return nil, err
		}
		if err := s.check(ctx, pos); err != nil {
			return nil, err
		}
	}
	if !s.goBackground() {
		return nil, s.wrap("follow", ctx, errClosed)
	}
	f := *p
	f.Kinds = append([]string(nil), p.Kinds...)
	out := make(chan store.Event, p.BufferOrDefault())
	go func() {
		defer s.wg.Done()
		defer close(out)
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		err := s.feed(fctx, &f, pos, out)
		switch {
		case err != nil && fctx.Err() == nil:
			select {
			case out <- store.Event{Err: err}:
			case <-fctx.Done():
			}
		case ctx.Err() == nil && s.ctx.Err() != nil:
			select { // closed: say so if there is room, never wait (Close waits for us)
			case out <- store.Event{Err: fmt.Errorf("etcdstore: follow: %w", errClosed)}:
			default:
			}
		}
	}()
	return out, nil
}

// feed watches from pos and delivers until ctx ends (nil) or the position
// expires (the error).
func (s *Store) feed(ctx context.Context, f *store.FollowParams, pos evPos, out chan<- store.Event) error {
	prefix := s.k.p + "s/"
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(pos.start()), clientv3.WithFilterDelete())
		rewatch, err := s.deliver(ctx, wch, f, &pos, out, cancel)
		cancel()
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := s.cli.Ctx().Err(); err != nil {
			return fmt.Errorf("etcdstore: follow: the etcd client was closed: %w", err)
		}
		if rewatch {
			backoff = 10 * time.Millisecond
			continue
		}
		// The watch ended on its own: resume from pos after a pause.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	return nil
}

// slowConsumer is how long a feed waits for its consumer to take an event
// before it stops its watch until the consumer does.
const slowConsumer = 100 * time.Millisecond

// deliver reads wch and sends its events after pos; it returns when the
// watch ends (false), when it canceled the watch because the consumer is
// behind (true: watch again from pos), or with the expiry error.
func (s *Store) deliver(ctx context.Context, wch clientv3.WatchChan, f *store.FollowParams, pos *evPos, out chan<- store.Event, cancel context.CancelFunc) (bool, error) {
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return false, s.expiredErr(*pos, resp.CompactRevision)
		}
		if resp.Canceled || resp.Err() != nil {
			return false, nil
		}
		// The history records of the response, in order, each with the
		// revision it was written at and its number among that revision's.
		type histAt struct {
			d   *dynRec
			h   *histEnt
			rev int64
			n   int
		}
		var hs []histAt
		var rev int64
		n := 0
		for _, e := range resp.Events {
			if e.Type != mvccpb.PUT {
				continue
			}
			if e.Kv.ModRevision != rev {
				rev, n = e.Kv.ModRevision, 0
			}
			d, err := decodeDyn(string(e.Kv.Key), e.Kv.Value)
			if err != nil {
				continue // LookupInstances reports it
			}
			app := d.appended()
			for i := range app {
				n++
				hs = append(hs, histAt{d, &app[i], rev, n})
			}
		}
		for i, x := range hs {
			if x.rev < pos.rev || (x.rev == pos.rev && (pos.skip < 0 || x.n <= pos.skip)) {
				continue // delivered already
			}
			*pos = evPos{rev: x.rev, skip: x.n}
			if i == len(hs)-1 || hs[i+1].rev != x.rev {
				pos.skip = -1
			}
			h := x.h
			ev := store.Event{
				Cursor: pos.cursor(), InstanceID: x.d.ID, Kind: x.d.Kind, Queue: x.d.Queue, State: h.State,
				Attempt: h.Attempt, Time: nt(h.Time), Node: h.Node, Error: h.Error, Seq: h.Seq,
			}
			if h.State == store.Processing {
				ev.ReadyAt = nt(x.d.RunAt) // the record as the claim wrote it
			}
			if !f.Match(&ev) {
				continue
			}
			select {
			case out <- ev:
				continue
			default:
			}
			// The consumer is behind. Give it a moment; then stop the
			// watch, so the client does not buffer responses meanwhile,
			// wait for the consumer, and watch again from here.
			t := time.NewTimer(slowConsumer)
			select {
			case out <- ev:
				t.Stop()
				continue
			case <-ctx.Done():
				t.Stop()
				return false, nil
			case <-t.C:
			}
			cancel()
			select {
			case out <- ev:
				return true, nil
			case <-ctx.Done():
				return false, nil
			}
		}
	}
	return false, nil
}

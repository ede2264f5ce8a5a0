package etcdstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// Cancel notices (store.CancelNotifier). Cancel, when it asks a Processing
// attempt to stop, also puts the namespace's one notice key (P cc) in its
// transaction, with the value "<attempt> <id>"; SubscribeCancels watches
// that key. Every put is a revision of its own, so a watch sees every
// notice even when the next cancel overwrote the key at once. The key is
// never deleted and never grows: nothing to clean up, no range to walk, no
// work for a job that is never canceled; etcd's compaction drops the old
// revisions.

// cancelNotice is the key Cancel puts a notice in.
func (k keys) cancelNotice() string { return k.p + "cc" }

// cancelNoticeValue is the notice of attempt of instance id.
func cancelNoticeValue(id string, attempt int) string {
	return strconv.Itoa(attempt) + " " + id
}

// parseCancelNotice reads cancelNoticeValue.
func parseCancelNotice(v []byte) (store.LeaseRef, bool) {
	at, id, ok := strings.Cut(string(v), " ")
	if !ok || id == "" {
		return store.LeaseRef{}, false
	}
	n, err := strconv.Atoi(at)
	if err != nil {
		return store.LeaseRef{}, false
	}
	return store.LeaseRef{ID: id, Attempt: n}, true
}

// cancelBuffer is how many notices a subscriber's channel holds; past it,
// notices are dropped (the owner's Renew still reports the request).
const cancelBuffer = 64

// SubscribeCancels implements store.CancelNotifier with an etcd Watch on
// the namespace's notice key, from the revision current when it returns.
// When the watch breaks (a lost leader), it watches again from the
// revision after the last notice it saw, so nothing is lost unless etcd
// compacted past it meanwhile. The channel is closed when ctx ends or the
// store is closed.
func (s *Store) SubscribeCancels(ctx context.Context) (<-chan store.LeaseRef, error) {
	if !s.goBackground() {
		return nil, s.wrap("subscribe to cancels", ctx, errClosed)
	}
	// The revision now, so the watch starts here whenever etcd sets it up.
	octx, ocancel, err := s.op(ctx)
	if err != nil {
		s.wg.Done()
		return nil, s.wrap("subscribe to cancels", ctx, err)
	}
	key := s.k.cancelNotice()
	resp, err := s.cli.Get(octx, key, clientv3.WithCountOnly())
	if err != nil {
		err = s.wrap("subscribe to cancels", octx, err)
		ocancel()
		s.wg.Done()
		return nil, err
	}
	ocancel()
	rev := resp.Header.Revision + 1
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	stop := context.AfterFunc(s.ctx, cancel)
	out := make(chan store.LeaseRef, cancelBuffer)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer stop()
		defer cancel()
		backoff := 10 * time.Millisecond
		for {
			wch := s.cli.Watch(wctx, key, clientv3.WithRev(rev), clientv3.WithFilterDelete())
			for wr := range wch {
				if wr.CompactRevision > rev {
					rev = wr.CompactRevision // the notices before it are lost
				}
				if !wr.Canceled {
					backoff = 10 * time.Millisecond
				}
				for _, ev := range wr.Events {
					if ev.Type != mvccpb.PUT {
						continue
					}
					rev = ev.Kv.ModRevision + 1
					ref, ok := parseCancelNotice(ev.Kv.Value)
					if !ok {
						continue
					}
					select {
					case out <- ref:
					default: // the subscriber is behind: best effort
					}
				}
			}
			if wctx.Err() != nil || s.cli.Ctx().Err() != nil {
				return // asked to stop, or the client was closed
			}
			// The watch ended without us asking (compaction, lost
			// leader): watch again after a pause.
			select {
			case <-wctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}()
	return out, nil
}

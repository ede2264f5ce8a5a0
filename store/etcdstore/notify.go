package etcdstore

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Subscribe implements store.Notifier with an etcd Watch on the queue's
// ready index: every put there (an enqueue, a retry, a rescue, a released
// lease) wakes the subscriber; claims, which delete, do not. The channel is
// closed when ctx ends or the store is closed.
func (s *Store) Subscribe(ctx context.Context, queue string) (<-chan struct{}, error) {
	if queue == "" {
		return nil, s.wrap("subscribe", ctx, fmt.Errorf("subscribe without a queue"))
	}
	if !s.goBackground() {
		return nil, s.wrap("subscribe", ctx, errClosed)
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	stop := context.AfterFunc(s.ctx, cancel)
	prefix := s.k.queuePrefix(queue)
	wch := s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterDelete())
	out := make(chan struct{}, 1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer stop()
		defer cancel()
		for {
			for resp := range wch {
				if len(resp.Events) > 0 || resp.Canceled {
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
			if wctx.Err() != nil || s.cli.Ctx().Err() != nil {
				return // asked to stop, or the client was closed
			}
			// The watch ended without us asking (compaction, lost leader):
			// watch again from now; the wake-up above covers the gap.
			select {
			case <-wctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			wch = s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterDelete())
		}
	}()
	return out, nil
}

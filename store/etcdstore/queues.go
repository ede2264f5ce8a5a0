package etcdstore

import (
	"context"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// wakeKey is a key under the queue's ready prefix that ResumeQueue puts so
// the queue's watchers (Subscribe) wake; no ready range reads it (it is not
// under a priority).
func (k keys) wakeKey(q string) string { return k.queuePrefix(q) + "~wake" }

// PauseQueue implements store.QueueAdmin: it puts the queue's pause key,
// which every claim reads and guards on. A queue never used is created
// paused (ListQueues lists it).
func (s *Store) PauseQueue(ctx context.Context, p *store.QueueParams) error {
	if err := p.Validate(); err != nil {
		return s.wrap("pause queue", ctx, err)
	}
	what := "pause queue " + strconv.Quote(p.Queue)
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return s.wrap(what, context.Background(), err)
	}
	defer cancel()
	_, err = s.cli.Put(ctx, s.k.paused(p.Queue), strconv.FormatInt(tn(p.Now), 10))
	return s.wrap(what, ctx, err)
}

// ResumeQueue implements store.QueueAdmin: it deletes the pause key and,
// in the same transaction, puts the queue's wake key so its subscribers
// claim at once.
func (s *Store) ResumeQueue(ctx context.Context, p *store.QueueParams) error {
	if err := p.Validate(); err != nil {
		return s.wrap("resume queue", ctx, err)
	}
	what := "resume queue " + strconv.Quote(p.Queue)
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return s.wrap(what, context.Background(), err)
	}
	defer cancel()
	pk := s.k.paused(p.Queue)
	_, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(pk), ">", 0)).
		Then(clientv3.OpDelete(pk), clientv3.OpPut(s.k.wakeKey(p.Queue), strconv.FormatInt(tn(p.Now), 10))).Commit()
	return s.wrap(what, ctx, err)
}

// ListQueues implements store.QueueAdmin, in name order: the queues with a
// lane marker or a known key (enqueued into) and the paused ones.
func (s *Store) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("list queues", context.Background(), err)
	}
	defer cancel()
	rs, err := s.read(ctx, []clientv3.Op{
		clientv3.OpGet(s.k.prioMarkRoot(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.k.pausedPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.k.knownRoot(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	})
	if err != nil {
		return nil, s.wrap("list queues", ctx, err)
	}
	qs := map[string]bool{}
	root := s.k.prioMarkRoot()
	for _, kv := range rs[0].GetKvs() {
		rest := string(kv.Key[len(root):])
		if i := strings.IndexByte(rest, '/'); i > 0 {
			qs[unesc(rest[:i])] = false
		}
	}
	kp := s.k.knownRoot()
	for _, kv := range rs[2].GetKvs() {
		qs[unesc(string(kv.Key[len(kp):]))] = false
	}
	pp := s.k.pausedPrefix()
	for _, kv := range rs[1].GetKvs() {
		qs[unesc(string(kv.Key[len(pp):]))] = true
	}
	out := make([]store.QueueInfo, 0, len(qs))
	for q, paused := range qs {
		out = append(out, store.QueueInfo{Name: q, Paused: paused})
	}
	slices.SortFunc(out, func(a, b store.QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

var _ store.QueueAdmin = (*Store)(nil)

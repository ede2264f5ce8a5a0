package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// Stored triggers are documents of store.TriggerCollection. Releases
// before kept them under P tr/<name> (the name as it is), one JSON value
// each, with the key's ModRevision as the Version; UpgradeTriggers moves
// them.

func (k keys) triggerPrefix() string { return k.p + "tr/" }

// triggerErr wraps an error of the trigger calls: the contract's sentinels
// as they are, everything else as wrap does.
func (s *Store) triggerErr(what string, ctx context.Context, err error) error {
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrCorrupt) {
		return fmt.Errorf("etcdstore: %s: %w", what, err)
	}
	return s.wrap(what, ctx, err)
}

// decodeTrigger decodes a stored trigger value.
func decodeTrigger(kv []byte, key string, rev int64) (*store.Trigger, error) {
	var t store.Trigger
	if err := json.Unmarshal(kv, &t); err != nil {
		return nil, fmt.Errorf("%w: trigger at %s: %v", store.ErrCorrupt, key, err)
	}
	t.Version = rev
	return &t, nil
}

// UpgradeTriggers implements store.TriggerUpgrader: it moves the
// triggers of the layout before they were documents (P tr/<name>) into
// store.TriggerCollection and deletes each key once moved, at the
// ModRevision it was read (a trigger an older node changed meanwhile is
// moved at the next call). With none left it costs one count-only read.
func (s *Store) UpgradeTriggers(ctx context.Context) (int, error) {
	const what = "upgrade triggers"
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return 0, s.wrap(what, context.Background(), err)
	}
	defer cancel()
	prefix := s.k.triggerPrefix()
	n, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, s.wrap(what, ctx, err)
	}
	if n.Count == 0 {
		return 0, nil
	}
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, s.wrap(what, ctx, err)
	}
	moved := 0
	for _, kv := range resp.Kvs {
		t, err := decodeTrigger(kv.Value, string(kv.Key), kv.ModRevision)
		if err != nil {
			return moved, s.triggerErr(what, ctx, err)
		}
		ok, err := store.MoveTrigger(ctx, s, t)
		if err != nil {
			return moved, s.triggerErr(what, ctx, err)
		}
		if ok {
			moved++
		}
		key := string(kv.Key)
		_, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return moved, s.wrap(what, ctx, err)
		}
	}
	return moved, nil
}

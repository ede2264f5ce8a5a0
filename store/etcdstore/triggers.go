package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// Stored triggers live under P tr/<name> (the name as it is: nothing else
// is under tr/, so the key needs no escaping and keys sort in name order),
// one JSON value each. A trigger's Version is its key's ModRevision, so a
// compare-and-set is a transaction comparing it, and a trigger created
// again after a delete never takes an old version back.

func (k keys) trigger(name string) string { return k.p + "tr/" + name }
func (k keys) triggerPrefix() string      { return k.p + "tr/" }

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

// PutTrigger implements store.Triggers.
func (s *Store) PutTrigger(ctx context.Context, p *store.PutTriggerParams) (*store.Trigger, error) {
	if err := p.Validate(); err != nil {
		return nil, s.triggerErr("put trigger", ctx, err)
	}
	t := p.Trigger.Clone()
	what := fmt.Sprintf("put trigger %q", t.Name)
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap(what, context.Background(), err)
	}
	defer cancel()
	key := s.k.trigger(t.Name)
	for round := 0; round < maxRounds; round++ {
		t.CreatedAt, t.UpdatedAt, t.Version = p.Now.UTC(), p.Now.UTC(), 0
		want := p.IfVersion // the ModRevision the write is guarded on (0: absent)
		if p.IfVersion != 0 {
			resp, err := s.cli.Get(ctx, key)
			if err != nil {
				return nil, s.wrap(what, ctx, err)
			}
			switch {
			case len(resp.Kvs) == 0 && p.IfVersion == store.AnyVersion:
				want = 0
			case len(resp.Kvs) == 0:
				return nil, s.triggerErr(what, ctx, store.ErrNotFound)
			case p.IfVersion != store.AnyVersion && resp.Kvs[0].ModRevision != p.IfVersion:
				return nil, s.triggerErr(what, ctx, fmt.Errorf("stored version %d, not %d; read it again and retry: %w", resp.Kvs[0].ModRevision, p.IfVersion, store.ErrConflict))
			default:
				kv := resp.Kvs[0]
				old, err := decodeTrigger(kv.Value, key, kv.ModRevision)
				if err != nil {
					return nil, s.triggerErr(what, ctx, err)
				}
				t.CreatedAt, want = old.CreatedAt, kv.ModRevision
			}
		}
		val, err := json.Marshal(t)
		if err != nil {
			return nil, s.triggerErr(what, ctx, fmt.Errorf("%w: %v", store.ErrInvalid, err))
		}
		if len(val) > s.maxValue {
			return nil, s.triggerErr(what, ctx, fmt.Errorf("%w: %d bytes, more than %d", store.ErrTooLarge, len(val), s.maxValue))
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", want)).
			Then(clientv3.OpPut(key, string(val))).
			Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
			Commit()
		if err != nil {
			return nil, s.wrap(what, ctx, err)
		}
		if resp.Succeeded {
			t.Version = resp.Header.Revision
			return t, nil
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		switch {
		case p.IfVersion == store.AnyVersion:
			continue // changed between the read and the write: read again
		case len(kvs) == 0:
			return nil, s.triggerErr(what, ctx, store.ErrNotFound)
		case p.IfVersion == 0:
			return nil, s.triggerErr(what, ctx, fmt.Errorf("it exists already (version %d); read it and pass its Version to replace it: %w", kvs[0].ModRevision, store.ErrConflict))
		default:
			return nil, s.triggerErr(what, ctx, fmt.Errorf("stored version %d, not %d; read it again and retry: %w", kvs[0].ModRevision, p.IfVersion, store.ErrConflict))
		}
	}
	return nil, s.triggerErr(what, ctx, fmt.Errorf("written by others %d times in a row; retry: %w", maxRounds, store.ErrConflict))
}

// GetTrigger implements store.Triggers.
func (s *Store) GetTrigger(ctx context.Context, name string) (*store.Trigger, error) {
	what := fmt.Sprintf("get trigger %q", name)
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap(what, context.Background(), err)
	}
	defer cancel()
	key := s.k.trigger(name)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, s.wrap(what, ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, s.triggerErr(what, ctx, store.ErrNotFound)
	}
	t, err := decodeTrigger(resp.Kvs[0].Value, key, resp.Kvs[0].ModRevision)
	if err != nil {
		return nil, s.triggerErr(what, ctx, err)
	}
	return t, nil
}

// ListTriggers implements store.Triggers: one range read, so a page is
// one instant of the store.
func (s *Store) ListTriggers(ctx context.Context, p *store.ListTriggersParams) (*store.TriggerPage, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, s.triggerErr("list triggers", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("list triggers", context.Background(), err)
	}
	defer cancel()
	from := s.k.triggerPrefix()
	if p != nil && p.After != "" {
		from = s.k.trigger(p.After) + "\x00"
	}
	resp, err := s.cli.Get(ctx, from, clientv3.WithRange(prefixEnd(s.k.triggerPrefix())), clientv3.WithLimit(int64(limit+1)))
	if err != nil {
		return nil, s.wrap("list triggers", ctx, err)
	}
	page := &store.TriggerPage{}
	kvs := resp.Kvs
	if len(kvs) > limit {
		kvs = kvs[:limit]
	}
	for _, kv := range kvs {
		t, err := decodeTrigger(kv.Value, string(kv.Key), kv.ModRevision)
		if err != nil {
			return page, s.triggerErr("list triggers", ctx, err)
		}
		page.Triggers = append(page.Triggers, t)
	}
	if len(resp.Kvs) > limit {
		page.Next = page.Triggers[len(page.Triggers)-1].Name
	}
	return page, nil
}

// DeleteTrigger implements store.Triggers.
func (s *Store) DeleteTrigger(ctx context.Context, p *store.DeleteTriggerParams) error {
	if err := p.Validate(); err != nil {
		return s.triggerErr("delete trigger", ctx, err)
	}
	what := fmt.Sprintf("delete trigger %q", p.Name)
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return s.wrap(what, context.Background(), err)
	}
	defer cancel()
	key := s.k.trigger(p.Name)
	cmp := clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
	if p.IfVersion != 0 {
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", p.IfVersion)
	}
	resp, err := s.cli.Txn(ctx).If(cmp).Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return s.wrap(what, ctx, err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return s.triggerErr(what, ctx, store.ErrNotFound)
	}
	return s.triggerErr(what, ctx, fmt.Errorf("stored version %d, not %d: %w", kvs[0].ModRevision, p.IfVersion, store.ErrConflict))
}

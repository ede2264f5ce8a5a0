package etcdstore

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// progress is the key of an instance's reported progress (store.Progress),
// beside its records so claims and lookups never read it.
func (k keys) progress(id string) string { return k.p + "pg/" + esc(id) }

// progRec is the value of a progress key.
type progRec struct {
	Attempt  int     `json:"at"`
	Fraction float64 `json:"f"`
	Message  string  `json:"m,omitempty"`
	Time     int64   `json:"t"`
}

// SetProgress implements store.Progress: the progress is written in a
// transaction guarded by the dynamic record read, so it never lands after
// the attempt finished or its lease moved.
func (s *Store) SetProgress(ctx context.Context, p *store.ProgressParams) error {
	if err := p.Validate(); err != nil {
		return s.wrap("set progress", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return s.wrap("set progress", context.Background(), err)
	}
	defer cancel()
	val := mustJSON(&progRec{Attempt: p.Attempt, Fraction: p.Fraction, Message: p.Message, Time: tn(p.Now)})
	for range maxRounds {
		ds, revs, errs, err := s.readDyn(ctx, []string{p.ID})
		if err != nil {
			return s.wrap("set progress", ctx, err)
		}
		d := ds[0]
		switch {
		case errs[0] != nil:
			return fmt.Errorf("etcdstore: set progress: %w", errs[0])
		case d == nil:
			return s.wrap("set progress", ctx, fmt.Errorf("%w: instance %s", store.ErrNotFound, p.ID))
		case d.State != store.Processing || d.Owner != p.Owner || d.Attempt != p.Attempt:
			return fmt.Errorf("etcdstore: set progress of %s attempt %d by %s: it is %v in attempt %d: %w", p.ID, p.Attempt, p.Owner, d.State, d.Attempt, store.ErrLeaseLost)
		}
		key := s.k.dyn(p.ID)
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", revs[0])).
			Then(clientv3.OpPut(s.k.progress(p.ID), val)).Commit()
		if err != nil {
			return s.wrap("set progress", ctx, err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return s.wrap("set progress", ctx, errors.New("gave up after repeated conflicts"))
}

// LookupProgress implements store.Progress. Progress that cannot be
// decoded is left out and named in an error wrapping store.ErrCorrupt.
func (s *Store) LookupProgress(ctx context.Context, ids []string) ([]*store.ProgressRecord, error) {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("lookup progress", context.Background(), err)
	}
	defer cancel()
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		ops[i] = clientv3.OpGet(s.k.progress(id))
	}
	rs, err := s.read(ctx, ops)
	if err != nil {
		return nil, s.wrap("lookup progress", ctx, err)
	}
	var out []*store.ProgressRecord
	var bad error
	for i, r := range rs {
		kvs := r.GetKvs()
		if len(kvs) == 0 {
			continue
		}
		var pr progRec
		if err := decode(string(kvs[0].Key), kvs[0].Value, &pr); err != nil {
			bad = errors.Join(bad, err)
			continue
		}
		out = append(out, &store.ProgressRecord{InstanceID: ids[i], Attempt: pr.Attempt, Fraction: pr.Fraction, Message: pr.Message, Time: nt(pr.Time)})
	}
	if bad != nil {
		return out, fmt.Errorf("etcdstore: lookup progress: %w", bad)
	}
	return out, nil
}

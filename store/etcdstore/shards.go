package etcdstore

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// Wake implements store.Shards. Each instance due later moves in one
// transaction guarded on its dynamic record's revision: its ready-index
// key moves to the new RunAt (which a claim's watch sees as new work); one
// that changed meanwhile is read again.
func (s *Store) Wake(ctx context.Context, p *store.WakeParams) error {
	if err := p.Validate(); err != nil {
		return s.wrap("wake", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return s.wrap("wake", context.Background(), err)
	}
	defer cancel()
	now := tn(p.Now)
	pending := p.IDs
	for round := 0; len(pending) > 0; round++ {
		if round == maxRounds {
			return s.wrap("wake", ctx, errors.New("gave up after repeated conflicts"))
		}
		ops := make([]clientv3.Op, len(pending))
		for i, id := range pending {
			ops[i] = clientv3.OpGet(s.k.dyn(id))
		}
		rs, err := s.read(ctx, ops)
		if err != nil {
			return s.wrap("wake", ctx, err)
		}
		var gs []*group
		var ids []string
		for i, id := range pending {
			kvs := rs[i].GetKvs()
			if len(kvs) == 0 {
				continue
			}
			d, err := decodeDyn(string(kvs[0].Key), kvs[0].Value)
			if err != nil || d.State != store.Scheduled || d.RunAt <= now {
				continue
			}
			e := d.next() // no history appended: no event
			e.RunAt, e.Updated = now, now
			g := &group{guards: []guard{{s.k.dyn(id), kvs[0].ModRevision}}}
			g.del(s.k.ready(d))
			dv := mustJSON(&e)
			g.put(s.k.dyn(id), dv)
			s.addReady(g, &e, dv)
			gs = append(gs, g)
			ids = append(ids, id)
		}
		if err := s.commit(ctx, gs); err != nil {
			return s.wrap("wake", ctx, err)
		}
		pending = pending[:0:0]
		for i, g := range gs {
			if !g.applied {
				pending = append(pending, ids[i])
			}
		}
	}
	return nil
}

// byIDs reads the instances stored under ids, in the order of ids (one
// read at one revision); it is the store.GetInstances of
// store.LookupShards.
func (s *Store) byIDs(ctx context.Context, ids []string) ([]*store.Instance, error) {
	var bad corruption
	out, err := s.readInstances(ctx, ids, 0, &bad)
	if err != nil {
		return nil, err
	}
	return out, bad.err()
}

// readInstances reads the instances stored under ids in one read (at
// revision rev when it is not 0) and returns those found, in the order of
// ids; one gone meanwhile is left out, an undecodable one is added to bad.
func (s *Store) readInstances(ctx context.Context, ids []string, rev int64, bad *corruption) ([]*store.Instance, error) {
	var at []clientv3.OpOption
	if rev != 0 {
		at = append(at, clientv3.WithRev(rev))
	}
	ops := make([]clientv3.Op, 0, 2*len(ids))
	for _, id := range ids {
		ops = append(ops, clientv3.OpGet(s.k.static(id), at...), clientv3.OpGet(s.k.dyn(id), at...))
	}
	rs, err := s.read(ctx, ops)
	if err != nil {
		return nil, err
	}
	out := make([]*store.Instance, 0, len(ids))
	for j := range ids {
		skv, dkv := rs[2*j].GetKvs(), rs[2*j+1].GetKvs()
		if len(skv) == 0 || len(dkv) == 0 {
			continue
		}
		st, err := decodeStatic(string(skv[0].Key), skv[0].Value)
		if err != nil {
			bad.add(err)
			continue
		}
		d, err := decodeDyn(string(dkv[0].Key), dkv[0].Value)
		if err != nil {
			bad.add(err)
			continue
		}
		out = append(out, instance(st, d))
	}
	return out, nil
}

package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

var _ store.Admin = (*Store)(nil)

// Retry implements store.Admin. Each instance is one group of writes
// guarded by its dynamic record's ModRevision (new dynamic record with
// its history record appended, ready key, and its finished-index key
// deleted),
// the groups of a call sharing transactions; one that changed since it
// was read is read again.
func (s *Store) Retry(ctx context.Context, p *store.RetryParams) ([]store.AdminResult, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("retry", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("retry", context.Background(), err)
	}
	defer cancel()
	res, first := adminResults(p.IDs)
	now, runAt := p.Now, p.ReadyAt()
	msg := store.RetryMessage(p.Node)
	pending := uniqueRefs(first)
	for round := 0; len(pending) > 0; round++ {
		if round > maxRounds {
			return nil, s.wrap("retry", ctx, errors.New("gave up after repeated conflicts"))
		}
		ids := make([]string, len(pending))
		for j, i := range pending {
			ids[j] = p.IDs[i]
		}
		ds, revs, derrs, err := s.readDyn(ctx, ids)
		if err != nil {
			return nil, s.wrap("retry", ctx, err)
		}
		var gs []*group
		olds := map[*group]*dynRec{}
		for j, i := range pending {
			d, id := ds[j], ids[j]
			switch {
			case derrs[j] != nil:
				res[i].Err = fmt.Errorf("etcdstore: retry %s: %w", id, derrs[j])
				continue
			case d == nil:
				res[i].Err = fmt.Errorf("etcdstore: retry %s: %w", id, store.ErrNotFound)
				continue
			case !d.State.Final():
				res[i].Err = fmt.Errorf("etcdstore: retry %s: it is %v; cancel it first or wait for it to finish: %w", id, d.State, store.ErrNotFinished)
				continue
			}
			e := d.next()
			e.State = store.Scheduled
			if p.ResetAttempts {
				e.Attempt = 0
			}
			e.RunAt = tn(runAt)
			e.Owner, e.LeaseUntil, e.LeaseID, e.Cancel = "", 0, 0, false
			e.Updated, e.Finished = tn(now), 0
			e.Result, e.Error = nil, ""
			e.HSeq++
			g := &group{guards: []guard{{s.k.dyn(id), revs[j]}}, ref: i}
			g.del(s.k.legacyFinished(d, id))
			s.addHist(g, &e, d.State, now, p.Node, msg, nil)
			dv := mustJSON(&e)
			g.put(s.k.dyn(id), dv)
			s.addReady(g, &e, dv)
			gs = append(gs, g)
			olds[g] = d
		}
		if err := s.commit(ctx, gs); err != nil {
			return nil, s.wrap("retry", ctx, err)
		}
		pending = pending[:0]
		var done []*dynRec
		for _, g := range gs {
			if g.stale {
				pending = append(pending, g.ref)
				continue
			}
			res[g.ref].State = store.Scheduled
			done = append(done, olds[g])
		}
		if err := s.dropFinished(ctx, done); err != nil {
			return nil, s.wrap("retry", ctx, err)
		}
	}
	repeatResults(res, first, func(id string) error {
		return fmt.Errorf("etcdstore: retry %s: it was retried by this call already: %w", id, store.ErrNotFinished)
	})
	return res, nil
}

// Delete implements store.Admin. An instance's keys go in groups of at
// most the transaction's operation limit, every group guarded by its
// dynamic record's ModRevision, the records themselves in the last one;
// an instance that changed meanwhile is read again, so what a group
// already removed (index entries of its logs) is removed again with the
// rest. An instance with few log records is removed in one transaction.
func (s *Store) Delete(ctx context.Context, p *store.DeleteParams) ([]store.AdminResult, error) {
	if err := p.Validate(); err != nil {
		return nil, s.wrap("delete", ctx, err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("delete", context.Background(), err)
	}
	defer cancel()
	res, first := adminResults(p.IDs)
	pending := uniqueRefs(first)
	for round := 0; len(pending) > 0; round++ {
		if round > maxRounds {
			return nil, s.wrap("delete", ctx, errors.New("gave up after repeated conflicts"))
		}
		var gs []*group
		lasts := map[int]*group{}
		states := map[int]store.State{}
		olds := map[int]*dynRec{}
		for _, i := range pending {
			id := p.IDs[i]
			igs, st, d, err := s.deleteGroups(ctx, id)
			if err != nil {
				return nil, s.wrap("delete", ctx, err)
			}
			if igs == nil {
				res[i].Err = fmt.Errorf("etcdstore: delete %s: %w", id, store.ErrNotFound)
				continue
			}
			for _, g := range igs {
				g.ref = i
			}
			lasts[i], states[i], olds[i] = igs[len(igs)-1], st, d
			gs = append(gs, igs...)
		}
		if err := s.commit(ctx, gs); err != nil {
			return nil, s.wrap("delete", ctx, err)
		}
		pending = pending[:0]
		var done []*dynRec
		for i, last := range lasts {
			if last.applied {
				res[i].State = states[i]
				done = append(done, olds[i])
				continue
			}
			pending = append(pending, i)
		}
		if err := s.dropIndexed(ctx, done); err != nil {
			return nil, s.wrap("delete", ctx, err)
		}
		if err := s.dropEndedClaimRecords(ctx, done); err != nil {
			return nil, s.wrap("delete", ctx, err)
		}
	}
	repeatResults(res, first, func(id string) error {
		return fmt.Errorf("etcdstore: delete %s: it was deleted by this call already: %w", id, store.ErrNotFound)
	})
	return res, nil
}

// deleteGroups reads instance id and returns the groups that remove it,
// the state it is in and its record (nil when it does not decode); nil
// groups when it is not stored.
func (s *Store) deleteGroups(ctx context.Context, id string) ([]*group, store.State, *dynRec, error) {
	rs, err := s.read(ctx, []clientv3.Op{
		clientv3.OpGet(s.k.dyn(id)),
		clientv3.OpGet(s.k.logPrefix(id), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	})
	if err != nil {
		return nil, 0, nil, err
	}
	dkv := rs[0].GetKvs()
	if len(dkv) == 0 {
		return nil, 0, nil, nil
	}
	rev := dkv[0].ModRevision
	d, derr := decodeDyn(string(dkv[0].Key), dkv[0].Value)
	kind := ""
	if derr == nil {
		kind = d.Kind
	}
	gs, lp := s.logDeletes(id, kind, rs[1].GetKvs(), guard{s.k.dyn(id), rev})
	last := &group{guards: []guard{{s.k.dyn(id), rev}}}
	last.del(lp, clientv3.WithPrefix())
	last.del(s.k.static(id))
	last.del(s.k.progress(id))
	last.del(s.k.dyn(id))
	state := store.Scheduled // reported for an undecodable record
	if derr == nil {
		state = d.State
		s.countMove(last, d, d.State, 0, time.Time{})
		last.del(s.k.byCreated(d))
		switch {
		case d.State == store.Scheduled:
			last.del(s.k.ready(d))
		case d.State.Final():
			last.del(s.k.legacyFinished(d, id))
		}
		if d.UniqueKey != "" {
			ug, err := s.uniqueDelete(ctx, d.UniqueKey, id)
			if err != nil {
				return nil, 0, nil, err
			}
			if ug != nil {
				last.guards = append(last.guards, *ug)
				last.del(ug.key)
			}
		}
	}
	if derr != nil {
		d = nil
	}
	return append(gs, last), state, d, nil
}

// dropEndedClaimRecords deletes the claim records that list an attempt
// of ds (instances Delete removed while they were Processing) and no
// attempt still running: Delete ended them. It runs after the instances
// are gone, reading each owner's records once and all their members in
// one batched read, so deleting n instances of one claim costs O(n), not
// a read of the whole claim per instance. A record a rescuer rewrote
// meanwhile is left to it (the delete is guarded on the revision read);
// one left behind by a failed call lists only ended attempts, which the
// next rescue pass deletes.
func (s *Store) dropEndedClaimRecords(ctx context.Context, ds []*dynRec) error {
	deleted := map[string][]string{} // owner -> ids deleted while running under it
	for _, d := range ds {
		if d != nil && d.State == store.Processing && d.Owner != "" {
			deleted[d.Owner] = append(deleted[d.Owner], d.ID)
		}
	}
	var recs []claimRecAt
	for owner, ids := range deleted {
		resp, err := s.cli.Get(ctx, s.k.claimRecOwner(owner), clientv3.WithPrefix())
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			var r claimRec
			if decode(string(kv.Key), kv.Value, &r) != nil || len(r.IDs) != len(r.Attempts) {
				continue
			}
			if slices.ContainsFunc(r.IDs, func(id string) bool { return slices.Contains(ids, id) }) {
				recs = append(recs, claimRecAt{key: string(kv.Key), owner: owner, rec: r, rev: kv.ModRevision})
			}
		}
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.rec.IDs...)
	}
	if len(ids) == 0 {
		return nil
	}
	members, _, _, err := s.readDyn(ctx, ids)
	if err != nil {
		return err
	}
	var gs []*group
	for _, r := range recs {
		running := false
		for i, at := range r.rec.Attempts {
			o := members[0]
			members = members[1:]
			running = running || o != nil && o.State == store.Processing && o.Owner == r.owner && o.Attempt == at && o.ID == r.rec.IDs[i]
		}
		if !running {
			g := &group{guards: []guard{{r.key, r.rev}}}
			g.del(r.key)
			gs = append(gs, g)
		}
	}
	return s.commit(ctx, gs)
}

// logDeletes returns the groups that delete the time and kind index
// entries of instance id's log records (the keys under its log prefix,
// lp, returned too), each guarded by gd when gd names a key.
func (s *Store) logDeletes(id, kind string, logKeys []*mvccpb.KeyValue, gd guard) ([]*group, string) {
	var gs []*group
	mk := func() *group {
		g := &group{}
		if gd.key != "" {
			g.guards = []guard{gd}
		}
		return g
	}
	g := mk()
	lp := s.k.logPrefix(id)
	for _, kv := range logKeys {
		tail := string(kv.Key[len(lp):])
		if len(tail) < 16 {
			continue
		}
		t, ok := parseHex16(tail[:16])
		if !ok {
			continue
		}
		tm := nt(int64(t ^ 1<<63))
		g.del(s.k.logTime(tm, id, tail[16:]))
		if kind != "" {
			g.del(s.k.logKind(kind, tm, id, tail[16:]))
		}
		if len(g.ops) >= s.maxOps-16 {
			gs = append(gs, g)
			g = mk()
		}
	}
	if len(g.ops) > 0 {
		gs = append(gs, g)
	}
	return gs, lp
}

// uniqueDelete returns the guard of unique key uk when instance id holds
// it (nil when another instance does, or nobody).
func (s *Store) uniqueDelete(ctx context.Context, uk, id string) (*guard, error) {
	ur, err := s.cli.Get(ctx, s.k.unique(uk))
	if err != nil {
		return nil, err
	}
	if kvs := ur.Kvs; len(kvs) > 0 {
		var u uniqRec
		if decode(string(kvs[0].Key), kvs[0].Value, &u) == nil && u.ID == id {
			return &guard{string(kvs[0].Key), kvs[0].ModRevision}, nil
		}
	}
	return nil, nil
}

// adminResults returns one result per ID, each naming its ID, and for
// each ID the index of its first occurrence.
func adminResults(ids []string) ([]store.AdminResult, []int) {
	res := make([]store.AdminResult, len(ids))
	first := make([]int, len(ids))
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		res[i].ID = id
		if j, ok := at[id]; ok {
			first[i] = j
			continue
		}
		at[id] = i
		first[i] = i
	}
	return res, first
}

// uniqueRefs returns the indexes of the first occurrences.
func uniqueRefs(first []int) []int {
	var out []int
	for i, f := range first {
		if f == i {
			out = append(out, i)
		}
	}
	return out
}

// repeatResults answers the repeats of an ID as a second change of it
// would have been answered after the first: the first's error when it
// failed, else again(id).
func repeatResults(res []store.AdminResult, first []int, again func(id string) error) {
	for i, f := range first {
		if f == i {
			continue
		}
		if err := res[f].Err; err != nil {
			res[i].Err = err
		} else {
			res[i].Err = again(res[i].ID)
		}
	}
}

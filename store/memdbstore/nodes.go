package memdbstore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jobkit/job/store"
)

// WithClock sets the store's own clock, which the node registry reads:
// Heartbeat returns it as the store's time, and a node is dead when its
// last heartbeat is older than the dead threshold on it. Defaults to
// time.Now, the process wall clock, which every manager of the process
// shares unless it was given a clock of its own (job.WithClock). A manager
// that creates its default memdb store gives it the manager's clock. now
// must not be nil.
func WithClock(now func() time.Time) Option {
	return func(s *Store) error {
		if now == nil {
			return fmt.Errorf("%w: memdbstore.WithClock(nil); pass a func such as time.Now", store.ErrInvalid)
		}
		s.clock = now
		return nil
	}
}

// nodeRow is one node's record in the registry.
type nodeRow struct {
	info   store.NodeInfo
	status store.NodeStatus // NodeLive, NodeDead or NodeLeft; stale is computed
}

// Heartbeat implements store.Nodes.
func (s *Store) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: heartbeat: %w", err)
	}
	if err := ctxErr(ctx, "heartbeat"); err != nil {
		return nil, err
	}
	now := s.clock()
	retain := p.RetainOrDefault()
	s.nodesMu.Lock()
	defer s.nodesMu.Unlock()
	old := s.nodes[p.Node.ID]
	res := &store.HeartbeatResult{StoreNow: now, WasDead: old != nil && old.status == store.NodeDead}
	info := p.Node.Clone()
	info.LastSeen, info.StoreSeen = p.Now, now
	info.Status, info.GoneAt = 0, time.Time{}
	row := &nodeRow{info: *info, status: store.NodeLive}
	if p.Leaving {
		row.status, row.info.GoneAt = store.NodeLeft, now
	}
	s.nodes[p.Node.ID] = row
	for id, r := range s.nodes {
		last := r.info.StoreSeen
		if r.status != store.NodeLive {
			last = r.info.GoneAt
		}
		if now.Sub(last) > retain && !s.ownsAttempts(r) {
			delete(s.nodes, id)
		}
	}
	return res, nil
}

// ownsAttempts reports whether a dead node still owns running attempts to
// rescue: its record is kept until they are. s.nodesMu is held.
func (s *Store) ownsAttempts(r *nodeRow) bool {
	if r.status != store.NodeDead {
		return false
	}
	owner, ok := s.knownName(r.info.ID)
	if !ok {
		return false
	}
	t := s.snapshot()
	found := false
	t.owned.AscendGreaterOrEqual(&rec{leaseOwner: owner}, func(x *rec) bool {
		found = x.leaseOwner == owner
		return false
	})
	return found
}

// ListNodes implements store.Nodes.
func (s *Store) ListNodes(ctx context.Context, p *store.ListNodesParams) ([]*store.NodeInfo, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: list nodes: %w", err)
	}
	if err := ctxErr(ctx, "list nodes"); err != nil {
		return nil, err
	}
	now := s.clock()
	s.nodesMu.Lock()
	out := make([]*store.NodeInfo, 0, len(s.nodes))
	for _, r := range s.nodes {
		n := r.info.Clone()
		n.Status = r.status
		if r.status == store.NodeLive && now.Sub(n.StoreSeen) > p.DeadAfter {
			n.Status = store.NodeStale
		}
		out = append(out, n)
	}
	s.nodesMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// RescueNodes implements store.Nodes. Declaring a node dead happens under
// the registry's lock, so exactly one call declares it; its attempts are
// found in the index of running attempts by owner and moved under the
// write lock, each once.
func (s *Store) RescueNodes(ctx context.Context, p *store.RescueNodesParams) (*store.RescueNodesResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: rescue nodes: %w", err)
	}
	if err := ctxErr(ctx, "rescue nodes"); err != nil {
		return nil, err
	}
	res := &store.RescueNodesResult{}
	now := s.clock()
	var dead []string
	s.nodesMu.Lock()
	// Silence is measured up to the rescuer's own last heartbeat too (see
	// store.Nodes.RescueNodes).
	ref := now
	if me := s.nodes[p.Node]; me != nil && me.status == store.NodeLive && me.info.StoreSeen.Before(ref) {
		ref = me.info.StoreSeen
	}
	for id, r := range s.nodes {
		if id != p.Node && r.status == store.NodeLive && ref.Sub(r.info.StoreSeen) > p.DeadAfter {
			r.status, r.info.GoneAt = store.NodeDead, now
			res.Dead = append(res.Dead, id)
		}
		if r.status == store.NodeDead {
			dead = append(dead, id)
		}
	}
	s.nodesMu.Unlock()
	sort.Strings(res.Dead)
	owners := make(map[name]string, len(dead))
	for _, id := range dead {
		if n, ok := s.knownName(id); ok {
			owners[n] = id
		}
	}
	if len(owners) == 0 {
		return res, nil
	}
	at := nanos(p.Now)
	node := s.intern(p.Node)
	woken := map[string]struct{}{}
	err := s.write(ctx, "rescue nodes", func() error {
		names := s.nameList()
		var picked []*rec
		for owner := range owners {
			s.t.owned.AscendGreaterOrEqual(&rec{leaseOwner: owner}, func(r *rec) bool {
				if r.leaseOwner != owner || len(picked) >= p.Limit {
					return false
				}
				picked = append(picked, r)
				return true
			})
		}
		for _, old := range picked {
			msg := fmt.Sprintf("node %s stopped heartbeating: declared dead and its attempt rescued", names[old.leaseOwner])
			r := s.rescueMove(old, msg, at, node, names, woken)
			res.Rescued = append(res.Rescued, r.toInstance(names))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.notify(woken)
	return res, nil
}

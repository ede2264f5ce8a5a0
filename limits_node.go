package job

import (
	"fmt"
	"slices"

	"github.com/jobkit/job/store"
)

// WithNodeConcurrencyLimits bounds what runs on this manager alone: of the
// instances each limit matches (its Kind, every kind when empty, in its
// Queue, every queue when empty), at most Max run here at once; Max 0
// runs none of them here. Other managers are not bound by it, so N
// managers with a node limit of 4 may run 4N at once; a cluster-wide
// bound is Admin.SetConcurrencyLimit, and both apply when both are set.
//
// The manager enforces it in its claims, with no store support: a kind
// at its node limit is left out of the claim (work queued behind it is
// claimed as usual), and a claim that may take instances of a limit with
// room for fewer than the claim batch takes at most that many. An
// attempt holds its node slot until its outcome is written. Calling the
// option again adds limits; two for the same kind and queue are an
// error. See doc/limits.md.
func WithNodeConcurrencyLimits(ls ...ConcurrencyLimit) ManagerOption {
	return func(c *config) error {
		for _, l := range ls {
			if err := l.store().Validate(); err != nil {
				return fmt.Errorf("%w: node %w", ErrInvalidOption, err)
			}
			if l.PerKey {
				return fmt.Errorf("%w: node concurrency limit of %s per key; a node limit bounds the whole kind or queue (set PerKey on a cluster limit, Admin.SetConcurrencyLimit)", ErrInvalidOption, l.store().Scope())
			}
			if slices.ContainsFunc(c.nodeLimits, func(o store.ConcurrencyLimit) bool { return o.Kind == l.Kind && o.Queue == l.Queue }) {
				return fmt.Errorf("%w: two node concurrency limits of %s; give one per kind and queue", ErrInvalidOption, l.store().Scope())
			}
			c.nodeLimits = append(c.nodeLimits, l.store())
		}
		return nil
	}
}

// NodeConcurrencyLimits returns the limits WithNodeConcurrencyLimits set
// on this manager, each with how many instances it matches run here now
// (Waiting is not counted: 0).
func (m *Manager) NodeConcurrencyLimits() []LimitUse {
	ls := m.cfg.nodeLimits
	out := make([]LimitUse, len(ls))
	running := nodeRunning(ls, &m.active)
	for i, l := range ls {
		out[i] = LimitUse{ConcurrencyLimit: ConcurrencyLimit{Kind: l.Kind, Queue: l.Queue, Max: l.Max}, Running: int64(running[i])}
	}
	return out
}

// ConcurrencyLimits returns the cluster's concurrency limits as this
// manager last read them (it reads them again when older than
// DefaultLimitsRefresh, at its next claim), without reading the store:
// for observers such as metrics. Admin.ListConcurrencyLimits reads them,
// with their use.
func (m *Manager) ConcurrencyLimits() []ConcurrencyLimit {
	ls := m.limits.cached()
	out := make([]ConcurrencyLimit, len(ls))
	for i, l := range ls {
		out[i] = ConcurrencyLimit{Kind: l.Kind, Queue: l.Queue, Max: l.Max}
	}
	return out
}

// nodeRunning counts, per limit of ls, the attempts of active it matches:
// running, or ended with the outcome not yet written.
func nodeRunning(ls []store.ConcurrencyLimit, active *activeSet) []int {
	n := make([]int, len(ls))
	if len(ls) == 0 {
		return n
	}
	active.mu.Lock()
	defer active.mu.Unlock()
	for _, a := range active.m {
		for i, l := range ls {
			if l.Matches(a.rec.Kind, a.rec.Queue) {
				n[i]++
			}
		}
	}
	return n
}

// applyNodeLimits restricts claim p to the room the node limits ls leave,
// given the attempts in active: the kinds of a full limit are left out,
// and p.Limit is lowered to the smallest room of a limit the claim may
// still take from. ok is false when nothing is left to claim; held
// reports that a full limit left something out (work may wait for a
// slot on this node).
func applyNodeLimits(p *store.ClaimParams, ls []store.ConcurrencyLimit, active *activeSet) (ok, held bool) {
	if len(ls) == 0 {
		return true, false
	}
	running := nodeRunning(ls, active)
	kinds := p.Kinds
	for i, l := range ls {
		if (l.Queue != "" && l.Queue != p.Queue) || running[i] < l.Max {
			continue
		}
		held = true
		if l.Kind == "" || len(kinds) == 0 {
			// Every kind of the queue, or a claim of any kind (which
			// cannot leave one out): nothing may be claimed.
			return false, true
		}
		kinds = slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == l.Kind })
		if len(kinds) == 0 {
			return false, true
		}
	}
	p.Kinds = kinds
	for i, l := range ls {
		if (l.Queue != "" && l.Queue != p.Queue) || running[i] >= l.Max {
			continue
		}
		if l.Kind != "" && len(kinds) > 0 && !slices.Contains(kinds, l.Kind) {
			continue // the claim cannot take what it matches
		}
		p.Limit = min(p.Limit, l.Max-running[i])
	}
	return true, held
}

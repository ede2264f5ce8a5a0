package job

import (
	"context"
	"time"

	"github.com/jobkit/job/store"
)

// renewBatch bounds the leases one Renew call carries.
const renewBatch = 512

// renewLoop renews the leases of this manager's attempts every third of
// the lease, in batches. An attempt whose lease was lost is given up: its
// context is canceled with ErrLeaseLost and its outcome discarded; one
// whose cancellation was requested elsewhere has its context canceled with
// ErrCanceled. A lease is never renewed past its attempt's timeout plus
// grace (see watchlist.leaseCap). Each renewal that succeeds moves the
// attempt's fence (see watchdog); one that fails leaves it, so an attempt
// that cannot renew stops before its lease ends (its outcome is written
// all the same, see Manager.fence: the store may still hold the lease).
// The loop keeps running after Stop closes stopCh, until the completer has
// written every outcome, so nothing is rescued meanwhile.
//
// Renewals start a renew interval apart, however long each takes, and a
// quarter of one apart while they fail: with the default lease an attempt
// is fenced only when no renewal succeeded for 25 s, after the first
// failed try and six more.
func (m *Manager) renewLoop() {
	defer m.renewWG.Done()
	wait := m.cfg.renewInterval
	for {
		if !sleep(m.clock, wait, m.renewStop) {
			return
		}
		started := m.clock.Now()
		interval := m.cfg.renewInterval
		if !m.renew() {
			interval /= 4
		}
		wait = interval - m.clock.Now().Sub(started) // sleep returns at once when <= 0
	}
}

// renew renews every lease this manager holds once; it reports false when
// a store call failed.
func (m *Manager) renew() bool {
	all := m.active.snapshot()
	if len(all) == 0 {
		return true
	}
	now := m.clock.Now()
	full := now.Add(m.cfg.lease)
	// Group the attempts by the deadline they may be renewed to: all of
	// them up to a full lease, except those whose timeout caps it.
	var (
		normal []*attempt
		capped map[int64][]*attempt
	)
	for i, held := range m.watch.leases(all) {
		a := all[i]
		until := full
		if c := m.watch.leaseCap(a); !c.IsZero() && c.Before(until) {
			until = c
		}
		if !until.After(held) || !until.After(now) {
			continue // capped: no later deadline is allowed
		}
		if until.Equal(full) {
			normal = append(normal, a)
			continue
		}
		if capped == nil {
			capped = map[int64][]*attempt{}
		}
		capped[until.UnixNano()] = append(capped[until.UnixNano()], a)
	}
	ok := m.renewBatches(normal, full, now)
	for until, as := range capped {
		ok = m.renewBatches(as, time.Unix(0, until), now) && ok
	}
	return ok
}

// renewBatches renews the leases of as until until, renewBatch at a time;
// it reports false when a store call failed.
func (m *Manager) renewBatches(as []*attempt, until, now time.Time) bool {
	ok := true
	for len(as) > 0 {
		n := min(len(as), renewBatch)
		batch := as[:n]
		as = as[n:]
		byRef := make(map[store.LeaseRef]*attempt, n)
		refs := make([]store.LeaseRef, n)
		for i, a := range batch {
			refs[i] = a.ref()
			byRef[refs[i]] = a
		}
		ctx, cancel := context.WithTimeout(m.renewCtx, m.cfg.renewInterval)
		res, err := m.store.Renew(ctx, &store.RenewParams{Owner: m.node, Leases: refs, Until: until, Now: now})
		cancel()
		if err != nil {
			m.log.Warn("renew leases", "count", n, "err", err)
			ok = false
			continue
		}
		for _, r := range res.Lost {
			a := byRef[r]
			if a == nil {
				continue
			}
			delete(byRef, r)
			// An attempt already settled is being written; its outcome
			// will be rejected on its own if the lease is really gone.
			if m.giveUp(a) {
				m.log.Warn("lease lost; canceling the attempt", "instance", r.ID, "attempt", r.Attempt)
				m.cfg.obs.leaseLost(a.rec, LeaseLostRenew)
				a.cancel(ErrLeaseLost)
				m.active.remove(a)
			}
		}
		renewed := make([]*attempt, 0, len(byRef))
		for _, a := range byRef {
			renewed = append(renewed, a)
		}
		m.watch.extend(renewed, until)
		for _, r := range res.CancelRequested {
			if a := byRef[r]; a != nil {
				a.cancel(ErrCanceled)
			}
		}
	}
	return ok
}

// rescueLoop moves instances whose lease expired (their manager crashed)
// back to the queue, or to Terminated when out of retries. Every manager
// runs it; the store's Rescue is atomic, so each is rescued once.
func (m *Manager) rescueLoop() {
	defer m.bg.Done()
	for {
		if !sleep(m.clock, m.cfg.rescueInterval, m.stopCh) {
			return
		}
		// A rescuer whose clock is ahead would take back live leases.
		if ok, _ := m.nodeOK(); !ok {
			continue
		}
		for {
			ctx, cancel := context.WithTimeout(m.runCtx, 30*time.Second)
			rescued, err := m.store.Rescue(ctx, &store.RescueParams{Now: m.clock.Now(), Limit: 256, Node: m.node})
			cancel()
			if err != nil {
				m.log.Warn("rescue expired leases", "err", err)
				break
			}
			m.shardsEnded(m.runCtx, rescued)
			if len(rescued) > 0 {
				m.log.Info("rescued instances with expired leases", "count", len(rescued))
				m.notifyLocal()
				m.signalChanged()
			}
			if len(rescued) < 256 {
				break
			}
		}
	}
}

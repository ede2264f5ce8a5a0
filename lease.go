package job

import (
	"context"
	"time"

	"github.com/jobkit/job/store"
)

// renewBatch bounds the leases one Renew call carries.
const renewBatch = 512

// renewLoop renews the leases of this manager's attempts every third of
// the lease, in batches. An attempt whose lease was lost has its context
// canceled with ErrLeaseLost and its outcome discarded; one whose
// cancellation was requested elsewhere has its context canceled with
// ErrCanceled. It keeps running after Stop closes stopCh, until the
// completer has written every outcome, so nothing is rescued meanwhile.
func (m *Manager) renewLoop() {
	defer m.renewWG.Done()
	for {
		if !sleep(m.clock, m.cfg.renewInterval, m.renewStop) {
			return
		}
		m.renew()
	}
}

func (m *Manager) renew() {
	all := m.active.snapshot()
	for len(all) > 0 {
		n := min(len(all), renewBatch)
		batch := all[:n]
		all = all[n:]
		byRef := make(map[store.LeaseRef]*attempt, n)
		refs := make([]store.LeaseRef, n)
		for i, a := range batch {
			refs[i] = a.ref()
			byRef[refs[i]] = a
		}
		now := m.clock.Now()
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.renewInterval)
		res, err := m.store.Renew(ctx, &store.RenewParams{Owner: m.node, Leases: refs, Until: now.Add(m.cfg.lease), Now: now})
		cancel()
		if err != nil {
			m.log.Warn("renew leases", "count", n, "err", err)
			continue
		}
		for _, r := range res.Lost {
			// An attempt already settled is being written; its outcome
			// will be rejected on its own if the lease is really gone.
			if a := byRef[r]; a != nil && a.settled.CompareAndSwap(false, true) {
				m.log.Warn("lease lost; canceling the attempt", "instance", r.ID, "attempt", r.Attempt)
				a.cancel(ErrLeaseLost)
				m.active.remove(a)
			}
		}
		for _, r := range res.CancelRequested {
			if a := byRef[r]; a != nil {
				a.cancel(ErrCanceled)
			}
		}
	}
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
		for {
			ctx, cancel := context.WithTimeout(m.runCtx, 30*time.Second)
			rescued, err := m.store.Rescue(ctx, &store.RescueParams{Now: m.clock.Now(), Limit: 256, Node: m.node})
			cancel()
			if err != nil {
				m.log.Warn("rescue expired leases", "err", err)
				break
			}
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

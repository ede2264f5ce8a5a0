package job

import "github.com/jobkit/job/store"

// watchCancels cancels this manager's attempts whose cancellation the
// store reports at once (store.CancelNotifier: Cancel called by any node,
// or jobd pushing it to a remote worker), so a canceled attempt stops
// without waiting for its next lease renewal, which still reports every
// request. It runs as long as the renewer, through Stop's drain.
func (m *Manager) watchCancels() {
	defer m.renewWG.Done()
	n, ok := m.cfg.store.(store.CancelNotifier) // the store itself, not observedStore
	if !ok {
		return
	}
	for try := 0; ; try++ {
		ch, err := n.SubscribeCancels(m.renewCtx)
		if err == nil {
			try = 0
			for ref := range ch {
				if a := m.active.get(ref.ID); a != nil && a.rec.Attempt == ref.Attempt {
					a.cancel(ErrCanceled)
				}
			}
		}
		if m.renewCtx.Err() != nil {
			return
		}
		d := retryDelay(try)
		m.log.Warn("store cancel notices ended; resubscribing (cancels still arrive with lease renewals)", "err", err, "in", d)
		if !sleep(SystemClock{}, d, m.renewStop) {
			return
		}
	}
}

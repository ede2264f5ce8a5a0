package job

// watchCancels cancels this manager's attempts whose cancellation the
// store reports at once (store.CancelNotifier: Cancel called by any node,
// or jobd pushing it to a remote worker), so a canceled attempt stops
// without waiting for its next lease renewal, which still reports every
// request. It runs as long as the renewer, through Stop's drain.
func (r *renewer) watchCancels(quit <-chan struct{}) {
	if r.notices == nil {
		return
	}
	for try := 0; ; try++ {
		ch, err := r.notices.SubscribeCancels(r.ctx)
		if err == nil {
			try = 0
			select { // renew now: a cancel before this sent no notice here
			case r.subscribed <- struct{}{}:
			default:
			}
			for ref := range ch {
				if a := r.active.get(ref.ID); a != nil && a.rec.Attempt == ref.Attempt {
					a.cancel(ErrCanceled)
				}
			}
		}
		if r.ctx.Err() != nil {
			return
		}
		d := retryDelay(try)
		r.log.Warn("store cancel notices ended; resubscribing (cancels still arrive with lease renewals)", "err", err, "in", d)
		if !sleep(SystemClock{}, d, quit) {
			return
		}
	}
}

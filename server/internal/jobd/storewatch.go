package jobd

import (
	"context"
	"log/slog"
	"time"
)

// storeWatchEvery is how often watchStore pings the store, and
// storePingTimeout how long one ping may take.
const (
	storeWatchEvery  = 500 * time.Millisecond
	storePingTimeout = time.Second
)

// watchStore pings the store every storeWatchEvery until ctx ends and
// logs each change of state once: "store unreachable" when a ping first
// fails, "store reachable again" when one first succeeds after. down
// follows the state, for quietWhileDown.
func (st *stores) watchStore(ctx context.Context, log *slog.Logger) {
	ping := st.watchPing
	if ping == nil {
		ping = st.ping
	}
	if ping == nil {
		return
	}
	tick := time.NewTicker(storeWatchEvery)
	defer tick.Stop()
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-st.poke:
		}
		pctx, cancel := context.WithTimeout(ctx, storePingTimeout)
		err := ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !st.down.Load():
			since = time.Now()
			st.down.Store(true)
			log.Warn("store unreachable", "store", st.describe, "err", err,
				"hint", "jobd keeps trying; it logs again when the store answers (/readyz answers 503 meanwhile)")
		case err == nil && st.down.Load():
			st.down.Store(false)
			log.Info("store reachable again", "store", st.describe, "down_for", time.Since(since).Round(time.Millisecond).String())
		}
	}
}

// quietWhileDown is the log handler of the components that call the
// store (the managers, the alert evaluators): while the store is known to
// be down (watchStore logged it once), their warnings — a failed
// heartbeat every few hundred milliseconds, a failed evaluation every
// step — are logged at debug instead. Errors are logged as they come.
//
// A warning while the store is thought up pokes watchStore to ping at
// once, so an outage is found by the first failure it causes.
type quietWhileDown struct {
	slog.Handler
	st *stores
}

func (h quietWhileDown) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, l) || l == slog.LevelWarn
}

func (h quietWhileDown) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		if h.st.down.Load() {
			r.Level = slog.LevelDebug
		} else {
			select {
			case h.st.poke <- struct{}{}:
			default:
			}
		}
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietWhileDown) WithAttrs(as []slog.Attr) slog.Handler {
	return quietWhileDown{h.Handler.WithAttrs(as), h.st}
}

func (h quietWhileDown) WithGroup(name string) slog.Handler {
	return quietWhileDown{h.Handler.WithGroup(name), h.st}
}

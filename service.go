package job

import (
	"context"
	"sync"
	"sync/atomic"
)

// The engine is made of services: the claimer, the completer, the log
// writer, the renewer, the rescuer, the watchdog, the heartbeat, the
// trigger scheduler, and so on. Each is a type of its own, built by
// NewManager from a deps struct that holds what it uses (store, clock,
// logger, settings, and callbacks for what it asks of the others), never
// from *Manager. Manager.Start starts them; Manager.Stop stops them in the
// order written there (see doc/design.md, "The engine in parts").
type service interface {
	// start starts the service's goroutines and returns at once.
	start()
	// halt asks the service to end and returns at once.
	halt()
	// wait returns when the service's goroutines have returned.
	wait()
}

// stopAll halts every one of ss, then waits for each.
func stopAll(ss ...service) {
	for _, s := range ss {
		s.halt()
	}
	for _, s := range ss {
		s.wait()
	}
}

// stopping is a step of Manager.Stop that stops s.
func stopping(s service) func() { return func() { stopAll(s) } }

// loops runs a service's goroutines until it is stopped: one quit channel
// they all watch, and one WaitGroup for them all. The zero value is ready
// once reset.
type loops struct {
	quit chan struct{}
	wg   sync.WaitGroup
}

// reset prepares a new run: call it before go.
func (l *loops) reset() { l.quit = make(chan struct{}) }

// goLoop runs f on a goroutine of its own until it returns; f watches quit.
func (l *loops) goLoop(f func(quit <-chan struct{})) {
	l.wg.Add(1)
	quit := l.quit
	go func() {
		defer l.wg.Done()
		f(quit)
	}()
}

// halt closes quit: every loop ends at its next look at it.
func (l *loops) halt() { close(l.quit) }

// wait returns when every loop has returned.
func (l *loops) wait() { l.wg.Wait() }

// runScope is the parent of every attempt's context and of the store
// calls of the claimer, the rescuer and the schedulers: Stop cancels it
// with cause ErrShutdown when its ctx ends.
type runScope struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// open starts a run.
func (r *runScope) open() { r.ctx, r.cancel = context.WithCancelCause(context.Background()) }

// writeScope is what the completer and the log writer share: the context
// that bounds their store calls, which Stop cancels when it gives up on
// what is not written yet, and the last write error, which Stop reports.
type writeScope struct {
	ctx     context.Context
	cancel  context.CancelFunc
	lastErr atomic.Pointer[error]
}

// open starts a run: the writes go on until cancel.
func (w *writeScope) open() { w.ctx, w.cancel = context.WithCancel(context.Background()) }

// failed records err as the last write error.
func (w *writeScope) failed(err error) { w.lastErr.Store(&err) }

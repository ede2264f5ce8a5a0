package job

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/jobkit/job/store"
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

// wire builds the engine's services, each from what it uses; the
// callbacks in their deps are how they reach each other.
func (m *Manager) wire() {
	c := &m.cfg
	m.logs = newLogWriter(logWriterDeps{
		store: m.store, clock: c.clock, node: c.node, log: m.log, writes: &m.writes, changed: m.signalChanged,
	})
	recheck := c.shardRecheck
	if recheck <= 0 {
		recheck = DefaultShardRecheck
	}
	m.shards = newShards(shardsDeps{
		store: m.store, clock: c.clock, node: c.node, log: m.log, run: &m.run, recheck: recheck,
		deadAfter: c.deadAfter, reg: m.reg, active: &m.active, woke: m.notifyLocal,
	})
	notices, _ := c.store.(store.CancelNotifier) // the store itself, not observedStore
	m.renewer = newRenewer(renewerDeps{
		store: m.store, notices: notices, clock: c.clock, node: c.node, log: m.log,
		lease: c.lease, interval: c.renewInterval, active: &m.active, watch: &m.watch, obs: c.obs,
		giveUp: m.giveUp,
	})
	m.rescuer = newRescuer(rescuerDeps{
		store: m.store, clock: c.clock, node: c.node, log: m.log, interval: c.rescueInterval, deadAfter: c.deadAfter,
		run: &m.run, nodes: &m.nodes, ended: m.instancesEnded,
		found: func() {
			m.notifyLocal()
			m.signalChanged()
		},
	})
	m.completer = newCompleter(completerDeps{
		store: m.store, clock: c.clock, node: c.node, log: m.log, writes: &m.writes, active: &m.active, obs: c.obs,
		batch: c.finishBatch, linger: c.finishLinger, interval: c.finishInterval,
		storeFull: func(full bool) { m.claimer.setStoreFull(full) }, recorded: func(r *finishReq, state State) { m.afterFinish(r, state); m.workflowRecorded(r, state) },
		ended:   m.instancesEnded,
		retried: m.notifyLocal, storeWakes: m.storeWakesFor, changed: m.outcomesWritten,
	})
	notifier, _ := c.store.(store.Notifier) // the store itself, not observedStore
	m.limits = &limitCache{store: m.store, clock: c.clock, log: m.log, every: DefaultLimitsRefresh, enforce: store.EnforcesLimits(c.store), enforceRates: store.EnforcesRateLimits(c.store)}
	m.claimer = newClaimer(claimerDeps{
		store: m.store, notifier: notifier, clock: c.clock, node: c.node, log: m.log,
		queues: c.queues, labels: c.labels, batch: c.claimBatch, poll: c.pollInterval, lease: c.lease,
		pool: m.pool, reg: m.reg, nodes: &m.nodes, run: &m.run, active: &m.active, completer: m.completer, logs: m.logs,
		wake: m.wake, dispatch: m.dispatch, fenceAll: m.fenceAll, spreadPause: m.shards.waitSpreadPause,
		limits: m.limits, nodeLimits: c.nodeLimits,
	})
	m.scheduler = newScheduler(schedulerDeps{
		store: m.store, clock: c.clock, node: c.node, log: m.log, reload: c.triggerReload,
		run: &m.run, nodes: &m.nodes, wake: m.trigWake, calendarRules: m.Admin().GetCalendarRules,
		cancel: func(ctx context.Context, id string) error {
			_, err := m.CancelInstance(ctx, id)
			return err
		},
		cancelWorkflow: func(ctx context.Context, id string) error {
			_, err := m.CancelWorkflow(ctx, id)
			return err
		},
		scheduleTemplate: m.scheduleTriggerTemplate, // trigger_workflow.go
		jobFor:           m.jobFor, enqueued: m.notifyLocal, upgrader: triggerUpgrader(c.store),
	})
	m.heartbeater = newHeartbeater(heartbeaterDeps{
		store: m.store, clock: c.clock, log: m.log, interval: c.heartbeat, deadAfter: c.deadAfter,
		fenceAfter: c.fenceAfter(), maxSkew: c.maxSkew, nodes: &m.nodes,
		info: m.nodeInfo, fenceAll: m.fenceAll, stuck: m.stuck.Load,
	})
	m.watchdog = newWatchdog(watchdogDeps{
		watch: &m.watch, clock: c.clock, log: m.log, allowance: c.stopAllowance(), active: &m.active,
		completer: m.completer, logs: m.logs, giveUpAs: m.giveUpAs, outcome: m.outcome,
	})
}

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

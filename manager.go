package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// Manager registers jobs, schedules their instances into its store, and
// runs the instances of its queues on a pool of workers. Several managers
// sharing one store form a cluster: each instance attempt is claimed by
// exactly one of them.
//
// A Manager is safe for concurrent use. Its zero value is not usable; call
// NewManager.
type Manager struct {
	cfg   config
	store store.Store
	reg   *registry
	log   *slog.Logger
	clock Clock
	node  string
	cals  calendarCache // the calendars of recurring jobs (calendar.go)

	mu        sync.Mutex
	running   bool
	stopped   bool
	recurring map[string]chan struct{} // kind → closed to stop its ticker
	// bg runs the Manager's own loops (recurring jobs' tickers, retention,
	// executor types' sync) and its idle workers; halted by Stop with the
	// intake.
	bg loops

	// The services (service.go), built by wire; Start starts them and
	// Stop stops them in the order it lists.
	claimer     *claimer     // claims ready instances (claimer.go)
	completer   *completer   // writes outcomes (completer.go)
	logs        *logWriter   // writes instance logs (log_writer.go)
	renewer     *renewer     // renews leases until every outcome is written (lease.go)
	rescuer     *rescuer     // rescues expired leases and dead nodes (rescuer.go)
	watchdog    *watchdog    // acts on the deadlines in watch (watchdog.go)
	heartbeater *heartbeater // heartbeats from Start to the end of Stop (heartbeat.go)
	scheduler   *scheduler   // fires stored triggers' ticks (trigger.go)
	shards      *shards      // joins sharded tasks, spreads their shards (shards.go)
	done        doneTasks    // workflow tasks seen done here (workflow_release.go)

	// What the services share.
	//
	// run is the parent of every attempt's context; canceled with
	// ErrShutdown when Stop's ctx ends.
	run runScope
	// writes bounds the outcome and log writers; canceled when Stop
	// gives up on what is not written yet.
	writes  writeScope
	watch   watchlist     // the deadlines of running attempts (watchdog.go)
	active  activeSet     // the attempts running or not yet recorded
	nodes   nodeState     // the node's standing, set by the heartbeat (node.go)
	started time.Time     // when Start ran, as the node registry shows it
	wake    chan struct{} // rung by notifyLocal: the claimer may find work
	// trigWake is rung when the stored triggers changed here: the
	// scheduler reloads them.
	trigWake chan struct{}

	handlers   handlerRunner // runs job handlers off the engine's goroutines
	enq        enqueuer      // ScheduleJob's group commit
	defs       defCache      // jobs built from stored definitions (definitions.go)
	xs         execSync      // kinds run by executor types (executortypes.go)
	pool       *pool
	undecided  atomic.Int64                  // dispatched attempts whose end is not decided yet
	settledSig chan struct{}                 // signalled when undecided drops to 0
	stuck      atomic.Int64                  // executors still running after their attempt was given up
	handoff    chan *attempt                 // to an idle worker goroutine (see dispatch)
	changed    atomic.Pointer[chan struct{}] // closed and replaced after each flush
	limits     *limitCache                   // the cluster's concurrency limits (limits.go)
}

// NewManager returns a manager configured by opts. It does not start
// workers; call Start.
func NewManager(opts ...ManagerOption) (*Manager, error) {
	var c config
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.store == nil {
		clk := c.clock
		if clk == nil {
			clk = SystemClock{}
		}
		// The store's clock is the manager's: they are one process.
		s, err := memdbstore.New(memdbstore.WithClock(clk.Now))
		if err != nil {
			return nil, fmt.Errorf("job: default store: %w", err)
		}
		c.store = s
	}
	c.defaults()
	m := &Manager{
		cfg:        c,
		store:      c.store,
		reg:        newRegistry(),
		log:        c.logger.With("component", "jobkit", "node", c.node),
		clock:      c.clock,
		node:       c.node,
		recurring:  make(map[string]chan struct{}),
		pool:       newPool(c.workers),
		active:     activeSet{m: make(map[string]*attempt)},
		wake:       make(chan struct{}, 1),
		handoff:    make(chan *attempt),
		settledSig: make(chan struct{}, 1),
		trigWake:   make(chan struct{}, 1),
	}
	m.watch = watchlist{allowance: c.stopAllowance(), wake: make(chan struct{}, 1)}
	m.enq = enqueuer{st: c.store, node: c.node, clock: c.clock}
	m.handlers.log = m.log
	ch := make(chan struct{})
	m.changed.Store(&ch)
	if err := m.observe(); err != nil {
		return nil, err
	}
	// The services are built once the store is wrapped for the observers.
	m.wire()
	return m, nil
}

// NodeID returns the manager's node ID, as leases, history and logs name
// it.
func (m *Manager) NodeID() string { return m.node }

// RegisterJob adds j to the manager. A recurring job starts scheduling its
// ticks at once if the manager is running, else at Start.
func (m *Manager) RegisterJob(j *Job) error {
	if j == nil {
		return fmt.Errorf("%w: nil job", ErrInvalidJob)
	}
	if err := m.checkDataConflict(j); err != nil {
		return err
	}
	if err := m.reg.add(j); err != nil {
		return err
	}
	m.notifyLocal() // the claim loop claims the new kind from now on
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running && m.cfg.publishDefs {
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		defer cancel()
		if err := m.publish(ctx, j); err != nil {
			_, _ = m.reg.remove(j.kind)
			return err
		}
	}
	if m.running && j.recurring != nil {
		m.startRecurringLocked(j)
	}
	return nil
}

// UnregisterJob removes the job of that kind. Its recurring schedule, if
// any, stops on this manager, and in the cluster once no manager has the
// kind registered; instances already scheduled stay in the store for
// managers that still run the kind. The next tick a recurring job had
// already enqueued is never failed by a manager without the kind: it is
// handed back for one that runs it, and Canceled when none has run it a
// minute past its tick.
func (m *Manager) UnregisterJob(kind string) error {
	if _, err := m.reg.remove(kind); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if stop, ok := m.recurring[kind]; ok {
		close(stop)
		delete(m.recurring, kind)
	}
	return nil
}

// GetJob returns the registered job of that kind.
func (m *Manager) GetJob(kind string) (*Job, error) { return m.reg.lookup(kind) }

// RegisteredKinds returns the kinds registered with the manager, sorted.
func (m *Manager) RegisteredKinds() []string { return m.reg.kinds() }

// SetWorkers changes how many instances run at once, while running or not.
// Shrinking never interrupts running attempts; it only claims less.
//
// SetWorkers(0) pauses the manager: it claims nothing from then on, while
// the attempts it runs finish and record their outcomes (their leases are
// still renewed), and it goes on heartbeating, scheduling, canceling,
// rescuing and firing recurring ticks, like a producer made with
// WithWorkers(0). SetWorkers(n) with n > 0 resumes claiming at once. The
// pause and the resume are logged at Info. (go-job's ResizeWorkers
// refused 0; a negative n is an error wrapping ErrInvalidOption here.)
func (m *Manager) SetWorkers(n int) error {
	if n < 0 {
		return fmt.Errorf("%w: %d workers, want 0 (pause: claim nothing) or more", ErrInvalidOption, n)
	}
	old, busy := m.pool.stats()
	m.pool.resize(n)
	switch {
	case n == 0 && old != 0:
		m.log.Info("workers set to 0: this manager claims nothing until SetWorkers(n > 0); running attempts finish", "node", m.node, "running", busy)
	case n != 0 && old == 0:
		m.log.Info("workers set from 0: claiming again", "node", m.node, "workers", n)
	}
	m.notifyLocal()
	return nil
}

// Workers returns the worker count and how many are busy.
func (m *Manager) Workers() (size, busy int) { return m.pool.stats() }

// wakeFor wakes the claim loop for a write of this manager into queue q,
// unless the store's own wake-up for that write will (q's wake-ups are
// subscribed): at low rates the two claimed one job and then nothing.
func (m *Manager) wakeFor(q string) {
	if !m.storeWakesFor(q) {
		m.notifyLocal()
	}
}

// storeWakesFor reports whether the store's wake-ups for queue q reach the
// claim loop (claimer.storeWakes).
func (m *Manager) storeWakesFor(q string) bool {
	return m.claimer != nil && m.claimer.storeWakesFor(q)
}

// notifyLocal wakes the claim loop.
func (m *Manager) notifyLocal() { m.claimer.ring() }

// signalChanged wakes Wait.
func (m *Manager) signalChanged() {
	ch := make(chan struct{})
	old := m.changed.Swap(&ch)
	close(*old)
}

// Start starts the manager's background work: claiming and running
// instances of its queues, renewing leases, rescuing expired ones,
// scheduling recurring jobs' ticks, and retention. ctx bounds only the
// start itself; call Stop to stop. A stopped manager cannot start again.
func (m *Manager) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("job: start: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running {
		return ErrAlreadyStarted
	}
	if m.stopped {
		return fmt.Errorf("%w: a stopped manager cannot start again; create a new one", ErrNotRunning)
	}
	// A kind stored with an executor cannot also be a Go function here.
	// A store that cannot be read now (not up yet) is checked again in
	// the background once running (recheckGoKindsLoop).
	recheck := false
	cctx, ccancel := context.WithTimeout(ctx, conflictCheckTimeout)
	err := m.checkGoKindsStored(cctx)
	ccancel()
	if err != nil {
		if errors.Is(err, ErrDuplicateKind) {
			return err
		}
		m.log.Warn("start: the stored definitions could not be read; checking again in the background", "error", err)
		recheck = true
	}
	if m.cfg.publishDefs {
		for _, j := range m.reg.all() {
			if err := m.publish(ctx, j); err != nil {
				return fmt.Errorf("job: start: %w", err)
			}
		}
	}
	m.running = true
	m.bg.reset()
	m.startExecutors(ctx)
	if recheck {
		m.bg.goLoop(m.recheckGoKindsLoop)
	}
	m.run.open()
	m.writes.open()
	m.started = m.clock.Now()
	m.nodes.mu.Lock()
	m.nodes.lastOK = m.started // the fence window runs from the start
	m.nodes.mu.Unlock()
	m.nodes.beat = make(chan struct{}, 1)

	m.handlers.start(m.cfg.handlerQueue)
	// The writers first, the intake last: nothing is claimed before
	// its outcome can be written, its lease renewed and its deadlines
	// watched.
	for _, s := range []service{m.completer, m.logs, m.renewer, m.heartbeater, m.watchdog} {
		s.start()
	}
	for _, s := range m.intake() {
		s.start()
	}
	m.bg.goLoop(m.pruneLoop)
	for _, j := range m.reg.all() {
		if j.recurring != nil {
			m.startRecurringLocked(j)
		}
	}
	m.log.Debug("manager started", "workers", m.cfg.workers, "queues", m.cfg.queues)
	return nil
}

// Stop stops claiming and scheduling, lets running attempts finish until
// ctx ends, then cancels those still running (their context's cause is
// ErrShutdown) and hands back the attempts whose executors return on that
// cancel (an error wrapping context.Canceled or ErrShutdown), so another
// manager can run them at once without counting the attempt; one whose
// executor returns anything else ran to its end and has its outcome
// recorded as usual.
//
// Stop is bounded by ctx. When ctx has a deadline, Stop keeps the end of
// it (half the time left, at most the stop allowance: a sixth of the
// lease) for the hand-back, and returns by the deadline; when ctx is
// canceled without one, the hand-back takes at most the stop allowance
// after that. An executor still running when that time is up is never
// handed back: its lease is left to lapse at its deadline, and only then
// can another manager rescue the instance (the attempt counted); what it
// returns later is discarded. Outcomes and logs the store has not taken
// by then are given up (their leases lapse and the instances are rescued
// the same way). Last, Stop records in the node registry that the node
// left, so that it is not declared dead (which would have its attempts
// rescued at once); while executors still run, a failed write of it is
// retried until the node could be declared dead (the dead threshold after
// its last heartbeat, a second by default), which may take Stop past
// ctx's deadline by as much.
//
// Stop returns nil when everything ended as designed: every attempt
// finished or handed back, every outcome and log recorded. Otherwise it
// returns an error that wraps ctx's error and says how many outcomes and
// logs were not recorded and how many attempts were left running.
// Executors given up (see Stuck) may still run after it returns; the
// manager's own goroutines have ended or are ending.
func (m *Manager) Stop(ctx context.Context) error {
	if err := m.haltIntake(); err != nil {
		return err
	}
	lostOutcomes, lostLogs := m.completer.lost.Load(), m.logs.lost.Load()
	// soft ends when running attempts must be canceled; with a deadline,
	// early enough to hand them back by it.
	soft, cancel := m.softDeadline(ctx)
	defer cancel()

	// 1. No more claims, rescues or ticks.
	m.waitIntake(soft)
	// 2. The end of every running attempt is decided: drained, or handed
	// back.
	left, release := m.settleAttempts(ctx, soft)
	defer release()
	// 3. The services that outlive the attempts, in this order.
	for _, step := range m.teardown(ctx) {
		step()
	}

	if n := m.stuck.Load(); n > 0 {
		m.log.Warn("stopped with executors still running after their attempts were given up; Go cannot stop them", "count", n)
	}
	return m.stopError(ctx, soft, m.completer.lost.Load()-lostOutcomes, m.logs.lost.Load()-lostLogs, left)
}

// intake is what brings work in: the claimer, the rescuer and the trigger
// scheduler (when on). Stop halts them first, together with the
// background loops of the Manager itself (bg: recurring jobs' tickers,
// retention, executor types' sync).
func (m *Manager) intake() []service {
	ss := []service{m.claimer, m.rescuer}
	if !m.cfg.schedulerOff {
		ss = append(ss, m.scheduler)
	}
	return ss
}

// haltIntake marks the manager stopped and asks the intake to end; it
// returns ErrNotRunning when the manager does not run.
func (m *Manager) haltIntake() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running {
		return ErrNotRunning
	}
	m.running = false
	m.stopped = true
	m.bg.halt()
	for _, s := range m.intake() {
		s.halt()
	}
	for kind, stop := range m.recurring {
		close(stop)
		delete(m.recurring, kind)
	}
	return nil
}

// softDeadline is when Stop cancels the attempts still running: with a
// deadline, early enough to hand them back by it (half the time left, at
// most the stop allowance); without one, when ctx ends.
func (m *Manager) softDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, d.Add(-min(m.cfg.stopAllowance(), time.Until(d)/2)))
}

// waitIntake waits until the intake has ended. When soft ends first, the
// run scope is canceled: the intake's store calls and the attempts end.
func (m *Manager) waitIntake(soft context.Context) {
	done := make(chan struct{})
	go func() {
		m.bg.wait()
		for _, s := range m.intake() {
			s.wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-soft.Done():
		m.run.cancel(ErrShutdown)
		<-done
	}
}

// settleAttempts decides the end of every running attempt and bounds the
// writes left. Drained in time: the writes left end with ctx. Drained
// only because soft's end canceled the attempts (their executors returned
// on it at once), or not at all: the attempts are handed back, and the
// writes get the hand-back's time, as a ctx that is already done at Stop
// must not cancel the hand-backs it just caused. It returns how many
// attempts were left running, and what to call when Stop returns.
func (m *Manager) settleAttempts(ctx, soft context.Context) (left int, release func()) {
	if m.drain(soft) == nil && soft.Err() == nil {
		stopWrites := context.AfterFunc(ctx, m.writes.cancel)
		return 0, func() { stopWrites() }
	}
	var hb context.Context
	var cancel context.CancelFunc
	if d, ok := ctx.Deadline(); ok {
		hb, cancel = context.WithDeadline(context.WithoutCancel(ctx), d)
	} else {
		hb, cancel = context.WithTimeout(context.WithoutCancel(ctx), m.cfg.stopAllowance())
	}
	left = m.handBack(hb)
	stopWrites := context.AfterFunc(hb, m.writes.cancel)
	return left, func() {
		stopWrites()
		cancel()
	}
}

// teardown is what Stop does once the end of every attempt is decided,
// step by step, in order.
func (m *Manager) teardown(ctx context.Context) []func() {
	return []func(){
		// The watchdog has nothing left to watch; every outcome it hands
		// over is queued once it has returned.
		stopping(m.watchdog),
		// Every queued outcome is written, or given up when the writes
		// end.
		stopping(m.completer),
		// The handlers of those outcomes run, until ctx ends.
		func() {
			if n := m.handlers.stop(ctx); n > 0 {
				m.log.Warn("stop: job handlers still running; their queued calls are dropped", "calls", n)
			}
		},
		// No outcome is left to write: the leases may lapse.
		stopping(m.renewer),
		// Every log is written, the handlers' included.
		stopping(m.logs),
		// The heartbeat runs to the end, so a stopping node is never
		// taken for dead; then the node records that it left.
		stopping(m.heartbeater),
		func() { m.heartbeater.leave(ctx) },
		func() {
			m.writes.cancel()
			m.run.cancel(ErrShutdown)
			m.signalChanged()
		},
	}
}

// stopError is Stop's answer: nil when every outcome and log was recorded
// and no attempt was left running, else an error wrapping the cause.
func (m *Manager) stopError(ctx, soft context.Context, lostOutcomes, lostLogs int64, left int) error {
	if lostOutcomes == 0 && lostLogs == 0 && left == 0 {
		return nil
	}
	cause := ctx.Err()
	if cause == nil {
		cause = soft.Err()
	}
	if cause == nil {
		if p := m.writes.lastErr.Load(); p != nil {
			cause = *p
		}
	}
	var parts []string
	if lostOutcomes > 0 || lostLogs > 0 {
		parts = append(parts, plural(lostOutcomes, "outcome")+" and "+plural(lostLogs, "log")+" not recorded")
	}
	if left > 0 {
		parts = append(parts, plural(int64(left), "attempt")+" left running, not handed back")
	}
	return fmt.Errorf("job: stop: %s (their leases lapse, then other managers rescue the instances): %w", strings.Join(parts, "; "), cause)
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// drain waits until the end of every running attempt is decided, or ctx
// ends.
func (m *Manager) drain(ctx context.Context) error {
	for {
		if m.undecided.Load() == 0 {
			return nil
		}
		select {
		case <-m.settledSig:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// handBack cancels the attempts still running with cause ErrShutdown and
// waits until ctx ends for their executors to return; each one stopped by
// the cancel is handed back (see outcome: Scheduled at its old run time,
// attempt not counted), each one that ran to its end all the same has its
// outcome recorded. It never hands back an attempt whose executor still runs:
// those are given up, their leases no longer renewed, and it returns how
// many.
func (m *Manager) handBack(ctx context.Context) int {
	m.run.cancel(ErrShutdown)
	if m.drain(ctx) == nil {
		return 0
	}
	left := 0
	for _, a := range m.active.snapshot() {
		if m.giveUp(a) {
			m.active.remove(a)
			left++
			m.log.Warn("executor still running after Stop canceled it; not handing it back while it runs: its lease lapses at its deadline, then another manager may run it",
				"instance", a.rec.ID, "kind", a.rec.Kind, "attempt", a.rec.Attempt, "lease_until", a.leaseDeadline(&m.watch))
		}
	}
	return left
}

// Wait returns when no instance of the manager's queues is pending or
// running (ticks of recurring jobs not yet due do not count), every job
// handler call queued so far has returned, and the logs written by
// executors and handlers are stored; or with ctx's error when ctx ends
// first.
func (m *Manager) Wait(ctx context.Context) error {
	for {
		m.completer.hurry() // outcomes held for a batch (WithFinishInterval)
		changed := *m.changed.Load()
		idle, err := m.idle(ctx)
		if err != nil {
			return fmt.Errorf("job: wait: %w", err)
		}
		if idle {
			return nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("job: wait: %w", ctx.Err())
		}
		t.Stop()
	}
}

func (m *Manager) idle(ctx context.Context) (bool, error) {
	if m.busy() {
		return false, nil
	}
	now := m.clock.Now()
	for _, q := range m.cfg.queues {
		insts, err := m.store.LookupInstances(ctx, &store.Query{
			Queue: q, States: []store.State{store.Scheduled, store.Processing}, Limit: 256,
		})
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return false, err
		}
		for _, in := range insts {
			pendingTick := in.State == store.Scheduled && in.RunAt.After(now) && isTick(in)
			if !pendingTick {
				return false, nil
			}
		}
		if len(insts) == 256 {
			return false, nil
		}
	}
	// Again: an attempt claimed, run and finished while the store was read
	// (a wide window through jobd's round trips) is no longer pending
	// there, but its logs, outcome or handlers may still be on their way.
	return !m.busy(), nil
}

// busy says the manager still runs attempts or has outcomes, handler
// calls or logs not yet written. Handlers before logs: a handler's logs
// are queued before it returns.
func (m *Manager) busy() bool {
	return m.active.len() > 0 || m.completer.queued.Load() > 0 || m.handlers.pending.Load() > 0 || m.logs.queued.Load() > 0
}

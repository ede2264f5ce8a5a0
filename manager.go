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

	mu      sync.Mutex
	running bool
	stopped bool
	stopCh  chan struct{} // closed by Stop: stop claiming and scheduling ticks
	bg      sync.WaitGroup
	// renewStop ends the lease renewer, which outlives stopCh until every
	// outcome is written.
	renewStop chan struct{}
	renewWG   sync.WaitGroup
	// runCtx is the parent of every attempt's context; canceled with
	// ErrShutdown when Stop's ctx ends.
	runCtx    context.Context
	runCancel context.CancelCauseFunc
	recurring map[string]chan struct{} // kind → closed to stop its ticker
	trigWake  chan struct{}            // the stored triggers changed here: reload them
	handlers  handlerRunner            // runs job handlers off the engine's goroutines

	// renewCtx bounds lease renewals; canceled when the renewer stops.
	renewCtx    context.Context
	renewCancel context.CancelFunc
	// writeCtx bounds the outcome and log writers; canceled when Stop
	// gives up on what is not written yet.
	writeCtx    context.Context
	writeCancel context.CancelFunc
	// watch holds the deadlines of running attempts; the watchdog acts on
	// them until watchStop is closed.
	watch     watchlist
	watchStop chan struct{}
	watchWG   sync.WaitGroup
	submitWG  sync.WaitGroup // outcomes the watchdog hands over in the background

	enq          enqueuer // ScheduleJob's group commit
	defs         defCache // jobs built from stored definitions (definitions.go)
	xs           execSync // kinds run by executor types (executortypes.go)
	pool         *pool
	active       activeSet
	finishMu     sync.RWMutex // guards finishCh against sends after close
	finishClosed bool
	finishCh     chan *finishReq
	finishWG     sync.WaitGroup
	undecided    atomic.Int64  // dispatched attempts whose end is not decided yet
	settledSig   chan struct{} // signalled when undecided drops to 0
	stuck        atomic.Int64  // executors still running after their attempt was given up
	lostOutcomes atomic.Int64  // outcomes given up without being written
	lostLogs     atomic.Int64  // log records given up without being written
	lastWriteErr atomic.Pointer[error]
	logMu        sync.RWMutex // guards logCh against sends after close
	logCh        chan *store.LogRecord
	logWG        sync.WaitGroup
	wake         chan struct{}
	// storeWakes holds, per queue the manager claims from, whether the
	// store's wake-ups for it are subscribed (subscribe): a write of this
	// manager then wakes the claim loop through the store's notification,
	// and a local wake-up as well would cost a second claim (wakeFor).
	storeWakes map[string]*atomic.Bool
	handoff    chan *attempt                 // to an idle worker goroutine (see dispatch)
	changed    atomic.Pointer[chan struct{}] // closed and replaced after each flush
	unflushed  atomic.Int64                  // outcomes submitted but not yet applied
	logsQueued atomic.Int64                  // log records queued but not yet written

	// claimSeq numbers this manager's claims (store.ClaimParams.ClaimSeq);
	// only the claim loop uses it. It starts at the wall clock's
	// nanoseconds, so a manager restarted under the same node ID numbers
	// above its previous run.
	claimSeq uint64
	// storeFull is set while the store refuses outcomes for want of space
	// (store.ErrFull): the claim loop claims nothing meanwhile.
	storeFull  atomic.Bool
	fullLogged bool // claim loop only: the pause was logged

	// The node registry (node.go): the heartbeat loop runs from Start to
	// the end of Stop.
	nodes   nodeState
	started time.Time
	hbStop  chan struct{}
	hbWG    sync.WaitGroup
	// hbPending is a heartbeat call given up on that has not answered
	// yet; only the heartbeat loop uses it.
	hbPending *hbCall

	// spread spreads the shards of a task over nodes (shards_spread.go).
	spread spreadState
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

		claimSeq: uint64(time.Now().UnixNano()),
	}
	m.watch = watchlist{allowance: c.stopAllowance(), wake: make(chan struct{}, 1)}
	m.storeWakes = make(map[string]*atomic.Bool, len(c.queues))
	for _, q := range c.queues {
		m.storeWakes[q] = new(atomic.Bool)
	}
	m.enq = enqueuer{st: c.store, node: c.node, clock: c.clock}
	m.handlers.log = m.log
	ch := make(chan struct{})
	m.changed.Store(&ch)
	if err := m.observe(); err != nil {
		return nil, err
	}
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

// LookupJob returns the registered job of that kind.
func (m *Manager) LookupJob(kind string) (*Job, error) { return m.reg.lookup(kind) }

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
// claim loop (see storeWakes).
func (m *Manager) storeWakesFor(q string) bool {
	w := m.storeWakes[q]
	return w != nil && w.Load()
}

// notifyLocal wakes the claim loop.
func (m *Manager) notifyLocal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

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
	m.stopCh = make(chan struct{})
	m.startExecutors(ctx)
	if recheck {
		m.bg.Add(1)
		go m.recheckGoKindsLoop(m.stopCh)
	}
	m.runCtx, m.runCancel = context.WithCancelCause(context.Background())
	m.finishCh = make(chan *finishReq, 4*m.cfg.finishBatch)
	m.writeCtx, m.writeCancel = context.WithCancel(context.Background())
	m.renewCtx, m.renewCancel = context.WithCancel(context.Background())
	m.logMu.Lock()
	m.logCh = make(chan *store.LogRecord, 8192)
	m.logMu.Unlock()

	m.handlers.start(m.cfg.handlerQueue)
	m.finishWG.Add(1)
	go m.completer()
	m.logWG.Add(1)
	go m.logWriter(m.logCh)
	m.renewStop = make(chan struct{})
	m.renewWG.Add(2)
	go m.renewLoop()
	go m.watchCancels() // issue 21: cancels pushed by the store
	m.started = m.clock.Now()
	m.nodes.mu.Lock()
	m.nodes.lastOK = m.started // the fence window runs from the start
	m.nodes.mu.Unlock()
	m.hbStop = make(chan struct{})
	m.nodes.beat = make(chan struct{}, 1)
	m.hbWG.Add(1)
	go m.heartbeatLoop()
	m.bg.Add(1)
	go m.nodeRescueLoop()
	m.watchStop = make(chan struct{})
	m.watchWG.Add(1)
	go m.watchdog()
	m.bg.Add(3 + len(m.cfg.queues))
	go m.claimLoop()
	go m.rescueLoop()
	go m.pruneLoop()
	for _, q := range m.cfg.queues {
		go m.subscribe(q)
	}
	for _, j := range m.reg.all() {
		if j.recurring != nil {
			m.startRecurringLocked(j)
		}
	}
	if !m.cfg.schedulerOff {
		m.bg.Add(1)
		go m.triggerLoop()
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
	m.mu.Lock()
	if !m.running {
		m.mu.Unlock()
		return ErrNotRunning
	}
	m.running = false
	m.stopped = true
	close(m.stopCh)
	for kind, stop := range m.recurring {
		close(stop)
		delete(m.recurring, kind)
	}
	m.mu.Unlock()
	lostOutcomes, lostLogs := m.lostOutcomes.Load(), m.lostLogs.Load()

	// soft ends when running attempts must be canceled; with a deadline,
	// early enough to hand them back by it.
	soft := ctx
	allowance := m.cfg.stopAllowance()
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		soft, cancel = context.WithDeadline(ctx, d.Add(-min(allowance, time.Until(d)/2)))
		defer cancel()
	}

	// No more claims or ticks. Their store calls end with runCtx.
	bgDone := make(chan struct{})
	go func() {
		m.bg.Wait()
		close(bgDone)
	}()
	select {
	case <-bgDone:
	case <-soft.Done():
		m.runCancel(ErrShutdown)
		<-bgDone
	}

	left := 0
	// Drained in time: the writes left end with ctx. Drained only because
	// soft's end canceled the attempts (their executors returned on it at
	// once), or not at all: the attempts are handed back, and the writes
	// get the hand-back's time, as a ctx that is already done at Stop must
	// not cancel the hand-backs it just caused.
	if m.drain(soft) == nil && soft.Err() == nil {
		stopWrites := context.AfterFunc(ctx, m.writeCancel)
		defer stopWrites()
	} else {
		var hb context.Context
		var cancel context.CancelFunc
		if d, ok := ctx.Deadline(); ok {
			hb, cancel = context.WithDeadline(context.WithoutCancel(ctx), d)
		} else {
			hb, cancel = context.WithTimeout(context.WithoutCancel(ctx), allowance)
		}
		defer cancel()
		left = m.handBack(hb)
		stopWrites := context.AfterFunc(hb, m.writeCancel)
		defer stopWrites()
	}
	// Every attempt's end is decided: the watchdog has nothing left to
	// do, and every outcome is queued once its hand-overs are done.
	close(m.watchStop)
	m.watchWG.Wait()
	m.submitWG.Wait()
	m.finishMu.Lock()
	m.finishClosed = true
	close(m.finishCh)
	m.finishMu.Unlock()
	m.finishWG.Wait()
	if n := m.handlers.stop(ctx); n > 0 {
		m.log.Warn("stop: job handlers still running; their queued calls are dropped", "calls", n)
	}
	m.renewCancel()
	close(m.renewStop)
	m.renewWG.Wait()
	m.logMu.Lock()
	close(m.logCh)
	m.logCh = nil
	m.logMu.Unlock()
	m.logWG.Wait()
	close(m.hbStop)
	m.hbWG.Wait()
	m.leave(ctx)
	m.writeCancel()
	m.runCancel(ErrShutdown)
	m.signalChanged()

	if n := m.stuck.Load(); n > 0 {
		m.log.Warn("stopped with executors still running after their attempts were given up; Go cannot stop them", "count", n)
	}
	lostOutcomes = m.lostOutcomes.Load() - lostOutcomes
	lostLogs = m.lostLogs.Load() - lostLogs
	if lostOutcomes == 0 && lostLogs == 0 && left == 0 {
		return nil
	}
	cause := ctx.Err()
	if cause == nil {
		cause = soft.Err()
	}
	if cause == nil {
		if p := m.lastWriteErr.Load(); p != nil {
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
	m.runCancel(ErrShutdown)
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
	return m.active.len() > 0 || m.unflushed.Load() > 0 || m.handlers.pending.Load() > 0 || m.logsQueued.Load() > 0
}

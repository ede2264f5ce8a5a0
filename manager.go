package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

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

	enq        enqueuer // ScheduleJob's group commit
	pool       *pool
	active     activeSet
	finishCh   chan *finishReq
	finishWG   sync.WaitGroup
	logMu      sync.RWMutex // guards logCh against sends after close
	logCh      chan *store.LogRecord
	logWG      sync.WaitGroup
	wake       chan struct{}
	handoff    chan *attempt                 // to an idle worker goroutine (see dispatch)
	changed    atomic.Pointer[chan struct{}] // closed and replaced after each flush
	unflushed  atomic.Int64                  // outcomes submitted but not yet applied
	logsQueued atomic.Int64                  // log records queued but not yet written
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
	c.defaults()
	m := &Manager{
		cfg:       c,
		store:     c.store,
		reg:       newRegistry(),
		log:       c.logger.With("component", "jobkit", "node", c.node),
		clock:     c.clock,
		node:      c.node,
		recurring: make(map[string]chan struct{}),
		pool:      newPool(c.workers),
		active:    activeSet{m: make(map[string]*attempt)},
		wake:      make(chan struct{}, 1),
		handoff:   make(chan *attempt),
	}
	m.enq = enqueuer{st: c.store, node: c.node, clock: c.clock}
	ch := make(chan struct{})
	m.changed.Store(&ch)
	return m, nil
}

func (c *config) defaults() {
	if c.store == nil {
		c.store = memdbstore.New()
	}
	if c.workers == 0 {
		c.workers = DefaultWorkers
	}
	if len(c.queues) == 0 {
		c.queues = []string{DefaultQueue}
	}
	if c.node == "" {
		host, _ := os.Hostname()
		c.node = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), strings.ReplaceAll(uuid.NewString()[:8], "-", ""))
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.clock == nil {
		c.clock = SystemClock{}
	}
	if c.lease == 0 {
		c.lease = DefaultLease
	}
	c.renewInterval = c.lease / 3
	if c.pollInterval == 0 {
		c.pollInterval = DefaultPollInterval
	}
	if c.rescueInterval == 0 {
		c.rescueInterval = DefaultRescueInterval
	}
	if c.claimBatch == 0 {
		c.claimBatch = DefaultClaimBatch
	}
	if c.finishBatch == 0 {
		c.finishBatch = DefaultFinishBatch
	}
	if !c.lingerSet {
		c.finishLinger = DefaultFinishLinger
	}
	if c.pruneInterval == 0 {
		c.pruneInterval = DefaultPruneInterval
	}
	if c.finishedMaxAge == 0 && c.finishedMax == 0 && c.historyMaxAge == 0 && c.logMaxAge == 0 {
		c.finishedMaxAge, c.finishedMax = DefaultFinishedMaxAge, DefaultFinishedMax
		c.historyMaxAge, c.logMaxAge = DefaultHistoryMaxAge, DefaultLogMaxAge
	}
}

// NodeID returns the manager's node ID, as leases, history and logs name
// it.
func (m *Manager) NodeID() string { return m.node }

// Store returns the manager's store.
func (m *Manager) Store() store.Store { return m.store }

// RegisterJob adds j to the manager. A recurring job starts scheduling its
// ticks at once if the manager is running, else at Start.
func (m *Manager) RegisterJob(j *Job) error {
	if j == nil {
		return fmt.Errorf("%w: nil job", ErrInvalidJob)
	}
	if err := m.reg.add(j); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running && j.recurring != nil {
		m.startRecurringLocked(j)
	}
	return nil
}

// UnregisterJob removes the job of that kind. Its recurring schedule, if
// any, stops on this manager; instances already scheduled stay in the store
// for managers that still run the kind.
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

// ScheduleJob stores a new instance of the job of that kind, due now unless
// opts say otherwise. The arguments are checked against the executor's
// parameters before anything is stored. When a unique key is held by
// another instance, it returns that instance and an error wrapping
// ErrDuplicate.
//
// Concurrent calls share store round trips: calls made while another's
// write is in flight go to the store together in one batch when it
// returns (see enqueuer), and a call made while none is in flight goes
// straight through. A call whose ctx ends while it waits for its batch
// returns ctx's error and stores nothing.
func (m *Manager) ScheduleJob(ctx context.Context, kind string, opts ...ScheduleOption) (Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job: schedule %q: %w", kind, err)
	}
	j, err := m.reg.lookup(kind)
	if err != nil {
		return nil, err
	}
	var c scheduleConfig
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, fmt.Errorf("job: schedule %q: %w", kind, err)
		}
	}
	rec, err := m.newRecord(j, &c)
	if err != nil {
		return nil, fmt.Errorf("job: schedule %q: %w", kind, err)
	}
	res, err := m.enq.enqueue(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("job: schedule %q: %w", kind, err)
	}
	if res.Err != nil {
		if errors.Is(res.Err, store.ErrDuplicate) {
			holder, lerr := m.LookupInstance(ctx, res.ID)
			if lerr != nil {
				return nil, fmt.Errorf("job: schedule %q: %w (and looking up holder %s: %v)", kind, res.Err, res.ID, lerr)
			}
			return holder, fmt.Errorf("job: schedule %q with unique key %q: %w (held by instance %s)", kind, rec.UniqueKey, res.Err, res.ID)
		}
		return nil, fmt.Errorf("job: schedule %q: %w", kind, res.Err)
	}
	rec.State, rec.Seq, rec.UpdatedAt = store.Scheduled, res.Seq, rec.CreatedAt
	m.notifyLocal()
	inst := newInstance(rec, m)
	if j.onStateChange != nil {
		j.onStateChange(inst, store.Scheduled)
	}
	return inst, nil
}

// newRecord builds the stored record of a new instance of j.
func (m *Manager) newRecord(j *Job, c *scheduleConfig) (*store.Instance, error) {
	args, err := j.exec.encodeArgs(c.args)
	if err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("job: new instance ID: %w", err)
	}
	now := m.clock.Now()
	rec := &store.Instance{
		ID:         id.String(),
		Kind:       j.kind,
		Queue:      j.queue,
		Args:       args,
		Priority:   int(j.priority),
		MaxRetries: j.maxRetries,
		Timeout:    j.timeout,
		CreatedAt:  now,
		RunAt:      now,
	}
	if c.queue != "" {
		rec.Queue = c.queue
	}
	if c.priority != nil {
		rec.Priority = int(*c.priority)
	}
	if c.maxRetries != nil {
		rec.MaxRetries = *c.maxRetries
	}
	if c.timeout != nil {
		rec.Timeout = *c.timeout
	}
	switch {
	case !c.runAt.IsZero():
		rec.RunAt = c.runAt
	case c.after > 0:
		rec.RunAt = now.Add(c.after)
	}
	rec.RunAt = rec.RunAt.Add(jitter(c.jitter))
	if c.uniqueKey != "" {
		rec.UniqueKey, rec.UniqueUntil = c.uniqueKey, now.Add(c.uniqueTTL)
	}
	if c.tickKey != "" {
		rec.UniqueKey, rec.UniqueUntil = c.tickKey, c.tickHoldTil
	}
	return rec, nil
}

// CancelInstance cancels the instance with that ID. A pending instance is
// Canceled at once; a running one has its context canceled (at once when it
// runs on this manager, at the owner's next lease renewal otherwise) and
// ends Canceled. It returns ErrNotFound or ErrFinished when there is
// nothing to cancel.
func (m *Manager) CancelInstance(ctx context.Context, id string) (Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job: cancel %s: %w", id, err)
	}
	rec, err := m.store.Cancel(ctx, &store.CancelParams{ID: id, Now: m.clock.Now(), Node: m.node})
	if err != nil {
		return nil, fmt.Errorf("job: cancel %s: %w", id, err)
	}
	if rec.State == store.Processing {
		if a := m.active.get(id); a != nil && a.rec.Attempt == rec.Attempt {
			a.cancel(ErrCanceled)
		}
	} else if j, ok := m.reg.get(rec.Kind); ok && j.onStateChange != nil {
		j.onStateChange(newInstance(rec, m), rec.State)
	}
	return newInstance(rec, m), nil
}

// SetWorkers changes how many instances run at once, while running or not.
// Shrinking never interrupts running attempts; it only claims less.
func (m *Manager) SetWorkers(n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: %d workers, want at least 1", ErrInvalidOption, n)
	}
	m.pool.resize(n)
	m.notifyLocal()
	return nil
}

// Workers returns the worker count and how many are busy.
func (m *Manager) Workers() (size, busy int) { return m.pool.stats() }

// notifyLocal wakes the claim loop.
func (m *Manager) notifyLocal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// appendLog implements logSink for the manager's instances.
func (m *Manager) appendLog(rec *store.LogRecord) {
	rec.Time = m.clock.Now()
	rec.Node = m.node
	m.logMu.RLock()
	if m.logCh != nil {
		m.logsQueued.Add(1)
		select {
		case m.logCh <- rec:
			m.logMu.RUnlock()
			return
		default: // the buffer is full: write through rather than drop
			m.logsQueued.Add(-1)
		}
	}
	m.logMu.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.store.AppendLogs(ctx, []*store.LogRecord{rec}); err != nil {
		m.log.Error("write instance log", "instance", rec.InstanceID, "err", err)
	}
}

// signalChanged wakes Wait.
func (m *Manager) signalChanged() {
	ch := make(chan struct{})
	old := m.changed.Swap(&ch)
	close(*old)
}

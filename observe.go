package job

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/store"
)

// Observer is told what a manager does as it does it: the events a metrics
// collector counts (see the module github.com/jobkit/job/metrics for a
// Prometheus one). Give one to a manager with WithObserver.
//
// The manager calls an Observer synchronously, from its own goroutines
// (workers, the claim loop, the completer, the renewer, the rescuers, and
// every goroutine that makes a store call, ScheduleJob's callers
// included), concurrently: its methods must be safe for concurrent use,
// return quickly and never block, or they slow the engine down. Events are
// passed by value and hold nothing to release; an Observer must not keep
// the error of a StoreCallEvent beyond the call. A panic in a method is
// contained: logged (the first, then one in 10,000), the event dropped for
// that observer, and the engine and the other observers go on.
//
// Events report what this manager did: a cluster's totals are the sum over
// its managers. Embed NopObserver to implement only some methods and keep
// compiling when new events are added.
type Observer interface {
	// Scheduled: the store took a new instance from this manager
	// (ScheduleJob, a recurring or stored trigger's tick). Duplicates
	// (ErrDuplicate) and repeats of an instance stored already are not
	// reported.
	Scheduled(ScheduledEvent)
	// AttemptStarted: the manager claimed an attempt and hands it to a
	// worker.
	AttemptStarted(AttemptStartedEvent)
	// AttemptFinished: the store recorded an attempt's outcome (the
	// instance's new state is in the event). Attempts whose outcome the
	// store refused are reported to LeaseLost instead.
	AttemptFinished(AttemptFinishedEvent)
	// LeaseLost: the manager gave up a running attempt because its lease
	// was lost, or the store refused its outcome because another manager
	// had rescued it. An attempt a fence stopped (its lease could not be
	// renewed in time, or its node's heartbeats failed) is reported once,
	// when its executor has returned: to AttemptFinished when the store
	// took its outcome (it still held the lease), else here with the
	// fence's reason (the store refused the outcome, or it could not be
	// written).
	LeaseLost(LeaseLostEvent)
	// Rescued: this manager's rescuer moved an attempt of a crashed or
	// cut-off manager out of Processing (its lease ended, or its node was
	// declared dead).
	Rescued(RescuedEvent)
	// Canceled: an instance that was not running was canceled through this
	// manager (CancelInstance, a bulk cancel). A running one is reported by
	// AttemptFinished once its owner ends it.
	Canceled(CanceledEvent)
	// StoreCall: one call of the manager to its store returned, after
	// Duration (real time, whatever the manager's Clock).
	StoreCall(StoreCallEvent)
}

// ManagerObserver is an Observer that also reads the manager it observes,
// for figures no event carries (Manager.Workers, Counts, Lag, ListNodes).
// NewManager calls ObserveManager once, when the manager is built and
// before it returns; an error fails NewManager.
type ManagerObserver interface {
	Observer
	ObserveManager(m *Manager) error
}

// NopObserver implements Observer with methods that do nothing. Embed it in
// an observer that wants only some events.
type NopObserver struct{}

// Scheduled does nothing.
func (NopObserver) Scheduled(ScheduledEvent) {}

// AttemptStarted does nothing.
func (NopObserver) AttemptStarted(AttemptStartedEvent) {}

// AttemptFinished does nothing.
func (NopObserver) AttemptFinished(AttemptFinishedEvent) {}

// LeaseLost does nothing.
func (NopObserver) LeaseLost(LeaseLostEvent) {}

// Rescued does nothing.
func (NopObserver) Rescued(RescuedEvent) {}

// Canceled does nothing.
func (NopObserver) Canceled(CanceledEvent) {}

// StoreCall does nothing.
func (NopObserver) StoreCall(StoreCallEvent) {}

// ScheduledEvent describes an instance the store took.
type ScheduledEvent struct {
	Kind, Queue string
	// Delay is how far in the future the instance's run time was when it
	// was scheduled; 0 for one due at once.
	Delay time.Duration
}

// AttemptStartedEvent describes an attempt handed to a worker.
type AttemptStartedEvent struct {
	Kind, Queue string
	// Attempt is the attempt's number, 1 for the first.
	Attempt int
	// Wait is how long the instance was ready before this attempt started:
	// the manager's clock at the claim minus the instance's run time (for
	// a retry, the time its backoff ended), 0 when not positive.
	Wait time.Duration
}

// AttemptFinishedEvent describes an attempt whose outcome the store
// recorded.
type AttemptFinishedEvent struct {
	Kind, Queue string
	Attempt     int
	// State is the state the store left the instance in: Completed,
	// Terminated, TimedOut, Canceled, or Scheduled for another attempt
	// (Retry) or after a hand-back (HandedBack).
	State State
	// Retry: the attempt failed or timed out and the instance is
	// Scheduled again after its backoff.
	Retry bool
	// HandedBack: the manager handed the attempt back without counting it
	// (Stop, or a fence: its lease could not be renewed in time, or its
	// node's heartbeats failed), so another can run it at once.
	HandedBack bool
	// Duration is how long the attempt ran, on the manager's clock: from
	// its start to its executor's return, or to when the manager decided
	// its end without it (a timeout whose executor ignored its context).
	Duration time.Duration
}

// LeaseLostReason says why an attempt's lease was lost.
type LeaseLostReason uint8

// The reasons of a LeaseLostEvent.
const (
	// LeaseLostRenew: a renewal found the lease was no longer this
	// manager's (another manager rescued the instance).
	LeaseLostRenew LeaseLostReason = iota + 1
	// LeaseLostFence: no renewal succeeded before the lease's deadline
	// came within the stop allowance; the attempt was canceled, and the
	// store did not take its outcome.
	LeaseLostFence
	// LeaseLostNode: the node's heartbeats failed for the fence window and
	// it canceled every running attempt; the store did not take this
	// one's outcome.
	LeaseLostNode
	// LeaseLostFinish: the store refused the attempt's outcome, because
	// another manager had rescued the instance meanwhile.
	LeaseLostFinish
)

var leaseLostNames = [...]string{LeaseLostRenew: "renew", LeaseLostFence: "fence", LeaseLostNode: "node", LeaseLostFinish: "finish"}

// String returns the reason's lower-case name ("renew"), as metrics label
// it.
func (r LeaseLostReason) String() string {
	if int(r) < len(leaseLostNames) && leaseLostNames[r] != "" {
		return leaseLostNames[r]
	}
	return fmt.Sprintf("LeaseLostReason(%d)", uint8(r))
}

// LeaseLostEvent describes an attempt whose lease was lost.
type LeaseLostEvent struct {
	Kind, Queue string
	Attempt     int
	Reason      LeaseLostReason
}

// RescuedEvent describes an attempt moved out of Processing by this
// manager's rescuer.
type RescuedEvent struct {
	Kind, Queue string
	// State is the instance's new state: Scheduled (to run again),
	// Terminated (out of retries) or Canceled (a cancel was requested).
	State State
	// DeadNode: rescued because its node was declared dead; otherwise its
	// lease had ended.
	DeadNode bool
}

// CanceledEvent describes an instance canceled before it ran.
type CanceledEvent struct {
	Kind, Queue string
}

// StoreCallEvent describes one store call.
type StoreCallEvent struct {
	Op StoreOp
	// Duration is the call's real time (time.Now), whatever the manager's
	// Clock: it measures the store, not the schedule.
	Duration time.Duration
	// Err is the call's error, nil on success. Observers must not keep it.
	Err error
}

// StoreOp names a method of store.Store; its String is the method's name
// in snake case ("enqueue", "lookup_instances"), as metrics label it.
type StoreOp uint8

// The store operations a StoreCallEvent reports, one per method of
// store.Store.
const (
	OpEnqueue StoreOp = iota + 1
	OpClaim
	OpRenew
	OpFinish
	OpRescue
	OpCancel
	OpLookupInstances
	OpLookupHistory
	OpAppendLogs
	OpLookupLogs
	OpPrune
	OpPutDefinition
	OpGetDefinition
	OpListDefinitions
	OpDeleteDefinition
	OpPutTrigger
	OpGetTrigger
	OpListTriggers
	OpDeleteTrigger
	OpEventCursor
	OpFollow
	OpHeartbeat
	OpListNodes
	OpRescueNodes
	OpPauseQueue
	OpResumeQueue
	OpListQueues
	OpCounts
	OpLag
	OpPageInstances
	OpPageHistory
	OpPageLogs
	OpRetry
	OpDelete
	OpSetProgress
	OpLookupProgress
	numStoreOps
)

var storeOpNames = [numStoreOps]string{
	OpEnqueue: "enqueue", OpClaim: "claim", OpRenew: "renew", OpFinish: "finish", OpRescue: "rescue",
	OpCancel: "cancel", OpLookupInstances: "lookup_instances", OpLookupHistory: "lookup_history",
	OpAppendLogs: "append_logs", OpLookupLogs: "lookup_logs", OpPrune: "prune",
	OpPutDefinition: "put_definition", OpGetDefinition: "get_definition", OpListDefinitions: "list_definitions",
	OpDeleteDefinition: "delete_definition", OpPutTrigger: "put_trigger", OpGetTrigger: "get_trigger",
	OpListTriggers: "list_triggers", OpDeleteTrigger: "delete_trigger", OpEventCursor: "event_cursor",
	OpFollow: "follow", OpHeartbeat: "heartbeat", OpListNodes: "list_nodes", OpRescueNodes: "rescue_nodes",
	OpPauseQueue: "pause_queue", OpResumeQueue: "resume_queue", OpListQueues: "list_queues",
	OpCounts: "counts", OpLag: "lag", OpPageInstances: "page_instances", OpPageHistory: "page_history",
	OpPageLogs: "page_logs", OpRetry: "retry", OpDelete: "delete",
	OpSetProgress: "set_progress", OpLookupProgress: "lookup_progress",
}

// String returns the operation's snake-case name ("claim").
func (op StoreOp) String() string {
	if op > 0 && op < numStoreOps {
		return storeOpNames[op]
	}
	return fmt.Sprintf("StoreOp(%d)", uint8(op))
}

// StoreOps returns every operation a StoreCallEvent may report, in order;
// the largest StoreOp is its last.
func StoreOps() []StoreOp {
	ops := make([]StoreOp, 0, numStoreOps-1)
	for op := OpEnqueue; op < numStoreOps; op++ {
		ops = append(ops, op)
	}
	return ops
}

// WithObserver adds an observer of the manager's events (see Observer). It
// may be given more than once; observers are called in the order given.
// With an observer, every store call is timed (two reads of the wall
// clock), and when it is a ManagerObserver, NewManager hands it the
// manager.
func WithObserver(o Observer) ManagerOption {
	return func(c *config) error {
		if o == nil {
			return fmt.Errorf("%w: nil observer", ErrInvalidOption)
		}
		c.obs = append(c.obs, o)
		return nil
	}
}

// observers are a manager's observers; its methods do nothing, and build
// no event, when there are none.
type observers []Observer

// observe puts the observers in place on a new manager: its store calls go
// through observedStore, and each ManagerObserver is handed the manager.
func (m *Manager) observe() error {
	if len(m.cfg.obs) == 0 {
		return nil
	}
	for _, o := range m.cfg.obs {
		if mo, ok := o.(ManagerObserver); ok {
			if err := mo.ObserveManager(m); err != nil {
				return fmt.Errorf("job: observer: %w", err)
			}
		}
	}
	guarded := make(observers, len(m.cfg.obs))
	for i, o := range m.cfg.obs {
		guarded[i] = &guardedObserver{o: o, log: m.log}
	}
	m.cfg.obs = guarded
	st := &observedStore{Store: m.store, obs: m.cfg.obs}
	m.store = st
	m.enq.st = st
	return nil
}

// guardedObserver contains an observer's panics: the engine goroutine that
// tells it an event (a worker, the completer, a store call) goes on, and
// the observers after it are still told. The first panic is logged at
// Error, then every panicLogEvery-th, so a broken observer cannot flood
// the log.
type guardedObserver struct {
	o      Observer
	log    *slog.Logger
	panics atomic.Int64
}

const panicLogEvery = 10000

// contain is deferred by each method; it must call recover itself.
func (g *guardedObserver) contain(method string) {
	v := recover()
	if v == nil {
		return
	}
	if n := g.panics.Add(1); n == 1 || n%panicLogEvery == 0 {
		g.log.Error("observer panicked; the event is dropped for it and the engine goes on",
			"observer", fmt.Sprintf("%T", g.o), "method", method, "panic", fmt.Sprint(v), "panics", n)
	}
}

func (g *guardedObserver) Scheduled(e ScheduledEvent) {
	defer g.contain("Scheduled")
	g.o.Scheduled(e)
}

func (g *guardedObserver) AttemptStarted(e AttemptStartedEvent) {
	defer g.contain("AttemptStarted")
	g.o.AttemptStarted(e)
}

func (g *guardedObserver) AttemptFinished(e AttemptFinishedEvent) {
	defer g.contain("AttemptFinished")
	g.o.AttemptFinished(e)
}

func (g *guardedObserver) LeaseLost(e LeaseLostEvent) {
	defer g.contain("LeaseLost")
	g.o.LeaseLost(e)
}

func (g *guardedObserver) Rescued(e RescuedEvent) {
	defer g.contain("Rescued")
	g.o.Rescued(e)
}

func (g *guardedObserver) Canceled(e CanceledEvent) {
	defer g.contain("Canceled")
	g.o.Canceled(e)
}

func (g *guardedObserver) StoreCall(e StoreCallEvent) {
	defer g.contain("StoreCall")
	g.o.StoreCall(e)
}

func (obs observers) started(rec *store.Instance, now time.Time) {
	if len(obs) == 0 {
		return
	}
	ev := AttemptStartedEvent{Kind: rec.Kind, Queue: rec.Queue, Attempt: rec.Attempt, Wait: max(0, now.Sub(rec.RunAt))}
	for _, o := range obs {
		o.AttemptStarted(ev)
	}
}

func (obs observers) finished(r *finishReq, state State, now time.Time) {
	if len(obs) == 0 {
		return
	}
	rec := r.a.rec
	ev := AttemptFinishedEvent{
		Kind: rec.Kind, Queue: rec.Queue, Attempt: rec.Attempt, State: state,
		Retry: state == store.Scheduled && !r.out.Release, HandedBack: state == store.Scheduled && r.out.Release,
	}
	if !r.a.start.IsZero() {
		end := r.ended
		if end.IsZero() {
			end = now
		}
		ev.Duration = max(0, end.Sub(r.a.start))
	}
	for _, o := range obs {
		o.AttemptFinished(ev)
	}
}

func (obs observers) leaseLost(rec *store.Instance, why LeaseLostReason) {
	if len(obs) == 0 {
		return
	}
	ev := LeaseLostEvent{Kind: rec.Kind, Queue: rec.Queue, Attempt: rec.Attempt, Reason: why}
	for _, o := range obs {
		o.LeaseLost(ev)
	}
}

func (obs observers) storeCall(op StoreOp, start time.Time, err error) {
	ev := StoreCallEvent{Op: op, Duration: time.Since(start), Err: err}
	for _, o := range obs {
		o.StoreCall(ev)
	}
}

func (obs observers) rescued(recs []*store.Instance, deadNode bool) {
	for _, rec := range recs {
		if rec == nil {
			continue
		}
		ev := RescuedEvent{Kind: rec.Kind, Queue: rec.Queue, State: rec.State, DeadNode: deadNode}
		for _, o := range obs {
			o.Rescued(ev)
		}
	}
}

package job

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jobkit/job/store"
)

// Defaults of a manager's configuration.
const (
	DefaultWorkers        = 16
	DefaultLease          = 30 * time.Second
	DefaultPollInterval   = time.Second
	DefaultRescueInterval = time.Second
	DefaultClaimBatch     = 64
	DefaultFinishBatch    = 256
	DefaultFinishLinger   = time.Millisecond
	// DefaultFinishInterval is the least time between two outcome
	// writes while outcomes keep coming (WithFinishInterval).
	DefaultFinishInterval = 100 * time.Millisecond
	// DefaultHandlerQueue is how many job handler calls may wait for the
	// handler goroutine (WithHandlerQueue).
	DefaultHandlerQueue = 4096
	// DefaultPruneInterval is how often retention runs.
	DefaultPruneInterval = time.Minute
	// DefaultPruneBatch bounds the records one store call of retention
	// removes per rule; a run makes as many calls as it takes to catch up.
	DefaultPruneBatch = 1_000
	// DefaultFinishedMaxAge: finished instances are removed, with their
	// history and logs, a day after they finished (WithRetention).
	DefaultFinishedMaxAge = 24 * time.Hour
	// DefaultFinishedMax: at most this many finished instances are kept,
	// the most recently finished (WithRetention).
	DefaultFinishedMax = 100_000
	// DefaultHistoryMaxAge: state-history records are removed a week after
	// they were written, whatever their instance's state
	// (WithHistoryRetention).
	DefaultHistoryMaxAge = 7 * 24 * time.Hour
	// DefaultLogMaxAge: log records are removed a week after they were
	// written, whatever their instance's state (WithLogRetention).
	DefaultLogMaxAge = 7 * 24 * time.Hour
)

// config is a manager's configuration; every field is filled by
// defaults() before use.
type config struct {
	store          store.Store
	workers        int
	workersSet     bool // WithWorkers was given (0 is a producer)
	publishDefs    bool // WithPublishDefinitions
	queues         []string
	node           string
	logger         *slog.Logger
	clock          Clock
	lease          time.Duration
	renewInterval  time.Duration
	pollInterval   time.Duration
	rescueInterval time.Duration
	shardRecheck   time.Duration // WithShardRecheck (shards.go); 0: DefaultShardRecheck
	claimBatch     int
	finishBatch    int
	finishLinger   time.Duration
	lingerSet      bool
	finishInterval time.Duration
	intervalSet    bool
	handlerQueue   int
	pruneInterval  time.Duration
	pruneBatch     int
	finishedMaxAge time.Duration
	finishedMax    int
	historyMaxAge  time.Duration
	logMaxAge      time.Duration
	labels         []string                 // the manager's labels (WithLabels), normalised
	nodeLimits     []store.ConcurrencyLimit // WithNodeConcurrencyLimits (limits_node.go)
	// Set by the retention options, so a rule an option disabled (0) is
	// told apart from one left at its default.
	finishedSet, historySet, logSet bool
	// The scheduler role (stored triggers): off when WithScheduler(false),
	// and how often it reads the triggers.
	schedulerOff  bool
	triggerReload time.Duration
	// The node registry (node.go).
	heartbeat, deadAfter, maxSkew time.Duration
	middleware                    []Middleware // WithMiddleware (middleware.go)
	obs                           observers    // WithObserver (observe.go)
	// Executor types (issue 22, executortypes.go): WithExecutorTypes and
	// how often the stored definitions are read.
	execTypes map[string]ExecutorType
	execSync  time.Duration
	// Fenced hand-backs in a row before a fenced attempt counts
	// (WithFencedHandBacks, fence_handbacks.go); set tells 0 apart.
	fencedHandBacks    int
	fencedHandBacksSet bool
}

// ManagerOption configures a Manager.
type ManagerOption func(*config) error

// WithStore sets the store. Defaults to a new memdbstore (in process,
// nothing persisted). Managers in several processes that share one Redis,
// Valkey or etcd store form a cluster. The manager does not close s, and
// offers no way back to it: keep your own handle if you need the store
// itself (to close it, or to run its conformance suite).
func WithStore(s store.Store) ManagerOption {
	return func(c *config) error {
		if s == nil {
			return fmt.Errorf("%w: nil store", ErrInvalidOption)
		}
		c.store = s
		return nil
	}
}

// WithWorkers sets how many instances run at once. Defaults to
// DefaultWorkers. Manager.SetWorkers changes it while running.
//
// WithWorkers(0) makes a producer: a manager that schedules (any kind it
// has registered or the store has a definition of, see ScheduleJob),
// cancels, looks up and rescues the leases of crashed managers, but never
// claims an instance, so it needs no executor of the kinds it schedules.
func WithWorkers(n int) ManagerOption {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("%w: %d workers, want 0 (a producer that runs nothing) or more", ErrInvalidOption, n)
		}
		c.workers, c.workersSet = n, true
		return nil
	}
}

// WithQueues sets the queues the manager claims from. Defaults to
// DefaultQueue alone. Instances of a queue no running manager claims wait.
func WithQueues(names ...string) ManagerOption {
	return func(c *config) error {
		if len(names) == 0 {
			return fmt.Errorf("%w: no queues", ErrInvalidOption)
		}
		for _, n := range names {
			if n == "" {
				return fmt.Errorf("%w: empty queue name", ErrInvalidOption)
			}
		}
		c.queues = append([]string(nil), names...)
		return nil
	}
}

// WithNodeID names the manager in leases, history and logs. Defaults to
// host name, process ID and a random suffix; it must be unique in a
// cluster.
func WithNodeID(id string) ManagerOption {
	return func(c *config) error {
		if id == "" {
			return fmt.Errorf("%w: empty node ID", ErrInvalidOption)
		}
		c.node = id
		return nil
	}
}

// WithLogger sets the logger of the manager's own messages. Defaults to
// slog.Default().
func WithLogger(l *slog.Logger) ManagerOption {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// WithClock sets the clock every time-dependent decision reads. Defaults
// to SystemClock; tests pass a fake one.
func WithClock(clk Clock) ManagerOption {
	return func(c *config) error {
		if clk == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		c.clock = clk
		return nil
	}
}

// WithLease sets how long a claim holds an instance without renewal.
// Defaults to DefaultLease. The manager renews leases of running attempts
// every third of it; a crashed manager's attempts are rescued by the others
// once their lease ends, so a shorter lease recovers sooner at the price of
// more renewals.
func WithLease(d time.Duration) ManagerOption {
	return func(c *config) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("%w: lease %v, want at least 100ms", ErrInvalidOption, d)
		}
		c.lease = d
		return nil
	}
}

// WithPollInterval sets how often an idle manager looks for work when the
// store gives it no wake-up. Defaults to DefaultPollInterval. Stores that
// notify (all bundled ones) start work on a wake-up; the poll is a fallback.
func WithPollInterval(d time.Duration) ManagerOption {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: poll interval %v, want > 0", ErrInvalidOption, d)
		}
		c.pollInterval = d
		return nil
	}
}

// WithRescueInterval sets how often the manager rescues instances whose
// lease expired. Defaults to DefaultRescueInterval.
func WithRescueInterval(d time.Duration) ManagerOption {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: rescue interval %v, want > 0", ErrInvalidOption, d)
		}
		c.rescueInterval = d
		return nil
	}
}

// WithClaimBatch bounds how many instances one claim takes. Defaults to
// DefaultClaimBatch. A claim never takes more than there are free workers.
func WithClaimBatch(n int) ManagerOption {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: claim batch %d, want > 0", ErrInvalidOption, n)
		}
		c.claimBatch = n
		return nil
	}
}

// WithFinishLinger sets how long the outcome writer waits for more
// outcomes before it records a batch while other attempts of this manager
// are still running. Longer batches cost the store fewer calls per job:
// on Redis, where each call has a fixed cost, this is what lets a busy
// manager write tens of outcomes per call instead of two or three. It
// delays only when a finished attempt is recorded, never when the next
// one starts (its worker is free at once), and never when nothing else is
// running. 0 records at once. Defaults to DefaultFinishLinger.
func WithFinishLinger(d time.Duration) ManagerOption {
	return func(c *config) error {
		if d < 0 || d > time.Second {
			return fmt.Errorf("%w: finish linger %v, want 0 to 1s", ErrInvalidOption, d)
		}
		c.finishLinger, c.lingerSet = d, true
		return nil
	}
}

// WithFinishInterval sets the least time between two of the manager's
// outcome writes while outcomes keep coming: an outcome that comes within
// d of the last write waits for the rest of d, and whatever comes
// meanwhile is written with it in one call. At low steady rates, where
// most jobs end while no other runs and the linger (WithFinishLinger)
// does not apply, this is what keeps the store's cost per job low: on
// PostgreSQL each write is a transaction. An outcome after a quiet spell
// of d or more is written at once, as are retries, hand-backs and the
// ends of shards and workflow tasks (something waits on them); it never
// delays the next job (its worker is free at once), a drain (Wait) or
// Stop. The attempts' leases are renewed until their outcomes are
// written. 0 writes each batch at once. Defaults to
// DefaultFinishInterval.
func WithFinishInterval(d time.Duration) ManagerOption {
	return func(c *config) error {
		if d < 0 || d > time.Second {
			return fmt.Errorf("%w: finish interval %v, want 0 to 1s", ErrInvalidOption, d)
		}
		c.finishInterval, c.intervalSet = d, true
		return nil
	}
}

// WithHandlerQueue sets how many job handler calls (state-change, complete
// and terminate processors) may wait to run. Defaults to
// DefaultHandlerQueue. While the manager runs, handlers run one at a time
// on a goroutine of their own, in the order the changes were queued, so
// neither a slow handler nor a panicking one (recovered, logged with its
// stack, counted) can stall or crash claiming, running or recording work.
// When handlers fall this many calls behind, further calls are dropped,
// counted in Manager.HandlerStats and logged, never waited for: a handler
// is a notification, and the store's history is the record. Stop waits
// for queued calls until its ctx ends and drops the rest.
func WithHandlerQueue(n int) ManagerOption {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: handler queue %d, want > 0", ErrInvalidOption, n)
		}
		c.handlerQueue = n
		return nil
	}
}

// WithRetention bounds the finished instances kept (Completed, Terminated,
// Canceled, TimedOut): those finished more than maxAge ago, and all but the
// newest maxCount, are removed with their history and logs. 0 disables a
// bound, so WithRetention(0, 0) keeps finished instances forever. Defaults
// to DefaultFinishedMaxAge and DefaultFinishedMax. It changes only this
// rule: history and log retention keep their own settings or defaults.
func WithRetention(maxAge time.Duration, maxCount int) ManagerOption {
	return func(c *config) error {
		if maxAge < 0 || maxCount < 0 {
			return fmt.Errorf("%w: retention %v / %d, want >= 0 (0 disables a bound)", ErrInvalidOption, maxAge, maxCount)
		}
		c.finishedMaxAge, c.finishedMax, c.finishedSet = maxAge, maxCount, true
		return nil
	}
}

// WithHistoryRetention removes state-history records older than maxAge,
// whatever their instance's state, so an instance that never finishes (a
// long retry loop) does not grow its history forever. 0 disables the rule:
// history is then kept as long as its instance. Defaults to
// DefaultHistoryMaxAge. It changes only this rule.
func WithHistoryRetention(maxAge time.Duration) ManagerOption {
	return func(c *config) error {
		if maxAge < 0 {
			return fmt.Errorf("%w: negative history retention %v; use 0 to keep history as long as its instance", ErrInvalidOption, maxAge)
		}
		c.historyMaxAge, c.historySet = maxAge, true
		return nil
	}
}

// WithLogRetention removes log records older than maxAge, whatever their
// instance's state. 0 disables the rule: logs are then kept as long as
// their instance. Defaults to DefaultLogMaxAge. It changes only this rule.
func WithLogRetention(maxAge time.Duration) ManagerOption {
	return func(c *config) error {
		if maxAge < 0 {
			return fmt.Errorf("%w: negative log retention %v; use 0 to keep logs as long as their instance", ErrInvalidOption, maxAge)
		}
		c.logMaxAge, c.logSet = maxAge, true
		return nil
	}
}

// WithPruneInterval sets how often retention runs. Defaults to
// DefaultPruneInterval. Each run removes everything the rules no longer
// want, in batches of DefaultPruneBatch records per rule, so retention
// keeps up whatever the throughput; it changes no rule. With every rule
// disabled (WithRetention(0, 0), WithHistoryRetention(0),
// WithLogRetention(0)) nothing is pruned.
func WithPruneInterval(d time.Duration) ManagerOption {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: prune interval %v, want > 0", ErrInvalidOption, d)
		}
		c.pruneInterval = d
		return nil
	}
}

func (c *config) defaults() {
	if c.execSync == 0 {
		c.execSync = DefaultExecutorSync
	}
	if !c.workersSet {
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
	if !c.intervalSet {
		c.finishInterval = DefaultFinishInterval
	}
	if c.handlerQueue == 0 {
		c.handlerQueue = DefaultHandlerQueue
	}
	if c.pruneInterval == 0 {
		c.pruneInterval = DefaultPruneInterval
	}
	if c.pruneBatch == 0 {
		c.pruneBatch = DefaultPruneBatch
	}
	// Each retention rule takes its default unless its own option set it.
	if !c.finishedSet {
		c.finishedMaxAge, c.finishedMax = DefaultFinishedMaxAge, DefaultFinishedMax
	}
	if !c.historySet {
		c.historyMaxAge = DefaultHistoryMaxAge
	}
	if !c.logSet {
		c.logMaxAge = DefaultLogMaxAge
	}
	if c.triggerReload == 0 {
		c.triggerReload = DefaultTriggerReload
	}
	if !c.fencedHandBacksSet {
		c.fencedHandBacks = DefaultFencedHandBacks
	}
	c.nodeDefaults()
}

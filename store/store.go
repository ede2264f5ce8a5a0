// Package store is the contract between jobkit's engine (package job) and the
// plugins that keep its data: the record types, the Store interface split by
// role, the sentinel errors, and the optional capabilities a plugin may offer.
//
// Plugins store plain records and know nothing of executors. Every queue
// operation is atomic in the store itself: two managers sharing one store,
// in one process or in fifty, never claim the same attempt. A plugin proves
// that it keeps this contract by passing the exported suite in
// store/storetest.
//
// Time always comes from the caller (the Now fields of the parameter
// structs), so the engine's injectable clock drives every decision a store
// makes; a plugin never reads the wall clock to decide what is due.
package store

import (
	"context"
	"time"
)

// Store is what a plugin implements: the queue, the history and the logs,
// plus retention, job definitions, named documents (Documents, which
// also hold the stored triggers: see TriggersIn) and the feed of state
// changes (Events). Optional
// capabilities (Notifier) are discovered by type assertion.
type Store interface {
	Queue
	History
	Logs
	Progress
	Pruner
	Definitions
	Documents
	Events
	Nodes
	QueueAdmin
	Inspector
	Admin
	Shards
}

// Queue holds instances that wait to run or are running. Every method is one
// atomic operation in the store; methods that can take many records take
// many so a round trip is amortised.
type Queue interface {
	// Enqueue stores new instances in state Scheduled and appends two
	// history records for each: Created and Scheduled. An instance with a
	// UniqueKey that another instance holds (UniqueUntil after p.Now) is not
	// stored: its result carries ErrDuplicate and the holder's ID. An
	// instance whose ID is stored already is not stored again: its result
	// has no error, the stored instance's Seq and Existed set, and nothing
	// changes, so a retried Enqueue (after a call whose reply was lost) is
	// idempotent. The store assigns Seq, increasing in enqueue order. A
	// notifying store wakes the queue's subscribers. A call holding an
	// instance that fails Validate (or, on a store with a size limit, one
	// too large: ErrTooLarge) is refused as a whole with that error before
	// anything is stored, so the caller can send the others again.
	Enqueue(ctx context.Context, p *EnqueueParams) ([]EnqueueResult, error)

	// Claim moves up to p.Limit ready instances of p.Queue (State Scheduled,
	// RunAt <= p.Now) to Processing with a lease owned by p.Owner until
	// p.LeaseUntil, increments their Attempt, and appends a Processing
	// history record for each. Order, the same on every store: highest
	// Priority first; within a priority, the earliest RunAt first (when
	// the instance became due; one rescued or handed back keeps its
	// RunAt); within a RunAt, enqueue order (Seq, FIFO). The order does
	// not depend on the order of the enqueues nor on when claims ran: one
	// enqueued with a RunAt 500 ms past goes ahead of one enqueued before
	// it with a RunAt 10 ms past, and one scheduled for later goes, once
	// due, ahead of all that became due after its RunAt, even when no
	// claim ran in between. storetest's ClaimOrder tests pin it.
	// When fewer than p.Limit are ready, the result's
	// NextRunAt is the earliest RunAt of a Scheduled instance still waiting in
	// p.Queue (zero when there is none), so the caller can sleep exactly
	// until then.
	//
	// A claim with a ClaimSeq can be repeated safely (see ClaimParams).
	// Each instance is returned as stored, with the Error its last outcome
	// left (the engine reads from a hand-back's error how many fenced
	// hand-backs in a row came before the attempt).
	Claim(ctx context.Context, p *ClaimParams) (*ClaimResult, error)

	// Renew extends the leases of running attempts owned by p.Owner. Leases
	// that are no longer the owner's (rescued, finished, canceled, deleted)
	// are reported in Lost; attempts whose cancellation was requested with
	// Cancel are reported in CancelRequested (and renewed).
	Renew(ctx context.Context, p *RenewParams) (*RenewResult, error)

	// Finish applies the outcomes of running attempts owned by p.Owner and
	// appends one history record per applied outcome; each applied outcome
	// clears the lease and CancelRequested. An outcome whose attempt is no
	// longer the owner's (its lease was rescued, or it was finished with
	// another outcome) is not applied: its result's Err is ErrLeaseLost.
	//
	// A cancel requested while the attempt ran is never lost to it: when
	// CancelRequested is set (the owner finished before a Renew reported
	// the request), an outcome that would run the instance again (State
	// Scheduled: a retry or a release) ends it Canceled instead, whatever
	// retries it has left, with FinishedAt set, the attempt counted (a
	// release is not uncounted), its RunAt kept, and a history record with
	// State Canceled and the outcome's Error. A final outcome (Completed,
	// Terminated, TimedOut, Canceled) is applied as given. Each result's
	// State says which state the instance was left in, so the caller
	// reports what the store applied.
	//
	// An outcome that was applied already (the instance is exactly where
	// that outcome left it: the same state, attempt, error and result, and
	// for a retry the same RunAt, or Canceled as above) is reported as
	// applied, with that State, and applied nothing twice, so a Finish
	// repeated after a call whose reply was lost succeeds. The returned
	// slice has one entry per outcome.
	Finish(ctx context.Context, p *FinishParams) ([]FinishResult, error)

	// Rescue finds up to p.Limit Processing instances whose lease ended
	// before p.Now and moves each back to Scheduled, keeping its RunAt so it
	// keeps its place in the queue ahead of what was scheduled after it (the
	// attempt stays counted), or to Terminated when Attempt > MaxRetries
	// (MaxRetries < 0 means retry forever). One whose CancelRequested is
	// set (its owner's lease lapsed before a Renew reported the request)
	// goes to Canceled instead, with FinishedAt set, whatever retries it
	// has left: a cancel is never lost to a lapsed lease and is never
	// followed by another attempt. Each move clears the lease and
	// CancelRequested and appends a history record whose Error says the
	// lease expired. It returns the moved instances in their new state.
	Rescue(ctx context.Context, p *RescueParams) ([]*Instance, error)

	// Cancel cancels one instance. A Scheduled (or Created) instance becomes
	// Canceled at once. A Processing instance gets CancelRequested set; its
	// owner sees it at its next Renew and finishes it as Canceled; when the
	// attempt ends first, Finish turns a retry or release of it into
	// Canceled, and when its lease lapses first, Rescue moves it to
	// Canceled: it never runs another attempt. It
	// returns the instance after the change. ErrNotFound when there is no
	// such instance; ErrFinished when it has already reached a final state.
	Cancel(ctx context.Context, p *CancelParams) (*Instance, error)
}

// History answers questions about instances and their state transitions.
//
// Lookups leave out records that cannot be decoded and then return, with
// what they could decode, an error wrapping ErrCorrupt that names them.
type History interface {
	// LookupInstances returns the instances matching q, newest first
	// (by CreatedAt, then Seq).
	LookupInstances(ctx context.Context, q *Query) ([]*Instance, error)
	// LookupHistory returns the state transitions matching q, oldest first.
	LookupHistory(ctx context.Context, q *Query) ([]*HistoryRecord, error)
}

// Logs stores the messages executors write through job.Instance.
type Logs interface {
	// AppendLogs stores a batch of log records.
	AppendLogs(ctx context.Context, recs []*LogRecord) error
	// LookupLogs returns the log records matching q, oldest first.
	// Query.States is ignored; Query.Levels filters by level.
	LookupLogs(ctx context.Context, q *Query) ([]*LogRecord, error)
}

// Pruner removes what retention no longer wants, so a store cannot grow
// without bound.
type Pruner interface {
	Prune(ctx context.Context, p *PruneParams) (*PruneResult, error)
}

// Notifier is an optional capability: a store that can tell its claimers
// that new work may be ready (Redis pub/sub, etcd Watch, a memdb channel).
// A manager without it polls.
type Notifier interface {
	// Subscribe returns a channel that receives a value, coalesced, whenever
	// an instance of queue may have become ready earlier than the caller
	// knew (an Enqueue, a retry, a rescue, a handed-back lease). The channel
	// is closed when ctx ends or the subscription fails for good.
	Subscribe(ctx context.Context, queue string) (<-chan struct{}, error)
}

// Closer is an optional capability of a store that owns resources of its
// own. A store never closes a client its caller passed in.
type Closer interface {
	Close() error
}

// EnqueueParams is the argument of Queue.Enqueue.
type EnqueueParams struct {
	// Instances to store. Each has ID, Kind, Queue, RunAt and CreatedAt
	// set; Args, Priority, MaxRetries, Timeout, UniqueKey and UniqueUntil
	// are stored as given. The store sets State, Seq and UpdatedAt.
	Instances []*Instance
	// Node names the caller in the history records.
	Node string
	// Now decides whether a unique key is still held.
	Now time.Time
}

// EnqueueResult is one instance's outcome of an Enqueue.
type EnqueueResult struct {
	// ID of the stored instance; on ErrDuplicate, the ID of the instance
	// that holds the unique key.
	ID string
	// Seq is the sequence number assigned by the store (0 on error).
	Seq uint64
	// Existed reports that an instance with this ID was stored already
	// (a repeated Enqueue); nothing was changed and Seq is the stored one.
	Existed bool
	// Err is nil or wraps ErrDuplicate.
	Err error
}

// ClaimParams is the argument of Queue.Claim.
type ClaimParams struct {
	Queue      string
	Owner      string    // the claiming manager's node ID, stored as LeaseOwner
	Limit      int       // at most this many instances; must be > 0
	Now        time.Time // instances with RunAt <= Now are ready
	LeaseUntil time.Time // the lease deadline of the claimed attempts

	// ClaimSeq, when not 0, numbers this claim among the claims of Owner:
	// each new claim takes a larger number, and the repeat of a claim whose
	// reply was lost (a timeout, a broken connection) takes the same one.
	// The store remembers, per owner, the number of the last claim it
	// applied and the attempts that claim took, until that claim's
	// LeaseUntil. A Claim whose number is that last one claims nothing new:
	// it returns the attempts the first call took that are still Processing
	// under Owner (so the caller runs what the call it gave up on claimed).
	// A Claim whose number is below it is a call that reached the store
	// late, after a newer one: it claims and returns nothing. So a call
	// the caller gave up on never claims work nobody runs. The numbers of
	// an owner that makes no claim for longer than its lease are forgotten.
	ClaimSeq uint64

	// Kinds are the kinds the claimer runs: the claim takes only instances
	// of these kinds. Empty means any kind (a claimer that runs everything,
	// and callers written before kinds were named).
	Kinds []string
	// Labels are the claimer's labels ("region=eu", or a bare "gpu";
	// ValidateLabels): the claim takes an instance only when they satisfy
	// every requirement of its Instance.Labels (LabelsSatisfy: equality,
	// set membership, not-equal, exists, not exists). A claimer with no
	// labels takes only instances whose requirements a node without labels
	// satisfies: none, or only "!key" and "key!=value" ones.
	//
	// Kinds and Labels are applied inside the atomic claim; the order
	// (see Queue.Claim) is kept among the instances the claimer may take,
	// and NextRunAt speaks only of those. An instance no claimer may take
	// waits; it is never failed for it. A claim from a paused queue (see
	// QueueAdmin) takes nothing and reports a zero NextRunAt.
	Labels []string

	// Limits are the cluster's concurrency limits (see ConcurrencyLimit;
	// enforced by a store that is a LimitEnforcer). The claim takes an
	// instance only when, for every limit that matches it, the Processing
	// instances the limit matches (those this claim took included) stay
	// at most Max; one that would exceed a limit is left Scheduled, in
	// its place, and the claim takes the next one in claim order that
	// does not, so a limited kind never blocks the others behind it.
	// A limit is counted over the whole namespace whatever the claimer's
	// Kinds, Labels and Queue. Limits are passed by each claim, so two
	// claimers passing different limits (a change that has reached one
	// node and not yet another) are each held to their own.
	Limits []ConcurrencyLimit
	// RateLimits are the cluster's rate limits (see RateLimit; enforced by
	// a store that is a RateLimitEnforcer). The claim takes an instance
	// only when every rate limit that matches it lets one more start now
	// (the store's clock), and counts the start in each; one over a limit
	// is left Scheduled, in its place, as for Limits, and the claim goes
	// on with the next in claim order.
	RateLimits []RateLimit
}

// ClaimResult is what Queue.Claim returns.
type ClaimResult struct {
	// Instances claimed, in claim order, each in state Processing with
	// Attempt incremented and its lease set.
	Instances []*Instance
	// NextRunAt is the earliest RunAt of an instance still Scheduled in the
	// queue, or zero when none waits. Only meaningful when fewer than Limit
	// instances were claimed.
	NextRunAt time.Time
	// Undecodable are attempts the store claimed (they count towards Limit
	// and are Processing under the caller's lease) whose stored record could
	// not be decoded. The engine finishes each as Terminated with the error,
	// so a corrupt record never blocks the queue or kills a worker.
	Undecodable []UndecodableRecord
	// Limited reports that the claim left a ready instance it could take
	// because a concurrency limit was reached (see ClaimParams.Limits): it
	// becomes claimable when a slot is released, which no wake-up
	// announces, so the caller claims again soon. NextRunAt does not
	// speak of such instances.
	Limited bool
	// RetryAfter, when not zero, says the claim left a ready instance it
	// could take because a rate limit let no more start (see
	// ClaimParams.RateLimits), and how long after the claim (the store's
	// clock) the first such limit lets one start: the caller claims again
	// then. It is a duration, not a time, so a node whose clock differs
	// from the store's still sleeps the right while.
	RetryAfter time.Duration
}

// UndecodableRecord names a claimed attempt whose record could not be
// decoded, and why.
type UndecodableRecord struct {
	LeaseRef
	Err error // wraps ErrCorrupt
}

// LeaseRef names one running attempt.
type LeaseRef struct {
	ID      string
	Attempt int
}

// RenewParams is the argument of Queue.Renew.
type RenewParams struct {
	Owner  string
	Leases []LeaseRef
	Until  time.Time // new lease deadline
	Now    time.Time
}

// RenewResult is what Queue.Renew returns.
type RenewResult struct {
	// Lost are the attempts that are no longer the owner's; their work must
	// stop and must not be finished.
	Lost []LeaseRef
	// CancelRequested are attempts (still the owner's) whose cancellation
	// was requested.
	CancelRequested []LeaseRef
}

// Outcome is the end of one running attempt.
type Outcome struct {
	ID      string
	Attempt int
	// State is the new state: Completed, Terminated, Canceled, TimedOut, or
	// Scheduled for a retry (or a release) at RunAt.
	State State
	// RunAt is when a retried or released instance becomes ready again.
	RunAt time.Time
	// Release hands the attempt back without counting it: the instance is
	// Scheduled at RunAt with Attempt decremented (used on shutdown).
	Release bool
	// Result is the executor's results, JSON-encoded (Completed only).
	Result []byte
	// Error is the attempt's error message, if any.
	Error string
}

// FinishResult is what Queue.Finish did with one outcome.
type FinishResult struct {
	// State is the state the outcome left the instance in: the outcome's
	// State, or Canceled when a retry or release met a cancel request.
	// Zero when Err is set.
	State State
	// Err is nil when the outcome was applied (now or by an earlier call);
	// otherwise it wraps ErrLeaseLost (the attempt is no longer the
	// owner's), ErrInvalid, ErrTooLarge or ErrCorrupt, and nothing changed.
	Err error
}

// FinishParams is the argument of Queue.Finish.
type FinishParams struct {
	Owner    string
	Now      time.Time
	Outcomes []Outcome
}

// RescueParams is the argument of Queue.Rescue.
type RescueParams struct {
	Now   time.Time
	Limit int    // at most this many instances; must be > 0
	Node  string // names the rescuer in the history records
}

// CancelParams is the argument of Queue.Cancel.
type CancelParams struct {
	ID   string
	Now  time.Time
	Node string
}

// PruneParams is the argument of Pruner.Prune. A zero field disables its
// rule.
type PruneParams struct {
	Now time.Time
	// FinishedBefore removes instances in a final state finished before it,
	// with their history and logs.
	FinishedBefore time.Time
	// KeepFinished keeps at most this many instances in a final state (the
	// most recently finished), removing older ones with their history and
	// logs. 0 disables the rule.
	KeepFinished int
	// HistoryBefore removes history records older than it, whatever their
	// instance's state.
	HistoryBefore time.Time
	// LogsBefore removes log records older than it.
	LogsBefore time.Time
	// Limit bounds the records one call removes per rule, so a call stays
	// short; 0 means a store-chosen default.
	Limit int
}

// PruneResult counts what Prune removed.
type PruneResult struct {
	Instances int
	History   int
	Logs      int
}

// Query selects instances, history records or log records. Zero fields
// match everything.
type Query struct {
	InstanceID string
	Kind       string
	Queue      string
	States     []State    // any of these states
	Levels     []LogLevel // logs only: any of these levels
	Since      time.Time  // at or after (CreatedAt, history Time, log Time)
	Until      time.Time  // before
	Limit      int        // at most this many; 0 means no limit (a Page lookup: DefaultPageSize)
	// Parent, for instance lookups, selects the shards of the sharded
	// task whose parent has this ID (see Instance.Parent); history and
	// log lookups ignore it. A store answers it without a scan (see
	// LookupShards).
	Parent string
	// IDs, for instance lookups, selects the instances with these IDs (at
	// most MaxQueryIDs); history and log lookups ignore it. A store
	// answers it with reads by ID (see LookupIDs).
	IDs []string
	// Cursor, for a Page lookup of the Inspector, is the Next of the
	// previous page of the same query ("" for the first page); the Lookup
	// methods ignore it.
	Cursor string
}

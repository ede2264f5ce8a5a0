// Package memdbstore is jobkit's embedded store: no server, nothing to
// configure, the default when a manager is given no store.
//
// Several managers that share one *Store act as one cluster: every queue
// operation runs under one write lock, so two managers never claim the
// same attempt. Readers work on copy-on-write snapshots of the indexes and
// hold the lock only to take one, never while they read.
//
// The indexes are B-trees (github.com/google/btree) of pointers to the
// instance records, so an index entry costs a pointer's worth of a tree
// node. Claiming costs O(log n) in the queue's depth, never a scan:
// Scheduled instances sit in an index ordered by (queue, priority
// descending, RunAt, Seq), and a claim seeks to the head of each priority
// level in turn, jumping past a level whose head is not due yet, so a
// future high-priority instance never blocks a ready lower-priority one.
// Rescue walks an index of leases by deadline; Prune walks indexes of
// finished instances and of logs by time. An instance's history is kept
// inline in its record, which keeps a transition at one record write.
//
// A write is applied under the store's lock before the call returns, so
// no answer is ever lost: the store never returns store.ErrOutcomeUnknown
// (a ScheduleJob whose ctx ends in the instant its shared call is being
// applied can still get it from the manager; see job.ErrOutcomeUnknown).
//
// Nothing is persisted: the data lives as long as the *Store value.
package memdbstore

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"

	"github.com/jobkit/job/store"
)

// Store is an in-memory store.Store. Its zero value is not usable; call New.
// A *Store is safe for concurrent use by any number of managers.
type Store struct {
	seq        atomic.Uint64
	pruneLimit int

	mu     sync.Mutex // held by every write, and to take a snapshot
	t      tables
	snap   *tables              // a read-only copy of t; nil after a write
	unique map[string]uniqueRow // by unique key; read only by writes
	probe  rec                  // a search key for the writer's lookups

	nameMu  sync.Mutex
	nameIDs map[string]name
	// names is the name table: kinds, queues and nodes, each stored once
	// and numbered by its index; 0 is "". It only grows, so it keeps every
	// name ever used (kinds, queues and nodes: few).
	names atomic.Pointer[[]string]

	subMu sync.Mutex
	subs  map[string]map[*subscriber]struct{} // by queue
	// cancelSubs are the SubscribeCancels channels (guarded by subMu).
	cancelSubs map[*cancelSub]struct{}

	// events is the ring of the latest events (store.Events); journal
	// gathers, under the write lock, the puts that added history, which
	// write publishes to it.
	events  eventLog
	journal []putRec
	clock   func() time.Time    // the store's own clock (WithClock)
	nodesMu sync.Mutex          // guards nodes
	nodes   map[string]*nodeRow // the node registry, by node ID
	// queues holds every queue enqueued into or paused, and whether it
	// is paused; guarded by mu.
	queues map[string]bool
	// progress holds the progress reports of instances (store.Progress),
	// by ID; guarded by mu, dropped with the instance.
	progress map[string]store.ProgressRecord

	claimMu     sync.Mutex             // serialises claims made with a ClaimSeq
	claims      map[string]*ownerClaim // by owner: the last claim with a ClaimSeq
	claimsSweep int

	defs definitions // job definitions, see definitions.go

	docs documentTable // named documents, see documents.go

	rates map[rateKey]*store.RateState // rate limits' state (ratelimit.go); guarded by mu
}

// Option configures a Store given to New.
type Option func(*Store) error

// WithPruneLimit sets how many records one Prune call removes per rule when
// its PruneParams.Limit is 0. Defaults to 10000; n must be positive.
func WithPruneLimit(n int) Option {
	return func(s *Store) error {
		if n <= 0 {
			return fmt.Errorf("%w: memdbstore.WithPruneLimit(%d); want a positive limit", store.ErrInvalid, n)
		}
		s.pruneLimit = n
		return nil
	}
}

// New returns an empty store, or an error wrapping store.ErrInvalid when an
// option is unusable. Like every plugin's New it returns (store, error);
// the store has no namespaces, as nothing outside the process shares it.
func New(opts ...Option) (*Store, error) {
	s := &Store{
		t:          newTables(),
		pruneLimit: 10000,
		unique:     map[string]uniqueRow{},
		nameIDs:    map[string]name{"": 0},
		subs:       map[string]map[*subscriber]struct{}{},
		claims:     map[string]*ownerClaim{},
		clock:      time.Now,
		nodes:      map[string]*nodeRow{},
		queues:     map[string]bool{},
	}
	s.names.Store(&[]string{""})
	s.events.size = DefaultEventBuffer
	s.events.init()
	s.t.journal = &s.journal
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: memdbstore.New: nil option", store.ErrInvalid)
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.Notifier       = (*Store)(nil)
	_ store.CancelNotifier = (*Store)(nil)
	_ store.Events         = (*Store)(nil)
)

// degree is the B-trees' minimum degree: a node holds up to 2*degree-1
// entries, so a tree of a million is four nodes deep.
const degree = 32

// tables is the store's indexes. Every instance is in byID and created,
// and in at most one index of its state; a record in a tree is never changed (an update
// puts a changed copy), so a snapshot sees the records as they were.
type tables struct {
	byID    *btree.BTreeG[*rec] // every instance, by ID
	created *btree.BTreeG[*rec] // every instance: (CreatedAt, Seq)
	ready   *btree.BTreeG[*rec] // Scheduled: (queue, priority descending, lane, RunAt, Seq)
	due     *btree.BTreeG[*rec] // Processing: (LeaseUntil, Seq)
	final   *btree.BTreeG[*rec] // in a final state: (FinishedAt, Seq)
	owned   *btree.BTreeG[*rec] // Processing: (LeaseOwner, Seq), for RescueNodes

	logsByTime *btree.BTreeG[*logRow] // (time, seq)
	logsByInst *btree.BTreeG[*logRow] // (instance ID, seq)

	// journal, set on the store's live tables only (not on snapshots),
	// collects the puts that add history records, for the event feed.
	journal *[]putRec
	lanes   laneIndex // the writer's count of ready entries per lane; nil in snapshots

	// Inspection (inspect.go): counts by (queue, kind) and state, kept by
	// countMove on every put and drop; waiting holds the Scheduled
	// instances by (queue, kind, RunAt, Seq) for Lag.
	counts  map[group][store.TimedOut + 1]int64
	waiting *btree.BTreeG[*rec]
	// keyRun counts the Processing instances with a limit key, per key
	// and (queue, kind), for per-key limits (keyedlimits.go); only the
	// writer keeps it (nil in snapshots).
	keyRun map[string]map[group]int32
}

func newTables() tables {
	return tables{
		byID:       btree.NewG(degree, lessID),
		created:    btree.NewG(degree, lessCreated),
		ready:      btree.NewG(degree, lessReady),
		due:        btree.NewG(degree, lessLease),
		final:      btree.NewG(degree, lessFinished),
		owned:      btree.NewG(degree, lessOwned),
		logsByTime: btree.NewG(degree, lessLogTime),
		logsByInst: btree.NewG(degree, lessLogInst),
		lanes:      laneIndex{},
		keyRun:     map[string]map[group]int32{},
		counts:     map[group][store.TimedOut + 1]int64{},
		waiting:    btree.NewG(degree, lessWaiting),
	}
}

// clone returns a copy of t that shares its nodes until either changes;
// call it under the write lock.
func (t *tables) clone() *tables {
	return &tables{
		byID:       t.byID.Clone(),
		created:    t.created.Clone(),
		ready:      t.ready.Clone(),
		due:        t.due.Clone(),
		final:      t.final.Clone(),
		owned:      t.owned.Clone(),
		logsByTime: t.logsByTime.Clone(),
		logsByInst: t.logsByInst.Clone(),
		counts:     maps.Clone(t.counts),
		waiting:    t.waiting.Clone(),
	}
}

// stateIndex returns the index of instances in state st, or nil.
func (t *tables) stateIndex(st store.State) *btree.BTreeG[*rec] {
	switch {
	case st == store.Scheduled:
		return t.ready
	case st == store.Processing:
		return t.due
	case st.Final():
		return t.final
	}
	return nil
}

// put stores r, a new version of old (nil for a new instance).
func (t *tables) put(old, r *rec) {
	if old != nil {
		if idx := t.stateIndex(old.state); idx != nil {
			idx.Delete(old)
		}
		if old.state == store.Processing {
			t.owned.Delete(old)
		}
		if old.state == store.Scheduled {
			t.laneDel(old)
		}
	}
	if r.state == store.Processing {
		t.owned.ReplaceOrInsert(r)
	}
	if t.journal != nil && (old == nil || r.histLen() > old.histLen()) {
		*t.journal = append(*t.journal, putRec{old, r})
	}
	t.countMove(old, r)
	t.byID.ReplaceOrInsert(r)
	t.created.ReplaceOrInsert(r) // CreatedAt and Seq never change: replaces old
	if idx := t.stateIndex(r.state); idx != nil {
		idx.ReplaceOrInsert(r)
	}
	if r.state == store.Scheduled {
		t.laneAdd(r)
	}
}

// drop removes r from every index.
func (t *tables) drop(r *rec) {
	t.countMove(r, nil)
	t.byID.Delete(r)
	t.created.Delete(r)
	if idx := t.stateIndex(r.state); idx != nil {
		idx.Delete(r)
	}
	if r.state == store.Processing {
		t.owned.Delete(r)
	}
	if r.state == store.Scheduled {
		t.laneDel(r)
	}
}

// get returns the instance id, or nil; probe is scratch space for the key.
func (t *tables) get(probe *rec, id string) *rec {
	probe.data, probe.idLen = id, uint32(len(id))
	r, _ := t.byID.Get(probe)
	probe.data, probe.idLen = "", 0
	return r
}

// nameOf returns the number of a kind, queue or node name, giving it one
// when it has none.
func (s *Store) nameOf(str string) name {
	s.nameMu.Lock()
	defer s.nameMu.Unlock()
	if n, ok := s.nameIDs[str]; ok {
		return n
	}
	names := *s.names.Load()
	n := name(len(names))
	// Appending in place is safe: readers index only below their length.
	names = append(names, str)
	s.names.Store(&names)
	s.nameIDs[str] = n
	return n
}

// knownName returns the number of str, or false when it has none.
func (s *Store) knownName(str string) (name, bool) {
	s.nameMu.Lock()
	defer s.nameMu.Unlock()
	n, ok := s.nameIDs[str]
	return n, ok
}

// nameList returns the name table, indexed by name.
func (s *Store) nameList() []string { return *s.names.Load() }

// intern returns the table's copy of str, so thousands of history and log
// records with one kind or node share one string.
func (s *Store) intern(str string) string {
	n := s.nameOf(str) // before loading the table, which it may grow
	return s.nameList()[n]
}

// ctxErr wraps a done context's error.
func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memdbstore: %s: %w", op, err)
	}
	return nil
}

// write runs fn under the write lock. fn changes s.t in place, so it must
// check everything that can fail before its first change: there is no
// rollback.
func (s *Store) write(ctx context.Context, op string, fn func() error) error {
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snap = nil
	err := fn()
	s.publish() // the events of what fn changed, in write order
	return err
}

// snapshot returns a read-only copy of the indexes as of the last write.
// Readers share one copy until the next write.
func (s *Store) snapshot() *tables {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap == nil {
		s.snap = s.t.clone()
	}
	return s.snap
}

// subscriber is one Subscribe call's channel.
type subscriber struct {
	ch     chan struct{}
	closed bool
}

// Subscribe implements store.Notifier: the channel receives a value,
// coalesced, after an Enqueue, a retry, a released lease or a rescue puts an
// instance into queue. It is closed when ctx ends. Subscribing starts no
// goroutine.
func (s *Store) Subscribe(ctx context.Context, queue string) (<-chan struct{}, error) {
	if queue == "" {
		return nil, fmt.Errorf("%w: subscribe without a queue", store.ErrInvalid)
	}
	if err := ctxErr(ctx, "subscribe"); err != nil {
		return nil, err
	}
	sub := &subscriber{ch: make(chan struct{}, 1)}
	s.subMu.Lock()
	m := s.subs[queue]
	if m == nil {
		m = map[*subscriber]struct{}{}
		s.subs[queue] = m
	}
	m[sub] = struct{}{}
	s.subMu.Unlock()
	context.AfterFunc(ctx, func() {
		s.subMu.Lock()
		defer s.subMu.Unlock()
		if m := s.subs[queue]; m != nil {
			delete(m, sub)
			if len(m) == 0 {
				delete(s.subs, queue)
			}
		}
		sub.closed = true
		close(sub.ch)
	})
	return sub.ch, nil
}

// notify wakes the subscribers of queues.
func (s *Store) notify(queues map[string]struct{}) {
	if len(queues) == 0 {
		return
	}
	s.subMu.Lock()
	defer s.subMu.Unlock()
	for q := range queues {
		for sub := range s.subs[q] {
			if sub.closed {
				continue
			}
			select {
			case sub.ch <- struct{}{}:
			default: // one pending signal is enough
			}
		}
	}
}

// Package memdbstore is jobkit's embedded store, on hashicorp/go-memdb: no
// server, nothing to configure, the default when a manager is given no
// store.
//
// Several managers that share one *Store act as one cluster: every queue
// operation is one go-memdb write transaction, so two managers never claim
// the same attempt. Readers work on snapshots and never block writers.
//
// Claiming costs O(log n) in the queue's depth, never a scan: Scheduled
// instances sit in a compact index ordered by (queue, priority descending,
// RunAt, Seq), and a claim seeks to the head of each priority level in turn,
// jumping past a level whose head is not due yet, so a future high-priority
// instance never blocks a ready lower-priority one. Rescue walks an index of
// leases by deadline; Prune walks indexes of finished instances and of logs
// by time. An instance's history is kept inline in its record, which keeps a
// transition at one index write instead of three.
//
// Nothing is persisted: the data lives as long as the *Store value.
package memdbstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/jobkit/job/store"
)

// Table and index names.
const (
	tInstances = "instances"
	tLogs      = "logs"
	tUnique    = "unique"

	iID    = "id"
	iReady = "ready" // Scheduled instances: (queue, ^priority, runAt, seq)
	iDue   = "due"   // Processing instances: (leaseUntil, seq)
	iFinal = "final" // finished instances: (finishedAt, seq)
	iInst  = "inst"  // logs: (instance ID, 0, seq)
	iTime  = "time"  // logs: (time, seq)
)

// Store is an in-memory store.Store. Its zero value is not usable; call New.
// A *Store is safe for concurrent use by any number of managers.
type Store struct {
	db         *memdb.MemDB
	seq        atomic.Uint64
	pruneLimit int

	mu     sync.Mutex
	queues map[string]uint32 // interned queue names
	names  map[string]string // interned kind and node names

	subMu sync.Mutex
	subs  map[string]map[*subscriber]struct{} // by queue
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
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, fmt.Errorf("memdbstore: invalid schema (a bug in this package): %w", err)
	}
	s := &Store{
		db:         db,
		pruneLimit: 10000,
		queues:     map[string]uint32{},
		names:      map[string]string{},
		subs:       map[string]map[*subscriber]struct{}{},
	}
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
	_ store.Store    = (*Store)(nil)
	_ store.Notifier = (*Store)(nil)
)

func schema() *memdb.DBSchema {
	inst := func(f func(r *rec) (bool, []byte)) memdb.Indexer {
		return keyIndexer{key: func(o any) (bool, []byte) { return f(o.(*rec)) }}
	}
	logIdx := func(f func(l *logRow) []byte) memdb.Indexer {
		return keyIndexer{key: func(o any) (bool, []byte) { return true, f(o.(*logRow)) }}
	}
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tInstances: {Name: tInstances, Indexes: map[string]*memdb.IndexSchema{
			iID:    {Name: iID, Unique: true, Indexer: inst(func(r *rec) (bool, []byte) { return true, keyOf(r.id) })},
			iReady: {Name: iReady, Unique: true, AllowMissing: true, Indexer: inst(func(r *rec) (bool, []byte) { return r.state == store.Scheduled, r.key })},
			iDue:   {Name: iDue, Unique: true, AllowMissing: true, Indexer: inst(func(r *rec) (bool, []byte) { return r.state == store.Processing, r.key })},
			iFinal: {Name: iFinal, Unique: true, AllowMissing: true, Indexer: inst(func(r *rec) (bool, []byte) { return r.state.Final(), r.key })},
		}},
		tLogs: {Name: tLogs, Indexes: map[string]*memdb.IndexSchema{
			iID:   {Name: iID, Unique: true, Indexer: logIdx(func(l *logRow) []byte { return seqKey(l.seq) })},
			iInst: {Name: iInst, Unique: true, Indexer: logIdx(func(l *logRow) []byte { return instLogKey(l.instanceID, l.seq) })},
			iTime: {Name: iTime, Unique: true, Indexer: logIdx(func(l *logRow) []byte { return timeSeqKey(l.t, l.seq) })},
		}},
		tUnique: {Name: tUnique, Indexes: map[string]*memdb.IndexSchema{
			iID: {Name: iID, Unique: true, Indexer: keyIndexer{key: func(o any) (bool, []byte) { return true, keyOf(o.(*uniqueRow).key) }}},
		}},
	}}
}

// queueID returns the interned number of queue, creating one when create.
func (s *Store) queueID(queue string, create bool) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.queues[queue]
	if !ok && create {
		id = uint32(len(s.queues) + 1)
		s.queues[queue] = id
		ok = true
	}
	return id, ok
}

// intern returns a shared copy of name, so thousands of records with one
// kind or node keep one string.
func (s *Store) intern(name string) string {
	if name == "" {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.names[name]; ok {
		return v
	}
	if len(s.names) >= 1<<16 { // bound the table; past it, names are not shared
		return name
	}
	s.names[name] = name
	return name
}

// ctxErr wraps a done context's error.
func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memdbstore: %s: %w", op, err)
	}
	return nil
}

// write runs fn in a write transaction, committing when it returns nil.
func (s *Store) write(ctx context.Context, op string, fn func(tx *memdb.Txn) error) error {
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	tx := s.db.Txn(true)
	if err := fn(tx); err != nil {
		tx.Abort()
		return err
	}
	tx.Commit()
	return nil
}

// put stores r, a new version of an instance.
func put(tx *memdb.Txn, r *rec) error {
	r.seal()
	return tx.Insert(tInstances, r)
}

// get returns the instance id, or nil.
func get(tx *memdb.Txn, id string) (*rec, error) {
	obj, err := tx.First(tInstances, iID, id)
	if err != nil || obj == nil {
		return nil, err
	}
	return obj.(*rec), nil
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

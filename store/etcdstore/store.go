package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// Store is a store.Store on etcd. It is safe for concurrent use; several
// Stores (in one process or many) in the same namespace share one queue.
type Store struct {
	// seqSalt tells apart the sequence numbers of Enqueue calls on
	// several handles (or at once on this one) that read the same ticket
	// (see enqueue); it starts at random.
	seqSalt atomic.Uint32
	fast    fastEnqueue // what a one-request Enqueue needs (enqueue_fast.go)

	cli       *clientv3.Client
	ns        string
	k         keys
	ttl       int64 // seconds
	maxOps    int
	maxTxn    int // bytes
	maxValue  int // bytes
	opTimeout time.Duration
	window    int
	nonce     string // makes log keys of this handle unique

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	lease     clientv3.LeaseID // this handle's etcd lease; 0 before the first claim or after it died
	leaseDone chan struct{}    // closed when the keep-alive of lease ends
	prios     map[string][]string
	far       map[string]string    // queue/prio -> far key of its ready range (see readReady)
	short     map[string]bool      // queue -> its last claim found fewer ready than it asked for (see readReady)
	low       map[string]laneLow   // queue/lane -> where claims start reading it (see laneLow)
	emptied   map[string]time.Time // lane marker -> when this handle last tried to delete it (dropEmptyLanes)
	contended time.Time            // when a claim last lost a race
	logCount  uint64
	uniq      map[int64]clientv3.LeaseID // unique-key leases by expiry bucket
	owned     map[string]ownedRec        // dynamic records of this handle's running claims
	tally     map[string]int             // claim record key -> its attempts still in owned
	lazyDel   []string                   // claim records whose attempts all ended, to delete
	claimN    uint64                     // numbers this handle's claim records
	nodes     nodeView                   // the node registry as this handle sees it (nodes.go)

	fold folder // background folding of count deltas (inspect.go)
}

// ownedRec is what a handle knows of an attempt it claimed: the dynamic
// record it wrote and at which revision, so Finish can write the outcome
// guarded on that revision without reading it first, and the claim record
// that lists it.
type ownedRec struct {
	d   dynRec
	rev int64
	ck  string
}

// remember records d, written at rev, as an attempt this handle runs,
// listed by claim record ck ("": the one it was remembered with before).
func (s *Store) remember(d *dynRec, rev int64, ck string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.owned[d.ID]
	switch {
	case ck == "" && ok:
		ck = old.ck
	case ck != "" && (!ok || old.ck != ck):
		if ok {
			s.untally(old.ck)
		}
		s.tally[ck]++
	}
	s.owned[d.ID] = ownedRec{*d, rev, ck}
}

// forget drops id from the attempts this handle runs; a claim record none
// of whose attempts it runs any more is deleted with its next write
// (lazyDel).
func (s *Store) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.owned[id]; ok {
		delete(s.owned, id)
		s.untally(o.ck)
	}
}

// untally counts one attempt of claim record ck as ended; s.mu is held.
func (s *Store) untally(ck string) {
	n, ok := s.tally[ck]
	if !ok {
		return
	}
	if n <= 1 {
		delete(s.tally, ck)
		if len(s.lazyDel) < 4096 { // beyond, Rescue collects them
			s.lazyDel = append(s.lazyDel, ck)
		}
		return
	}
	s.tally[ck] = n - 1
}

// claimRecKey names a new claim record of owner's claim number seq.
func (s *Store) claimRecKey(owner string, seq uint64) string {
	s.mu.Lock()
	s.claimN++
	n := s.claimN
	s.mu.Unlock()
	return s.k.claimRecSeq(owner, seq) + s.nonce + hex16(n)
}

// finishDrops returns deletes of the claim records whose every attempt
// this handle still runs ends in batch (each group's ck), then dropOps's
// with the room left, and the function that forgets them all once the
// transaction carrying them succeeded.
func (s *Store) finishDrops(batch []*group, room int) extraTxn {
	n := map[string]int{}
	for _, g := range batch {
		if g.ck != "" {
			n[g.ck]++
		}
	}
	var ops []clientv3.Op
	var ended []string
	s.mu.Lock()
	for ck, c := range n {
		if t, ok := s.tally[ck]; ok && t <= c && len(ops) < room {
			ops = append(ops, clientv3.OpDelete(ck))
			ended = append(ended, ck)
		}
	}
	s.mu.Unlock()
	more := s.dropOps(room - len(ops))
	return extraTxn{ops: append(ops, more.ops...), done: func(rev int64) {
		more.done(rev)
		s.mu.Lock()
		for _, ck := range ended {
			delete(s.tally, ck) // forget then leaves it alone
		}
		s.mu.Unlock()
	}}
}

// dropOps returns deletes of up to room claim records this handle no
// longer needs (lazyDel), with the function that forgets them once the
// transaction carrying them succeeded.
func (s *Store) dropOps(room int) extraTxn {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(room, len(s.lazyDel))
	if n <= 0 {
		return extraTxn{done: func(int64) {}}
	}
	keys := slices.Clone(s.lazyDel[:n])
	ops := make([]clientv3.Op, n)
	for i, k := range keys {
		ops[i] = clientv3.OpDelete(k)
	}
	return extraTxn{ops: ops, done: func(int64) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lazyDel = slices.DeleteFunc(s.lazyDel, func(k string) bool { return slices.Contains(keys, k) })
	}}
}

// Option configures a Store. New returns an error wrapping store.ErrInvalid
// for an option given an unusable value, naming the valid range.
type Option func(*Store) error

// DefaultNamespace is the namespace of a Store given no WithNamespace.
const DefaultNamespace = "default"

// WithNamespace puts the store in namespace ns, isolated from every other
// namespace on the same etcd cluster: its keys are "jobkit/<ns>/..." (ns
// path-escaped, so "a" and "a/b" stay apart), and nothing the store does
// touches a key outside them. Stores that share a namespace share one
// queue. ns must not be empty. Defaults to DefaultNamespace. The same
// option of every jobkit store plugin means the same.
func WithNamespace(ns string) Option { return func(s *Store) error { s.ns = ns; return nil } }

// WithLeaseTTL sets the TTL of the etcd lease that ties this handle's
// claims to its process. When the process dies, its running instances
// become rescuable once the lease ends, whatever their contract lease
// deadline says. Defaults to 10 s; rounded up to whole seconds; at least
// 2 s.
func WithLeaseTTL(d time.Duration) Option {
	return func(s *Store) error {
		if d < 2*time.Second {
			return fmt.Errorf("%w: etcdstore.WithLeaseTTL(%v): want at least 2s", store.ErrInvalid, d)
		}
		s.ttl = int64((d + time.Second - 1) / time.Second)
		return nil
	}
}

// WithMaxTxnOps sets how many operations the store puts in one etcd
// transaction. It must not exceed the server's --max-txn-ops. Defaults to
// 128, etcd's default; at least 16.
func WithMaxTxnOps(n int) Option {
	return func(s *Store) error {
		if n < 16 {
			return fmt.Errorf("%w: etcdstore.WithMaxTxnOps(%d): want at least 16 (and no more than etcd's --max-txn-ops)", store.ErrInvalid, n)
		}
		s.maxOps = n
		return nil
	}
}

// WithMaxValueBytes sets the largest encoded instance (arguments included),
// result or log message the store accepts; larger ones fail with
// store.ErrTooLarge. Defaults to 512 KiB, which keeps every transaction
// under etcd's default --max-request-bytes of 1.5 MiB. Raise both together.
func WithMaxValueBytes(n int) Option {
	return func(s *Store) error {
		if n <= 0 {
			return fmt.Errorf("%w: etcdstore.WithMaxValueBytes(%d): want a positive size", store.ErrInvalid, n)
		}
		s.maxValue = n
		s.maxTxn = max(2*n+64<<10, 1<<20)
		return nil
	}
}

// WithOpTimeout bounds every store call whose ctx has no earlier deadline,
// so an unreachable etcd gives an error instead of a hang. Defaults to 15 s;
// 0 leaves calls bounded by their ctx alone.
func WithOpTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d < 0 {
			return fmt.Errorf("%w: etcdstore.WithOpTimeout(%v): want 0 (none) or a positive duration", store.ErrInvalid, d)
		}
		s.opTimeout = d
		return nil
	}
}

// WithClaimWindow sets how many ready candidates a contended claim spreads
// over: after a lost race, claimers pick at random among the first n ready
// instances instead of all fighting for the head of the queue. Defaults
// to 32; at least 1.
func WithClaimWindow(n int) Option {
	return func(s *Store) error {
		if n < 1 {
			return fmt.Errorf("%w: etcdstore.WithClaimWindow(%d): want at least 1", store.ErrInvalid, n)
		}
		s.window = n
		return nil
	}
}

// New returns a Store that keeps its data in etcd through client. The client
// belongs to the caller: the Store never closes it. New does no I/O; the
// first call that needs etcd reports an unreachable server. Call Close when
// done, to end the etcd lease the Store takes for its claims.
func New(client *clientv3.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: etcdstore.New: nil client; pass a *clientv3.Client from clientv3.New", store.ErrInvalid)
	}
	s := &Store{
		cli: client, ns: DefaultNamespace, ttl: 10, maxOps: 128,
		maxValue: 512 << 10, maxTxn: 1<<20 + 64<<10, opTimeout: 15 * time.Second, window: 32,
		prios: map[string][]string{}, far: map[string]string{}, short: map[string]bool{}, low: map[string]laneLow{}, emptied: map[string]time.Time{}, uniq: map[int64]clientv3.LeaseID{}, owned: map[string]ownedRec{}, tally: map[string]int{},
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: etcdstore.New: nil option", store.ErrInvalid)
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.ns == "" {
		return nil, fmt.Errorf("%w: etcdstore.New: empty namespace; name one (WithNamespace(\"myapp\")) or leave the option out for %q", store.ErrInvalid, DefaultNamespace)
	}
	s.k.p = "jobkit/" + esc(s.ns) + "/"
	var b [6]byte
	_, _ = rand.Read(b[:])
	s.nonce = hex.EncodeToString(b[:])
	s.seqSalt.Store(uint32(b[0]))
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Namespace returns the store's namespace.
func (s *Store) Namespace() string { return s.ns }

// Prefix returns the key prefix of the store's namespace, "jobkit/<ns>/",
// under which it keeps all its data (for etcdctl get --prefix).
func (s *Store) Prefix() string { return s.k.p }

// Close ends what the store owns: its etcd lease (so its remaining claims
// become rescuable at once), its keep-alive and its subscriptions. It does
// not close the client. Calls after Close fail.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	lease := s.lease
	s.lease = 0
	uniq := s.uniq
	s.uniq = nil
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	var err error
	if lease != 0 && s.cli.Ctx().Err() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if _, rerr := s.cli.Revoke(ctx, lease); rerr != nil && !isLeaseNotFound(rerr) {
			err = fmt.Errorf("etcdstore: close: revoke etcd lease %x: %w", int64(lease), rerr)
		}
		cancel()
	}
	_ = uniq // unique-key leases outlive the handle on purpose: they carry held keys
	return err
}

var errClosed = errors.New("etcdstore: store is closed")

// goBackground counts a goroutine of the store's (a watch, a follower) in
// s.wg unless the store is closed, and reports whether it did; Close waits
// for the counted ones.
func (s *Store) goBackground() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// op returns the context of one store call: ctx, bounded by the op timeout
// when it has no earlier deadline.
func (s *Store) op(ctx context.Context) (context.Context, context.CancelFunc, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, nil, errClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if s.opTimeout > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.opTimeout {
			c, cancel := context.WithTimeout(ctx, s.opTimeout)
			return c, cancel, nil
		}
	}
	return ctx, func() {}, nil
}

// wrap names the operation and, when etcd did not answer, the endpoints.
func (s *Store) wrap(what string, ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrFinished) || errors.Is(err, errClosed) {
		return fmt.Errorf("etcdstore: %s: %w", what, err)
	}
	if strings.Contains(err.Error(), "database space exceeded") {
		return fmt.Errorf("%w: etcdstore: %s: etcd at %s is over its space quota and refuses writes (nothing was changed); free space (retention, compact, defragment) or raise --quota-backend-bytes, then end the NOSPACE alarm with etcdctl alarm disarm: %v",
			store.ErrFull, what, strings.Join(s.cli.Endpoints(), ","), err)
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("etcdstore: %s: etcd at %s did not answer in time (is it running and reachable?): %w",
			what, strings.Join(s.cli.Endpoints(), ","), err)
	}
	return fmt.Errorf("etcdstore: %s: etcd at %s: %w", what, strings.Join(s.cli.Endpoints(), ","), err)
}

func isLeaseNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "requested lease not found")
}

// ownLease returns this handle's etcd lease, granting it (and writing its
// liveness key) on first use or after the previous one ended.
func (s *Store) ownLease(ctx context.Context) (clientv3.LeaseID, error) {
	s.mu.Lock()
	if s.lease != 0 {
		select {
		case <-s.leaseDone:
			s.lease = 0
		default:
			l := s.lease
			s.mu.Unlock()
			return l, nil
		}
	}
	s.mu.Unlock()

	g, err := s.cli.Grant(ctx, s.ttl)
	if err != nil {
		return 0, fmt.Errorf("grant an etcd lease: %w", err)
	}
	host, _ := os.Hostname()
	info := fmt.Sprintf("%s pid %d", host, os.Getpid())
	if _, err := s.cli.Put(ctx, s.k.alive(int64(g.ID)), info, clientv3.WithLease(g.ID)); err != nil {
		s.revokeSoon(g.ID)
		return 0, fmt.Errorf("write the liveness key: %w", err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.revokeSoon(g.ID)
		return 0, errClosed
	}
	if s.lease != 0 { // another call won the race
		l := s.lease
		s.mu.Unlock()
		s.revokeSoon(g.ID)
		return l, nil
	}
	defer s.mu.Unlock()
	ch, err := s.cli.KeepAlive(s.ctx, g.ID)
	if err != nil {
		go s.revokeSoon(g.ID)
		return 0, fmt.Errorf("keep the etcd lease alive: %w", err)
	}
	done := make(chan struct{})
	s.lease, s.leaseDone = g.ID, done
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		for range ch {
		}
	}()
	return g.ID, nil
}

func (s *Store) revokeSoon(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = s.cli.Revoke(ctx, id)
}

// uniqueLease returns a lease that lives at least ttl from now, shared by
// every unique key expiring in the same bucket, so a held unique key is
// deleted by etcd some time after it expires without a grant per key.
func (s *Store) uniqueLease(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	const bucket = 60 // seconds
	secs := int64(ttl/time.Second) + 1
	b := (time.Now().Unix() + secs + bucket - 1) / bucket
	s.mu.Lock()
	id, ok := s.uniq[b]
	s.mu.Unlock()
	if ok {
		return id, nil
	}
	life := b*bucket - time.Now().Unix() + bucket
	g, err := s.cli.Grant(ctx, life)
	if err != nil {
		return 0, fmt.Errorf("grant a unique-key lease: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uniq == nil {
		return g.ID, nil
	}
	now := time.Now().Unix() / bucket
	for k := range s.uniq {
		if k < now {
			delete(s.uniq, k)
		}
	}
	if id, ok := s.uniq[b]; ok {
		return id, nil // a concurrent call granted one too; its lease just expires
	}
	s.uniq[b] = g.ID
	return g.ID, nil
}

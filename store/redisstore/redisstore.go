// Package redisstore is a jobkit store on Redis, through
// github.com/redis/go-redis/v9.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	st, err := redisstore.New(rdb)
//	...
//	mgr, err := job.NewManager(job.WithStore(st))
//
// Several processes that share one Redis (and one namespace) act as one
// cluster: every queue operation is one atomic Lua script, O(log n) in the
// depth of the queue (a claim is O(1) per instance: ready instances sit in
// one list per priority), so two managers never claim the same attempt.
// Claim order is priority, then the order instances became ready (see
// store.Queue.Claim). Leases expire and are rescued; a late finish from a
// worker whose lease was rescued is rejected. New work wakes idle managers
// in other processes through pub/sub.
//
// All keys of a namespace share one hash tag ("jobkit:{ns}:..."), so the
// store works on Redis Cluster too, through a redis.ClusterClient: the
// store contract and the manager scenarios run against a real cluster of
// three primaries and three replicas in this package's tests. A namespace
// then lives in one slot, on one primary; NewPartitioned splits one over
// many (see doc/redis-cluster.md). When that primary dies and its
// replica is promoted, the store asks the client to reload its slot map
// on the first calls that cannot reach the dead node, so work resumes
// within a second of the promotion (go-redis alone waits up to its
// ClusterStateReloadInterval, a minute). Redis replicates asynchronously:
// what the dead primary acknowledged in its last moment and had not sent
// to the replica is lost with it: schedules, and outcomes, whose jobs
// then run again (TestClusterPrimaryKilled). The scripts and the key layout are
// shared with package valkeystore (store/internal/redisscript, whose
// package comment describes the layout), so the two plugins cannot drift
// apart.
//
// Times are kept to the microsecond. A claim moves at most 1,000 instances
// that became due from the scheduled set to the ready lists per call, so
// when more than that fall due at once, the backlog moves over the next
// claims (every claim moves some).
//
// Memory: a pending instance costs about 230 B of Redis used_memory (its
// spec, its ready-list entry, its kind-bucket entry and its share of the
// enqueue history entry; run BenchmarkMemoryPerPendingJob). A running or
// finished instance adds its state (about 60 B plus its result and error);
// while it runs it is also in the set of running instances (about 76 B:
// MEMORY USAGE of a set of 10,000 17-byte IDs is 756,720 B).
// Lease batches and history entries are shared by the instances of one
// call; the IDs in a lease batch (about 19 B each) stay until the batch's
// deadline passes and Rescue reads it, and history entries until history
// retention trims them (the records of a pruned instance stop showing at
// once).
//
// Lookups read what they ask for: by ID one instance; by kind and
// CreatedAt range the kind's per-second buckets in that range, newest
// first, stopping at the limit; by state the state's own lists and sets
// (ready lists and scheduled sets, the set of running instances, one
// finished list per final state) when those hold fewer instances than the
// kind buckets would read, so a lookup of what runs or failed does not
// grow with the completed history (BenchmarkLookupByState); by time range
// the history stream between its bounds.
//
// # Timeouts and ambiguous calls
//
// Every call is bounded by its ctx. go-redis honours a ctx deadline on the
// connection only when the client's Options.ContextTimeoutEnabled is true,
// which is what jobkit recommends:
//
//	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//
// Without it, go-redis waits for its ReadTimeout (3 s by default) whatever
// the ctx says; the store then returns at the ctx's end anyway and leaves
// the command to finish (or time out) on its connection in the background.
// A call cut short may still have been applied: claims and finishes are
// made so that the engine's repeat of such a call is safe (see
// store.ClaimParams.ClaimSeq and store.Queue.Finish), and ScheduleJob with
// job.WithIdempotencyKey makes a repeated schedule return the stored
// instance.
//
// # Out of memory
//
// At maxmemory with the noeviction policy, Redis refuses every writing
// script as a whole, before it changes anything (the scripts carry Redis 7
// shebang flags), and the store returns an error wrapping store.ErrFull;
// the engine then stops claiming until its outcomes can be written again.
// Renewals and retention still run, so running work keeps its leases and
// retention can free memory. Redis 7 or later is required.
//
// An Enqueue that ends after its script was sent and before its reply
// came (the ctx's deadline, a broken connection, a frozen server) may
// have stored its instances: its error wraps store.ErrOutcomeUnknown as
// well as the cause, and ScheduleJob's names WithIdempotencyKey as the
// safe retry. Errors that certainly changed nothing do not: a ctx that
// had ended before the call, an error reply of the server (OOM,
// WRONGTYPE, a script error), a client that is closed, found no pooled connection in time or could not
// connect. A ctx that ends while the client waits for a connection counts
// as unknown, as the client does not say whether the command went out.
//
// The client belongs to the caller: the store never closes it.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// Store is a store.Store and store.Notifier on Redis. Its methods are
// those of the embedded Core; see package store for their contracts.
type Store struct {
	*redisscript.Core
	client redis.UniversalClient
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.Notifier       = (*Store)(nil)
	_ store.CancelNotifier = (*Store)(nil)
)

// Option configures a Store.
type Option = redisscript.Option

// WithNamespace puts the store in namespace ns, isolated from every other
// namespace on the same server: its keys are "jobkit:{ns}:...", and nothing
// the store does touches a key outside them. Managers that share a
// namespace share one queue. ns must not be empty nor hold braces.
// Defaults to "default". The same option of every jobkit store plugin
// means the same.
func WithNamespace(ns string) Option { return redisscript.WithNamespace(ns) }

// New returns a store on client. The client belongs to the caller and is
// never closed by the store. It returns an error wrapping store.ErrInvalid
// for a nil client or an invalid namespace (empty, or with braces).
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisstore.New: nil client; pass a client from redis.NewClient (with ContextTimeoutEnabled: true)", store.ErrInvalid)
	}
	o := redisscript.Apply(opts)
	r := &runner{c: client, scripts: make(map[*redisscript.Script]*redis.Script, len(redisscript.All)), ctxTimeouts: contextTimeouts(client)}
	for _, s := range redisscript.All {
		r.scripts[s] = redis.NewScript(s.Source)
	}
	r.fn = redisscript.NewFunctions(r)
	core, err := redisscript.NewCore(r, o.Namespace, "redisstore")
	if err != nil {
		return nil, fmt.Errorf("redisstore.New: %w", err)
	}
	if err := core.SetReplicaAcks(o); err != nil {
		return nil, fmt.Errorf("redisstore.New: %w", err)
	}
	if _, ring := client.(*redis.Ring); ring && o.ReplicaAcks > 0 {
		return nil, fmt.Errorf("%w: redisstore.New: WithReplicaAcks on a Ring, whose shards have no replicas it can wait for; use a plain or cluster client", store.ErrInvalid)
	}
	return &Store{Core: core, client: client}, nil
}

// contextTimeouts reports whether client applies ctx deadlines to its
// connections itself (Options.ContextTimeoutEnabled).
func contextTimeouts(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// runner runs the shared scripts with go-redis.
type runner struct {
	c       redis.UniversalClient
	scripts map[*redisscript.Script]*redis.Script
	fn      *redisscript.Functions
	// ctxTimeouts: the client honours ctx deadlines itself; otherwise
	// calls whose ctx can end are waited for in bounded, see bounded.
	ctxTimeouts bool
	keys        [3]atomic.Pointer[boxedKeys] // see boxKeys
}

// boxedKeys is a key slice made into interface values, for the slice it
// was made of.
type boxedKeys struct {
	of  *string // &keys[0]
	n   int
	all []any
}

// boxKeys returns keys as interface values. The store's Core passes one
// of three key slices to every script call (Keys.Enqueue to the enqueue,
// Keys.EnqueueOne to the lean one, Keys.Script to the others), so the
// values made for each are kept and reused while the slice is the same
// (same first element, same length, never written after the Core is
// made): the first two lengths seen keep their slots, the last slot holds
// the length seen last among the others.
func (r *runner) boxKeys(keys []string) []any {
	if len(keys) == 0 {
		return nil
	}
	for i := range r.keys {
		if b := r.keys[i].Load(); b != nil && b.of == &keys[0] && b.n == len(keys) {
			return b.all
		}
	}
	b := &boxedKeys{of: &keys[0], n: len(keys), all: toAny(keys)}
	slot := &r.keys[len(r.keys)-1]
	for i := range r.keys[:len(r.keys)-1] {
		if b0 := r.keys[i].Load(); b0 == nil || b0.n == len(keys) {
			slot = &r.keys[i]
			break
		}
	}
	slot.Store(b)
	return b.all
}

// direct reports whether a call under ctx can be left to the client:
// the client watches ctx itself, or ctx never ends.
func (r *runner) direct(ctx context.Context) bool {
	return r.ctxTimeouts || ctx.Done() == nil
}

// bounded runs call and returns its result, or ctx's error as soon as ctx
// ends, when the client does not watch ctx itself: go-redis without
// ContextTimeoutEnabled waits for its ReadTimeout whatever ctx says. The
// call then ends on its own in the background.
func bounded(r *runner, ctx context.Context, call func() (any, error)) (any, error) {
	if r.direct(ctx) {
		return call()
	}
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := call()
		ch <- result{v, err}
	}()
	select {
	case res := <-ch:
		return res.v, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Run calls s as a function of redisscript.Library (FCALL), loading the
// library when the server lacks it, or on a server without Functions
// runs it with EVALSHA (see redisscript.Functions).
func (r *runner) Run(ctx context.Context, s *redisscript.Script, keys, args []string) (any, error) {
	if r.direct(ctx) { // no closure to allocate on the usual path
		return r.fn.Run(ctx, s, keys, args)
	}
	return bounded(r, ctx, func() (any, error) { return r.fn.Run(ctx, s, keys, args) })
}

// Unapplied implements redisscript.Unapplied: a reply of the server, or
// a client that is closed or found no pooled connection in time, changed
// nothing.
func (r *runner) Unapplied(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) || errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout)
}

// FCall implements redisscript.FunctionClient. It builds the command's
// arguments itself, as go-redis's FCall would lay them out, without an
// allocation per argument: the keys, the same slice on every call of a
// store, are made interface values once and kept (see boxKeys), and each
// argument is passed as a *string into args (go-redis writes a *string
// as its string; a string in an interface value is a heap copy of its
// header), which stays untouched until the call returns. go-redis's
// FCall took a []any that it copied, with every key boxed again. So a
// go-redis hook that prints the command sees these arguments (binary
// record encodings, mostly) as pointers.
func (r *runner) FCall(ctx context.Context, fn string, ro bool, keys, args []string) (any, error) {
	cmd := r.fcallCmd(ctx, fn, ro, keys, args)
	_ = r.c.Process(ctx, cmd)
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		reloadOnConnectionError(r.c, err)
	}
	return normalize(v), err
}

// fcallCmd builds FCALL (FCALL_RO when ro) of fn; see FCall.
func (r *runner) fcallCmd(ctx context.Context, fn string, ro bool, keys, args []string) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	// A constant in an interface value is not a heap copy.
	if ro {
		cmdArgs = append(cmdArgs, "fcall_ro")
	} else {
		cmdArgs = append(cmdArgs, "fcall")
	}
	cmdArgs = append(cmdArgs, fn, len(keys))
	cmdArgs = append(cmdArgs, r.boxKeys(keys)...)
	for i := range args {
		cmdArgs = append(cmdArgs, &args[i])
	}
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // cluster routing, as FCall sets it
	}
	return cmd
}

// FunctionLoad implements redisscript.FunctionClient: on every primary of
// a cluster or ring, on the server of a plain client.
func (r *runner) FunctionLoad(ctx context.Context, lib redisscript.LibraryInfo) error {
	load := func(ctx context.Context, c *redis.Client) error {
		return c.FunctionLoadReplace(ctx, lib.Source).Err()
	}
	switch c := r.c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, load)
	case *redis.Ring:
		return c.ForEachShard(ctx, load)
	}
	return r.c.FunctionLoadReplace(ctx, lib.Source).Err()
}

// Eval implements redisscript.FunctionClient: EVALSHA, and EVAL on
// NOSCRIPT (go-redis's Script.Run).
func (r *runner) Eval(ctx context.Context, s *redisscript.Script, keys, args []string) (any, error) {
	return r.run(ctx, s, keys, args)
}

func (r *runner) run(ctx context.Context, s *redisscript.Script, keys, args []string) (any, error) {
	sc := r.scripts[s]
	var cmd *redis.Cmd
	if s.ReadOnly {
		cmd = sc.RunRO(ctx, r.c, keys, toAny(args)...)
	} else {
		cmd = sc.Run(ctx, r.c, keys, toAny(args)...)
	}
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		reloadOnConnectionError(r.c, err)
	}
	return normalize(v), err
}

func normalize(v any) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
		return x
	case []byte:
		return string(x)
	}
	return v
}

func (r *runner) Do(ctx context.Context, args ...string) (any, error) {
	if r.direct(ctx) {
		return r.do(ctx, args...)
	}
	return bounded(r, ctx, func() (any, error) { return r.do(ctx, args...) })
}

func (r *runner) do(ctx context.Context, args ...string) (any, error) {
	v, err := r.c.Do(ctx, toAny(args)...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return normalize(v), err
}

func (r *runner) Listen(ctx context.Context, channel string, subscribed func(), message func(string)) error {
	ps := r.c.Subscribe(ctx)
	defer ps.Close()
	// Receive does not watch ctx while it waits for a message; closing the
	// PubSub ends the wait.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			ps.Close()
		case <-done:
		}
	}()
	if err := ps.Subscribe(ctx, channel); err != nil {
		return err
	}
	for {
		m, err := ps.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The caller subscribes again with backoff.
			return err
		}
		switch m := m.(type) {
		case *redis.Subscription:
			subscribed()
		case *redis.Message:
			message(m.Payload)
		}
	}
}

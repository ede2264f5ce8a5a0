// Package valkeystore is a jobkit store on Valkey (or Redis), through
// github.com/valkey-io/valkey-go.
//
//	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"localhost:6379"}})
//	st, err := valkeystore.New(client)
//	...
//	mgr, err := job.NewManager(job.WithStore(st))
//
// It runs the very Lua scripts package redisstore runs
// (store/internal/redisscript), on the same key layout, so the two plugins
// behave alike and can even share a namespace: every queue operation is
// one atomic script, O(log n) in queue depth; claims follow priority, then
// the order instances became ready; leases expire and are rescued; a late
// finish is rejected; new work wakes idle managers in other processes
// through pub/sub. All keys of a namespace share one hash tag, so Valkey
// Cluster works; NewPartitioned splits a namespace over many hash tags,
// to spread it over a cluster's primaries (see doc/redis-cluster.md).
//
// Valkey is not packaged for the Debian release jobkit's CI runs on, so
// this package's tests run against redis-server 7, which speaks the same
// protocol and Lua API the scripts use (Functions and FCALL, EVALSHA on
// servers without them, cmsgpack, streams with explicit millisecond IDs).
//
// Every call is bounded by its ctx (valkey-go returns at the ctx's end);
// a call cut short may still have been applied, which the engine's
// repeats are made safe for (see package redisstore). At maxmemory Redis
// and Valkey refuse the writing scripts as a whole and the store returns
// an error wrapping store.ErrFull. Valkey 7.2 (or Redis 7) or later.
//
// An Enqueue that ends after its script was sent and before its reply
// came (the ctx's deadline, a broken connection, a frozen server) may
// have stored its instances: its error wraps store.ErrOutcomeUnknown as
// well as the cause, and ScheduleJob's names WithIdempotencyKey as the
// safe retry. Errors that certainly changed nothing do not: a ctx that
// had ended before the call, an error reply of the server (OOM,
// WRONGTYPE, a script error), a client that is closed or closing or could not
// connect. A ctx that ends while the client waits for a connection counts
// as unknown, as the client does not say whether the command went out.
//
// Connections: a script call made while none other of the store's is in
// flight runs on a connection of the client's pool of dedicated
// connections (the one blocking commands use), written and read in the
// caller's goroutine; concurrent calls share the client's pipelined
// connection. valkey-go's pipelined connection, once it has served
// concurrent callers, hands every command to a writer and a reader
// goroutine for good, which nearly doubled a lone ScheduleJob's latency.
// A call whose ctx can be canceled but has no deadline goes on the
// pipelined connection, the only one on which valkey-go returns when such
// a ctx ends; so does a lone call after a second without one on the
// dedicated path (the pool is first checked with a PING in the
// background, so that no call waits for a dial). On a cluster client
// every call takes the pipelined connections. valkey-go dials each of
// its pipelined connections (2 on 2 CPUs, see ClientOption.
// PipelineMultiplex) at its first use and again after it broke, and that
// dial's handshake waits for the server up to the client's
// Dialer.Timeout (5 s by default) whatever the ctx, unless the ctx has an
// earlier deadline: give calls a deadline to bound them on a server that
// stopped answering.
//
// The client belongs to the caller: the store never closes it. New does
// no I/O. valkey.NewClient, though, dials at once and fails when the
// server is down; a process that may start before its server either
// retries NewClient or sets ClientOption.ForceSingleClient, with which
// NewClient also returns a client that connects once the server is up
// (tested in scripttest's ManagerStartedBeforeServer).
package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// Store is a store.Store and store.Notifier on Valkey. Its methods are
// those of the embedded Core; see package store for their contracts.
type Store struct {
	*redisscript.Core
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
func New(client valkey.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: valkeystore.New: nil client; pass a client from valkey.NewClient", store.ErrInvalid)
	}
	o := redisscript.Apply(opts)
	r := &runner{c: client, scripts: make(map[*redisscript.Script]*valkey.Lua, len(redisscript.All)),
		lone: client.Mode() == valkey.ClientModeStandalone}
	r.laneDo = r.doLane
	for _, s := range redisscript.All {
		if s.ReadOnly {
			r.scripts[s] = valkey.NewLuaScriptReadOnly(s.Source)
		} else {
			r.scripts[s] = valkey.NewLuaScript(s.Source)
		}
	}
	r.fn = redisscript.NewFunctions(r)
	core, err := redisscript.NewCore(r, o.Namespace, "valkeystore")
	if err != nil {
		return nil, fmt.Errorf("valkeystore.New: %w", err)
	}
	if err := core.SetReplicaAcks(o); err != nil {
		return nil, fmt.Errorf("valkeystore.New: %w", err)
	}
	return &Store{Core: core}, nil
}

// runner runs the shared scripts with valkey-go.
type runner struct {
	c       valkey.Client
	scripts map[*redisscript.Script]*valkey.Lua
	fn      *redisscript.Functions
	// lone: a script call made while no other of this store's is in
	// flight goes on a connection of the client's dedicated pool (see
	// FCall). Only for a standalone client: a cluster's calls are routed
	// by slot.
	lone     bool
	inflight atomic.Int32 // script calls in flight (FCall)
	// laneAt is when a call on a dedicated connection (or the PING of
	// warmLane) last succeeded, in Unix ns; 0 after one failed. Lone
	// calls take the dedicated path only within laneFresh of it: the
	// pool then holds a connection that answered lately, so taking it
	// dials nothing (valkey-go dials a pool connection without the
	// call's ctx, for up to its dial timeout, which a frozen server
	// would make the call wait out).
	laneAt  atomic.Int64
	warming atomic.Bool // a warmLane is under way
	// lane is the call on the dedicated path (one at a time: the only
	// call in flight), laneDo the method value that makes it, kept so
	// that a call allocates no closure.
	lane   laneCall
	laneDo func(valkey.DedicatedClient) error
}

// laneCall is a call on a dedicated connection: its ctx and command, and
// then its result.
type laneCall struct {
	ctx context.Context
	cmd valkey.Completed
	res valkey.ValkeyResult
}

func (r *runner) doLane(dc valkey.DedicatedClient) error {
	r.lane.res = dc.Do(r.lane.ctx, r.lane.cmd)
	return nil
}

// laneFresh: how long after a dedicated connection answered lone calls
// may count on the pool holding a live one. valkey-go PINGs an idle
// pooled connection every Dialer.KeepAlive (1 s by default) and closes
// it when the PING fails (after ConnWriteTimeout): within 1 s of an
// answer it has not.
const laneFresh = time.Second

// Run calls s as a function of redisscript.Library (FCALL), loading the
// library when the server lacks it, or on a server without Functions
// runs it with EVALSHA (see redisscript.Functions).
func (r *runner) Run(ctx context.Context, s *redisscript.Script, keys, args []string) (any, error) {
	return r.fn.Run(ctx, s, keys, args)
}

// Unapplied implements redisscript.Unapplied: a reply of the server, or
// a client that is closing or could not connect, changed nothing.
func (r *runner) Unapplied(err error) bool {
	var reply *valkey.ValkeyError
	return errors.As(err, &reply) || errors.Is(err, valkey.ErrClosing)
}

// FCall implements redisscript.FunctionClient.
func (r *runner) FCall(ctx context.Context, fn string, ro bool, keys, args []string) (any, error) {
	var cmd valkey.Completed
	if ro {
		cmd = r.c.B().FcallRo().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	} else {
		cmd = r.c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	var res valkey.ValkeyResult
	lone := r.inflight.Add(1) == 1 && r.lone && syncable(ctx)
	var now int64
	if lone {
		now = time.Now().UnixNano()
	}
	if lone && now-r.laneAt.Load() < int64(laneFresh) {
		// Alone: on a connection nobody else writes to at the same
		// time, which valkey-go then writes and reads in this goroutine.
		// Its shared connection, once it has served concurrent callers
		// (this store's or anyone's on the client), passes every command
		// to a writer and a reader goroutine for good: two goroutine
		// hand-offs a call, which nearly doubled a lone ScheduleJob's
		// latency (issue 39). Concurrent calls still share the pipelined
		// connection.
		r.lane = laneCall{ctx: ctx, cmd: cmd}
		_ = r.c.Dedicated(r.laneDo)
		res, r.lane = r.lane.res, laneCall{}
		if res.NonValkeyError() == nil {
			r.laneAt.Store(now)
		} else {
			r.laneAt.Store(0)
		}
	} else {
		res = r.c.Do(ctx, cmd)
		if lone && res.NonValkeyError() == nil {
			r.warmLane()
		}
	}
	r.inflight.Add(-1)
	m, err := res.ToMessage()
	if err != nil {
		if valkey.IsValkeyNil(err) {
			return nil, nil
		}
		return nil, err
	}
	return normalize(&m)
}

// warmLane makes sure, in the background, that the client's dedicated
// pool holds a connection that answers, and opens the dedicated path to
// lone calls for laneFresh: a PING on a dedicated connection, dialing
// one if the pool has none (the dial, bounded by the client's dial
// timeout, is no caller's wait).
func (r *runner) warmLane() {
	if !r.warming.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.warming.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := r.c.Dedicated(func(dc valkey.DedicatedClient) error {
			return dc.Do(ctx, dc.B().Ping().Build()).Error()
		})
		if err == nil {
			r.laneAt.Store(time.Now().UnixNano())
		}
	}()
}

// syncable reports whether valkey-go keeps a call under ctx to its own
// goroutine on a connection with no other caller: ctx never ends, or it
// has a deadline (set as the connection's). A ctx that can be canceled
// but has no deadline is watched only on the pipelined connection, so
// such a call goes there to return when the ctx ends.
func syncable(ctx context.Context) bool {
	if ctx.Done() == nil {
		return true
	}
	_, ok := ctx.Deadline()
	return ok
}

// FunctionLoad implements redisscript.FunctionClient: on every node the
// client knows (a replica of a cluster refuses it, and has it from its
// primary).
func (r *runner) FunctionLoad(ctx context.Context, lib redisscript.LibraryInfo) error {
	nodes := r.c.Nodes()
	var firstErr error
	loaded := false
	for _, n := range nodes {
		err := n.Do(ctx, n.B().FunctionLoad().Replace().FunctionCode(lib.Source).Build()).Error()
		switch {
		case err == nil:
			loaded = true
		case strings.HasPrefix(err.Error(), "READONLY"):
		case firstErr == nil:
			firstErr = err
		}
	}
	if firstErr != nil || !loaded {
		if firstErr == nil {
			firstErr = fmt.Errorf("valkeystore: no primary took the Functions library %s", lib.Name)
		}
		return firstErr
	}
	return nil
}

// Eval implements redisscript.FunctionClient: EVALSHA, and EVAL on
// NOSCRIPT (valkey-go's Lua.Exec).
func (r *runner) Eval(ctx context.Context, s *redisscript.Script, keys, args []string) (any, error) {
	m, err := r.scripts[s].Exec(ctx, r.c, keys, args).ToMessage()
	if err != nil {
		if valkey.IsValkeyNil(err) {
			return nil, nil
		}
		return nil, err
	}
	return normalize(&m)
}

func normalize(m *valkey.ValkeyMessage) (any, error) {
	if err := m.Error(); err != nil {
		if valkey.IsValkeyNil(err) {
			return nil, nil
		}
		return nil, err
	}
	switch {
	case m.IsArray():
		a, err := m.ToArray()
		if err != nil {
			return nil, err
		}
		out := make([]any, len(a))
		for i := range a {
			if out[i], err = normalize(&a[i]); err != nil {
				return nil, err
			}
		}
		return out, nil
	case m.IsInt64():
		return m.AsInt64()
	case m.IsNil():
		return nil, nil
	}
	return m.ToString()
}

func (r *runner) Do(ctx context.Context, args ...string) (any, error) {
	cmd := r.c.B().Arbitrary(args[0]).Keys(args[1]).Args(args[2:]...).Build()
	m, err := r.c.Do(ctx, cmd).ToMessage()
	if err != nil {
		if valkey.IsValkeyNil(err) {
			return nil, nil
		}
		return nil, err
	}
	return normalize(&m)
}

// Listen subscribes on a dedicated connection; its hooks report the
// subscription and the messages, and its error channel a broken
// connection.
func (r *runner) Listen(ctx context.Context, channel string, subscribed func(), message func(string)) error {
	dc, release := r.c.Dedicate()
	defer release()
	wait := dc.SetPubSubHooks(valkey.PubSubHooks{
		OnMessage: func(m valkey.PubSubMessage) { message(m.Message) },
		OnSubscription: func(s valkey.PubSubSubscription) {
			if s.Kind == "subscribe" {
				subscribed()
			}
		},
	})
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(channel).Build()).Error(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		// Leave the connection as we found it before handing it back.
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		dc.Do(uctx, dc.B().Unsubscribe().Channel(channel).Build())
		return ctx.Err()
	case err := <-wait:
		return err
	}
}

// Package remote makes an ordinary jobkit Manager a remote executor: a
// worker in your service that reaches its namespace's store through jobd,
// over one bidirectional stream per process, instead of holding a store
// client of its own.
//
//	st, err := remote.Dial(ctx, remote.Options{
//		Address: "http://jobd.internal:8080", Token: secret, Namespace: "prod",
//	})
//	mgr, err := job.NewManager(job.WithStore(st), job.WithLabels("gpu"), job.WithWorkers(4))
//	err = mgr.RegisterJob(render)      // as always
//	err = mgr.Start(ctx)
//
// The Store that Dial returns implements store.Store, so everything the
// engine does (retries, timeouts, cancel, logs, history, handlers, fencing)
// is the same engine doing the same thing. What differs is the way there:
//
//   - The session stream (ExecutorService.Connect) carries what names the
//     worker's node: claims, lease renewals, outcomes, heartbeats, logs and
//     progress. jobd claims from its store on the worker's behalf (owner:
//     the worker's node; kinds and labels: those the engine's claims carry)
//     and pushes tasks while the worker has credit (free slots); the
//     engine's Claim takes them from the buffer, so an idle worker starts a
//     task one network hop after jobd's store saw it.
//   - Every other call of the contract is a unary call (ExecutorService.Call)
//     or, for the event feed, a server stream (ExecutorService.Follow).
//
// Errors keep their sentinels across the network (package wire):
// errors.Is(err, store.ErrNotFound) holds as against a local store.
//
// An Enqueue whose call reached jobd, or may have, and got no answer (the
// ctx ended, the connection broke) wraps store.ErrOutcomeUnknown as well
// as the cause, as does one whose store at jobd said so; one that never
// connected, or that jobd answered otherwise, does not.
//
// When the stream breaks, the Store reconnects with full-jitter backoff
// (Options.MinBackoff..MaxBackoff), says hello again with the attempts it
// holds, and calls made meanwhile wait for the new stream up to
// Options.ReconnectWait. A worker that comes back within the cluster's
// fence window (half its dead threshold, job.WithHeartbeat) resumes its
// running attempts: their leases are still its own. One that does not is
// fenced by its own engine (its heartbeats fail), which cancels its
// running attempts, while jobd, which stopped heartbeating the worker's
// node when the stream broke, lets the store's rescue run them elsewhere.
package remote

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/api/internal/transport"
	"github.com/jobkit/job/api/remote/wire"
	"github.com/jobkit/job/store"
)

// NamespaceHeader is the request header naming the namespace.
const NamespaceHeader = transport.NamespaceHeader

// ErrDisconnected: the session stream to jobd is down and did not come
// back within Options.ReconnectWait. The call's outcome is unknown to the
// worker (it may have been applied); the engine treats it like a lost
// reply from a store.
var ErrDisconnected = errors.New("remote: not connected to jobd")

// ErrRefused: jobd refused the session (a wrong token, a token for another
// namespace or role, an unknown namespace). Dial returns it at once
// instead of retrying.
var ErrRefused = errors.New("remote: jobd refused the session")

// Options configures Dial.
type Options struct {
	// Address is jobd's base URL: "http://host:port" (HTTP/2 without TLS)
	// or "https://host:port". Required. Several jobd of one cluster may
	// be given, comma-separated: the Store connects to the first that
	// answers and, when its session breaks, to the next in turn.
	Address string
	// Token is the bearer token (role worker, or admin) for Namespace;
	// empty when jobd runs without authentication.
	Token string
	// Namespace is the namespace to work in; empty means jobd's default.
	Namespace string
	// NodeID is the worker's node ID, as job.WithNodeID sets it. Empty:
	// the Store learns it from the engine's first heartbeat or claim.
	NodeID string
	// Kinds are announced in the hello; the engine's claims name the kinds
	// it runs anyway. Optional.
	Kinds []string
	// Jobs are announced in the hello with their executors' signatures
	// (job.Job.Signature): jobd refuses the session (Dial fails with
	// ErrRefused) when another connected worker of the namespace runs one
	// of these kinds with another signature. Optional.
	Jobs []*job.Job
	// Labels are announced in the hello; set the worker's labels with
	// job.WithLabels, which its claims carry. Optional.
	Labels []string
	// Slots are announced in the hello (the engine's heartbeats report
	// its worker count anyway). Optional.
	Slots int
	// TLSConfig is used for an https:// Address; nil means the system's.
	TLSConfig *tls.Config
	// HTTPClient replaces the client the package builds (it must speak
	// HTTP/2: h2c for http://). TLSConfig does not apply to it.
	HTTPClient connect.HTTPClient
	// MinBackoff and MaxBackoff bound the full-jitter backoff between
	// reconnection attempts. Default to 50ms and 2s.
	MinBackoff, MaxBackoff time.Duration
	// ReconnectWait bounds how long a call waits for a session while the
	// stream is down before it fails with ErrDisconnected. Defaults to 1s.
	ReconnectWait time.Duration
	// Logger receives connection events. Defaults to slog.Default().
	Logger *slog.Logger
	// NoPush turns pushing off: jobd claims only when the engine calls
	// Claim (one round trip per claim) and forwards the store's wake-ups
	// instead. For the store contract suite, and for callers that claim
	// for many owners through one Store; a worker wants the default.
	NoPush bool
}

// Store is a store.Store whose every call goes to jobd. It is safe for
// concurrent use. Close ends the session.
type Store struct {
	opts    Options
	addrs   []string
	clients []jobkitv1connect.ExecutorServiceClient
	// cur is the index of the jobd in use (addrs, clients).
	cur    atomic.Int32
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	nextID atomic.Uint64
	// enqueueAlwaysAtomic: jobd answered that its store writes every
	// Enqueue atomically (workflow.go).
	enqueueAlwaysAtomic atomic.Bool

	mu sync.Mutex
	// sess is the live session, nil while disconnected; connected is
	// closed (and replaced) whenever a session comes up.
	sess      *session
	connected chan struct{}
	node      string
	kinds     []string
	labels    []string
	slots     int
	// held are the attempts the worker holds (claimed, not finished).
	held map[store.LeaseRef]struct{}
	// buffer holds pushed tasks per queue, not yet taken by a Claim.
	buffer map[string][]*store.Instance
	// subs are the engine's wake-up subscriptions per queue.
	subs map[string]map[chan struct{}]struct{}
	// sessions counts the sessions opened (1 after Dial).
	sessions int
	// cancelSubs are the SubscribeCancels channels (cancels.go).
	cancelSubs map[chan store.LeaseRef]struct{}
}

// session is one live Connect stream.
type session struct {
	stream *connect.BidiStreamForClient[jobkitv1.ConnectRequest, jobkitv1.ConnectResponse]
	sendMu sync.Mutex
	// pending are the calls waiting for their reply, by id.
	pendingMu sync.Mutex
	pending   map[uint64]chan *jobkitv1.StoreReply
	done      chan struct{}
	id        string
	server    string
	// acks are sent by a goroutine of their own (see receiveTasks).
	acks chan *jobkitv1.ConnectRequest
	// msgpack: jobd chose wire.Msgpack or wire.MsgpackKeyed for the
	// session's calls; keyed: wire.MsgpackKeyed (which also means jobd
	// expects no acks of pushed tasks).
	msgpack, keyed bool
	// pushed: jobd pushed tasks on this session, so it holds credit for
	// the worker's claims (see Store.Claim).
	pushed atomic.Bool
	// credits are, per queue, what jobd may still push by the last Credit
	// sent on this session, less what it pushed since (guarded by
	// Store.mu).
	credits map[string]*sentCredit
}

// Dial connects to jobd and returns the Store once jobd has welcomed the
// session. It fails at once with ErrRefused when jobd refuses the session
// (wrong token, namespace), and otherwise keeps trying until ctx ends. The
// Store keeps reconnecting in the background until Close.
func Dial(ctx context.Context, o Options) (*Store, error) {
	var addrs []string
	scheme := ""
	for _, a := range strings.Split(o.Address, ",") {
		a = strings.TrimSuffix(strings.TrimSpace(a), "/")
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("remote: Address %q: want http://host:port or https://host:port of jobd (several comma-separated)", a)
		}
		if scheme != "" && u.Scheme != scheme {
			return nil, fmt.Errorf("remote: Address %q mixes http and https; use one scheme", o.Address)
		}
		scheme = u.Scheme
		addrs = append(addrs, a)
	}
	if strings.ContainsAny(o.Token, "\r\n") {
		return nil, errors.New("remote: the token contains a line break; trim it (a token file's trailing newline?)")
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 50 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 2 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		return nil, fmt.Errorf("remote: MaxBackoff %v is under MinBackoff %v", o.MaxBackoff, o.MinBackoff)
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = transport.Client(scheme, o.TLSConfig, true)
	}
	hc = transport.WithHeaders(hc, o.Token, o.Namespace)
	s := &Store{
		opts:      o,
		addrs:     addrs,
		log:       o.Logger.With("component", "jobkit-remote", "jobd", o.Address),
		done:      make(chan struct{}),
		connected: make(chan struct{}),
		node:      o.NodeID,
		kinds:     o.Kinds,
		labels:    o.Labels,
		slots:     o.Slots,
		held:      make(map[store.LeaseRef]struct{}),
		buffer:    make(map[string][]*store.Instance),
		subs:      make(map[string]map[chan struct{}]struct{}),
	}
	for _, a := range addrs {
		// No gzip: a session carries many small messages, and compressing
		// each one cost jobd more CPU than any other part of a pushed
		// task (doc/benchmarks-appendix.md, "Issue 21: remote executor speed").
		s.clients = append(s.clients, jobkitv1connect.NewExecutorServiceClient(hc, a, connect.WithGRPC(), connect.WithAcceptCompression("gzip", nil, nil)))
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	first := make(chan error, 1)
	go s.run(first)
	select {
	case err := <-first:
		if err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("remote: dial %s: %w", o.Address, context.Cause(ctx))
	}
}

// Close ends the session and the reconnection loop. Calls in flight fail
// with ErrDisconnected.
func (s *Store) Close() error {
	s.cancel()
	<-s.done
	return nil
}

// Sessions returns how many sessions the Store has opened (1 after Dial;
// one more per reconnection).
func (s *Store) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions
}

// run keeps a session open until Close: connect, hello, read; on a break,
// back off (full jitter) and connect again. The outcome of the first
// attempt that gets an answer goes to first.
func (s *Store) run(first chan<- error) {
	defer close(s.done)
	for try := 0; ; try++ {
		welcomed, err := s.connectOnce(first)
		if s.ctx.Err() != nil {
			return
		}
		if welcomed {
			try = 0 // it had been up: reconnect soon
			first = nil
		} else if first != nil && errors.Is(err, ErrRefused) {
			first <- err
			return
		}
		if err != nil {
			s.log.Warn("session to jobd down; reconnecting", "jobd", s.addrs[s.cur.Load()], "err", err)
			if len(s.addrs) > 1 {
				s.cur.Store((s.cur.Load() + 1) % int32(len(s.addrs)))
			}
		}
		ceil := min(s.opts.MaxBackoff, s.opts.MinBackoff<<min(try, 16))
		t := time.NewTimer(rand.N(ceil + 1)) // full jitter
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return
		}
	}
}

// connectOnce opens one session and serves it until it breaks. welcomed
// reports that jobd welcomed it; the first welcome is also sent to first
// (when not nil) at once.
func (s *Store) connectOnce(first chan<- error) (welcomed bool, _ error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	stream := s.client().Connect(ctx)
	sess := &session{stream: stream, pending: make(map[uint64]chan *jobkitv1.StoreReply), done: make(chan struct{}), acks: make(chan *jobkitv1.ConnectRequest, 1024), credits: make(map[string]*sentCredit)}
	// Ending ctx alone does not end a Receive while the request body is
	// open (the HTTP/2 transport is busy sending it): close it too.
	stop := context.AfterFunc(ctx, func() {
		sess.sendMu.Lock()
		defer sess.sendMu.Unlock()
		_ = stream.CloseRequest()
	})
	defer stop()
	s.mu.Lock()
	hello := &jobkitv1.Hello{NodeId: s.node, Labels: s.labels, Slots: int32(s.slots), PullOnly: s.opts.NoPush, Encodings: []string{wire.MsgpackKeyed, wire.Msgpack}}
	for _, k := range s.kinds {
		hello.Kinds = append(hello.Kinds, &jobkitv1.KindSignature{Kind: k})
	}
	for _, j := range s.opts.Jobs {
		hello.Kinds = append(hello.Kinds, &jobkitv1.KindSignature{Kind: j.Kind(), Fingerprint: j.Signature()})
	}
	for ref := range s.held {
		hello.Held = append(hello.Held, &jobkitv1.LeaseRef{Id: ref.ID, Attempt: int64(ref.Attempt)})
	}
	s.mu.Unlock()
	if err := sess.send(&jobkitv1.ConnectRequest{Msg: &jobkitv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		_, rerr := stream.Receive()
		return false, classify(errors.Join(err, rerr))
	}
	msg, err := stream.Receive()
	if err != nil {
		return false, classify(err)
	}
	w := msg.GetWelcome()
	if w == nil {
		return false, fmt.Errorf("remote: jobd answered the hello with %T, not a welcome", msg.GetMsg())
	}
	sess.id, sess.server = w.GetSessionId(), w.GetServerNodeId()
	sess.keyed = w.GetEncoding() == wire.MsgpackKeyed
	sess.msgpack = sess.keyed || w.GetEncoding() == wire.Msgpack
	s.mu.Lock()
	s.sess = sess
	s.sessions++
	close(s.connected)
	s.connected = make(chan struct{})
	var queues []string
	for q, subs := range s.subs {
		if len(subs) > 0 {
			queues = append(queues, q)
		}
	}
	s.mu.Unlock()
	if s.opts.NoPush {
		// Subscriptions made from now on send their own (jobd ignores a
		// repeated one).
		for _, q := range queues {
			_ = sess.send(subscribeMsg(q))
		}
	}
	s.log.Info("session to jobd up", "session", sess.id, "jobd_node", sess.server)
	if first != nil {
		select {
		case first <- nil:
		default:
		}
	}
	go func() {
		for {
			select {
			case m := <-sess.acks:
				if sess.send(m) != nil {
					return
				}
			case <-sess.done:
				return
			}
		}
	}()
	err = s.read(sess)
	s.mu.Lock()
	s.sess = nil
	s.mu.Unlock()
	close(sess.done)
	sess.sendMu.Lock()
	_ = stream.CloseRequest()
	sess.sendMu.Unlock()
	return true, fmt.Errorf("session %s ended: %w", sess.id, err)
}

// classify marks refusals (which no retry fixes) with ErrRefused.
func classify(err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeNotFound, connect.CodeInvalidArgument, connect.CodeUnimplemented, connect.CodeFailedPrecondition:
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return err
}

// read receives jobd's messages until the stream breaks.
func (s *Store) read(sess *session) error {
	for {
		msg, err := sess.stream.Receive()
		if err != nil {
			return err
		}
		switch m := msg.GetMsg().(type) {
		case *jobkitv1.ConnectResponse_Reply:
			sess.pendingMu.Lock()
			ch := sess.pending[m.Reply.GetId()]
			delete(sess.pending, m.Reply.GetId())
			sess.pendingMu.Unlock()
			if ch != nil {
				ch <- m.Reply
			}
		case *jobkitv1.ConnectResponse_Tasks:
			s.receiveTasks(sess, m.Tasks)
		case *jobkitv1.ConnectResponse_Wake:
			s.mu.Lock()
			s.wakeLocked(m.Wake.GetQueue())
			s.mu.Unlock()
		case *jobkitv1.ConnectResponse_Cancel:
			s.receiveCancel(m.Cancel)
		default:
			s.log.Warn("unexpected message from jobd; ignored", "type", fmt.Sprintf("%T", m))
		}
	}
}

// receiveTasks buffers pushed tasks, acknowledges them and wakes the
// engine's claim loop.
func (s *Store) receiveTasks(sess *session, t *jobkitv1.Tasks) {
	var got []*store.Instance
	if b := t.GetInstancesMsgpack(); len(b) > 0 {
		unmarshal := wire.UnmarshalMsgpack
		if sess.keyed {
			unmarshal = wire.UnmarshalKeyed
		}
		if err := unmarshal(b, &got); err != nil {
			s.log.Error("undecodable tasks from jobd; their leases will lapse and they will be rescued", "err", err)
			got = nil
		}
	}
	for _, b := range t.GetInstancesJson() {
		in := new(store.Instance)
		if err := json.Unmarshal(b, in); err != nil {
			s.log.Error("undecodable task from jobd; its lease will lapse and it will be rescued", "err", err)
			continue
		}
		got = append(got, in)
	}
	got = slices.DeleteFunc(got, func(in *store.Instance) bool { return in == nil })
	sess.pushed.Store(true)
	s.mu.Lock()
	if c := sess.credits[t.GetQueue()]; c != nil {
		c.limit = max(c.limit-len(got), 0)
	}
	for _, in := range got {
		s.held[store.LeaseRef{ID: in.ID, Attempt: in.Attempt}] = struct{}{}
	}
	s.buffer[t.GetQueue()] = append(s.buffer[t.GetQueue()], got...)
	s.wakeLocked(t.GetQueue())
	s.mu.Unlock()
	if sess.keyed {
		// A jobd that speaks MsgpackKeyed reads no acks: they would cost
		// both ends a message per push for nothing.
		return
	}
	ack := &jobkitv1.Ack{}
	for _, in := range got {
		ack.Tasks = append(ack.Tasks, &jobkitv1.LeaseRef{Id: in.ID, Attempt: int64(in.Attempt)})
	}
	// Never send from the read loop: a send blocked on a full stream
	// would stop the replies that unblock it from being read. Acks are
	// advisory: one that finds the queue full is dropped.
	select {
	case sess.acks <- &jobkitv1.ConnectRequest{Msg: &jobkitv1.ConnectRequest_Ack{Ack: ack}}:
	default:
	}
}

// wakeLocked wakes the subscribers of queue q. Called with s.mu held.
func (s *Store) wakeLocked(q string) {
	for ch := range s.subs[q] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// subscribeMsg asks jobd for the wake-ups of queue q.
func subscribeMsg(q string) *jobkitv1.ConnectRequest {
	return &jobkitv1.ConnectRequest{Msg: &jobkitv1.ConnectRequest_Subscribe{Subscribe: &jobkitv1.Subscribe{Queue: q}}}
}

// client returns the client of the jobd in use.
func (s *Store) client() jobkitv1connect.ExecutorServiceClient {
	return s.clients[s.cur.Load()]
}

// send sends one message on the session.
func (sess *session) send(m *jobkitv1.ConnectRequest) error {
	sess.sendMu.Lock()
	defer sess.sendMu.Unlock()
	return sess.stream.Send(m)
}

// current returns the live session, waiting for one up to
// Options.ReconnectWait (or ctx).
func (s *Store) current(ctx context.Context) (*session, error) {
	var timer <-chan time.Time
	for {
		s.mu.Lock()
		sess, wait := s.sess, s.connected
		s.mu.Unlock()
		if sess != nil {
			return sess, nil
		}
		if timer == nil {
			t := time.NewTimer(s.opts.ReconnectWait)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-wait:
		case <-timer:
			return nil, fmt.Errorf("%w (%s) for %v", ErrDisconnected, s.opts.Address, s.opts.ReconnectWait)
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-s.ctx.Done():
			return nil, fmt.Errorf("%w: the store is closed", ErrDisconnected)
		}
	}
}

// sessionCall makes one store call on the session stream and decodes its
// result into out (when not nil).
func (s *Store) sessionCall(ctx context.Context, method string, params, out any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remote: %s: %w", method, context.Cause(ctx))
	}
	sess, err := s.current(ctx)
	if err != nil {
		return err
	}
	call := &jobkitv1.StoreCall{Method: method}
	if sess.msgpack {
		marshal := wire.MarshalMsgpack
		if sess.keyed {
			marshal = wire.MarshalKeyed
		}
		if call.ParamsMsgpack, err = marshal(params); err != nil {
			return fmt.Errorf("%w: %s: encode the parameters: %v", store.ErrInvalid, method, err)
		}
	} else if call.ParamsJson, err = encodeParams(method, params); err != nil {
		return err
	}
	id := s.nextID.Add(1)
	call.Id = id
	ch := make(chan *jobkitv1.StoreReply, 1)
	sess.pendingMu.Lock()
	sess.pending[id] = ch
	sess.pendingMu.Unlock()
	defer func() {
		sess.pendingMu.Lock()
		delete(sess.pending, id)
		sess.pendingMu.Unlock()
	}()
	if err := sess.send(&jobkitv1.ConnectRequest{Msg: &jobkitv1.ConnectRequest_Call{Call: call}}); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDisconnected, method, err)
	}
	select {
	case r := <-ch:
		return decodeReplyIn(method, r, out, sess.keyed)
	case <-sess.done:
		return fmt.Errorf("%w: the session ended before jobd answered %s", ErrDisconnected, method)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// unaryCall makes one store call with ExecutorService.Call.
func (s *Store) unaryCall(ctx context.Context, method string, params, out any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remote: %s: %w", method, context.Cause(ctx))
	}
	b, err := encodeParams(method, params)
	if err != nil {
		return err
	}
	res, err := s.client().Call(ctx, connect.NewRequest(&jobkitv1.CallRequest{Call: &jobkitv1.StoreCall{Method: method, ParamsJson: b}}))
	if err != nil {
		if method == "Enqueue" && unanswered(err) {
			// jobd may have applied it (issue 39).
			return store.OutcomeUnknown(connectError(method, err))
		}
		return connectError(method, err)
	}
	return decodeReply(method, res.Msg.GetReply(), out)
}

// unanswered reports whether a unary call that failed with err may have
// reached jobd and been applied there: its ctx ended or the connection
// broke after the request may have gone out, with no answer from jobd.
// A connection that was never made (refused, no route) and any answer of
// jobd (a refusal, an unknown method) are not. A ctx that ends while the
// client is still connecting counts as unanswered, as the HTTP client
// does not say how far it got.
func unanswered(err error) bool {
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var ce *connect.Error
	if errors.As(err, &ce) && len(ce.Meta()) > 0 {
		return false // jobd's own answer
	}
	switch connect.CodeOf(err) {
	case connect.CodeCanceled, connect.CodeDeadlineExceeded, connect.CodeUnavailable, connect.CodeUnknown:
		return true
	}
	return false
}

// connectError turns an error of a unary call into a store error: a call
// refused for bad parameters wraps store.ErrInvalid, one that never
// reached jobd's store ErrDisconnected.
func connectError(method string, err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument:
		return fmt.Errorf("%w: %s: %v", store.ErrInvalid, method, err)
	case connect.CodeCanceled:
		return fmt.Errorf("remote: %s: %w", method, context.Canceled)
	case connect.CodeDeadlineExceeded:
		return fmt.Errorf("remote: %s: %w", method, context.DeadlineExceeded)
	}
	return fmt.Errorf("%w: %s: %v", ErrDisconnected, method, err)
}

// decodeReply decodes a reply's result into out and returns its error.
func decodeReply(method string, r *jobkitv1.StoreReply, out any) error {
	return decodeReplyIn(method, r, out, false)
}

// decodeReplyIn is decodeReply for a session whose encoding is
// wire.MsgpackKeyed when keyed is set.
func decodeReplyIn(method string, r *jobkitv1.StoreReply, out any, keyed bool) error {
	if r == nil {
		return fmt.Errorf("remote: %s: empty reply from jobd", method)
	}
	if out != nil && len(r.GetResultMsgpack()) > 0 {
		unmarshal := wire.UnmarshalMsgpack
		if keyed {
			unmarshal = wire.UnmarshalKeyed
		}
		if err := unmarshal(r.GetResultMsgpack(), out); err != nil {
			return fmt.Errorf("%w: %s: undecodable result from jobd: %v", store.ErrCorrupt, method, err)
		}
	} else if out != nil && len(r.GetResultJson()) > 0 {
		if err := json.Unmarshal(r.GetResultJson(), out); err != nil {
			return fmt.Errorf("%w: %s: undecodable result from jobd: %v", store.ErrCorrupt, method, err)
		}
	}
	return wire.DecodeError(r.GetError())
}

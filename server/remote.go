package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/remote/wire"
	"github.com/jobkit/job/store"
)

// Remote executors (issue 21): ExecutorService. See doc/design.md,
// "Remote executors", for the protocol.

// sessionMethods are the store methods a worker calls on its session
// stream; Call refuses them.
var sessionMethods = map[string]bool{
	wire.MethodClaim: true, wire.MethodRenew: true, wire.MethodFinish: true,
	wire.MethodHeartbeat: true, wire.MethodRescue: true, wire.MethodRescueNodes: true,
	wire.MethodAppendLogs: true, wire.MethodSetProgress: true,
}

// maxSessionCalls bounds the calls of one session that jobd applies at
// once; further calls wait (the stream stops being read), which is the
// back-pressure a worker that never reads its replies meets.
const maxSessionCalls = 64

// errSessionClosed: a send after the session's handler returned.
var errSessionClosed = errors.New("session closed")

// executorService implements jobkit.v1.ExecutorService.
type executorService struct{ s *Server }

// namespaceKey is the context key of the call's namespace name.
type namespaceKey struct{}

// storeOf returns the store of the call's namespace, or an Unimplemented
// error when the server serves no remote executors there.
func (s *Server) storeOf(ctx context.Context) (string, store.Store, error) {
	ns, _ := ctx.Value(namespaceKey{}).(string)
	st := s.cfg.ExecutorStores[ns]
	if st == nil {
		return ns, nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("this server serves no remote executors in namespace %q (jobd serves them in every namespace; a server.Server needs Config.ExecutorStores)", ns))
	}
	return ns, st, nil
}

// Call implements ExecutorService.Call: one store call that is not part
// of a session.
func (e executorService) Call(ctx context.Context, req *connect.Request[pb.CallRequest]) (*connect.Response[pb.CallResponse], error) {
	_, st, err := e.s.storeOf(ctx)
	if err != nil {
		return nil, err
	}
	c := req.Msg.GetCall()
	if sessionMethods[c.GetMethod()] {
		return nil, invalid(fmt.Sprintf("%s is a session call: send it on the ExecutorService.Connect stream of the worker", c.GetMethod()))
	}
	p, err := wire.Decode(c.GetMethod(), c.GetParamsJson())
	if err != nil {
		return nil, invalid(err.Error())
	}
	res, err := wire.Apply(ctx, st, c.GetMethod(), p)
	return connect.NewResponse(&pb.CallResponse{Reply: reply(0, res, err)}), nil
}

// reply encodes a store call's result (in JSON) and error.
func reply(id uint64, res any, err error) *pb.StoreReply {
	return replyIn(id, res, err, false, "")
}

// sessionEncodings are the session encodings jobd speaks besides JSON,
// most preferred first.
var sessionEncodings = []string{wire.MsgpackKeyed, wire.Msgpack}

// chooseEncoding returns the first of the server's encodings that the
// worker offers, or "" (JSON).
func (s *Server) chooseEncoding(offered []string) string {
	s.sessMu.Lock()
	ours := s.encodings
	s.sessMu.Unlock()
	if ours == nil {
		ours = sessionEncodings
	}
	for _, e := range ours {
		if slices.Contains(offered, e) {
			return e
		}
	}
	return ""
}

// setEncodings narrows the server's session encodings to encodings (nil:
// all it knows), for tests that play an older jobd.
func (s *Server) setEncodings(encodings []string) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	s.encodings = encodings
}

// replyIn encodes a store call's result, in the session's binary encoding
// enc when msgpack is set (the call came in it) or JSON, and its error.
func replyIn(id uint64, res any, err error, msgpack bool, enc string) *pb.StoreReply {
	r := &pb.StoreReply{Id: id, Error: wire.EncodeError(err)}
	if res != nil {
		var (
			b    []byte
			merr error
		)
		if msgpack && enc == wire.MsgpackKeyed {
			b, merr = wire.MarshalKeyed(res)
		} else if msgpack {
			b, merr = wire.MarshalMsgpack(res)
		} else {
			b, merr = json.Marshal(res)
		}
		switch {
		case merr != nil:
			r.Error = wire.EncodeError(errors.Join(err, fmt.Errorf("jobd: encode the result: %w", merr)))
		case msgpack:
			r.ResultMsgpack = b
		default:
			r.ResultJson = b
		}
	}
	return r
}

// credit is what a worker may still be pushed from one queue.
type credit struct {
	limit  int
	kinds  []string
	labels []string
	lease  time.Duration
	// offset is the worker's clock minus jobd's, as its last claim showed.
	offset time.Duration
}

// session is one connected worker's state on this jobd.
type session struct {
	id    string
	ns    string
	st    store.Store
	s     *Server
	send  func(*pb.ConnectResponse) error
	start time.Time

	mu sync.Mutex
	// node is the worker's node ID: the owner of the leases it holds.
	node   string
	labels []string
	kinds  []string
	slots  int
	// inflight are the attempts claimed for the worker and not finished.
	inflight map[store.LeaseRef]struct{}
	// peak is the most attempts the worker had in flight at once.
	peak int
	// reserved are slots held by claims under way (theirs until they
	// return), so two claims at once never exceed the slots together.
	reserved int
	credits  map[string]*credit
	// wake wakes the pusher.
	wake chan struct{}
	// subscribed are the queues whose store wake-ups the pusher follows.
	subscribed map[string]bool
	// signatures are the executor signatures the hello announced, by kind
	// (guarded by Server.sessMu).
	signatures map[string]string
	// pullOnly: the worker claims itself, jobd pushes nothing (Hello).
	pullOnly bool
	// leaving: the worker's last heartbeat said it stops; nothing more
	// is pushed until it heartbeats as running again.
	leaving bool
	// engine: the session's node heartbeats through it, so an engine
	// consumes what is pushed. A handle that only claims (a tool, a test
	// using the store directly) gets no credit: nothing is pushed to it
	// that no engine would take.
	engine bool
	// ctx ends with the session.
	ctx context.Context
	// pushMu is held by the pusher while it claims and sends.
	pushMu sync.Mutex
	// wakes are the queues whose store wake-ups go to a pull-only worker.
	wakes map[string]bool
	// received and sent count the session's stream messages.
	received, sent atomic.Int64
	// encoding is the session's binary encoding (wire.MsgpackKeyed or
	// wire.Msgpack, which the worker said it reads), "" for JSON: tasks
	// are pushed in it, and calls made in it are answered in it.
	encoding string
	// pushBuf is the pusher's buffer for encoding tasks (under pushMu).
	pushBuf []byte
}

// forwardWakes forwards the store's wake-ups of queue q to the worker as
// Wake messages until the session ends (once per queue).
func (x *session) forwardWakes(ctx context.Context, q string) error {
	n, ok := x.st.(store.Notifier)
	x.mu.Lock()
	dup := x.wakes[q]
	x.wakes[q] = true
	x.mu.Unlock()
	if !ok || dup {
		return nil
	}
	ch, err := n.Subscribe(ctx, q)
	if err != nil {
		x.mu.Lock()
		delete(x.wakes, q)
		x.mu.Unlock()
		x.s.cfg.Logger.Warn("jobkit server: subscribe to a queue's wake-ups for a remote worker", "session", x.id, "queue", q, "err", err)
		return err
	}
	go func() {
		for range ch {
			if x.send(&pb.ConnectResponse{Msg: &pb.ConnectResponse_Wake{Wake: &pb.Wake{Queue: q}}}) != nil {
				return
			}
		}
	}()
	return nil
}

// SessionInfo describes one connected worker session (for tests and
// operators).
type SessionInfo struct {
	ID        string
	Namespace string
	Node      string
	Labels    []string
	Kinds     []string
	Slots     int
	// InFlight is how many of the worker's attempts are claimed and not
	// finished; PeakInFlight the most there ever were at once.
	InFlight, PeakInFlight int
	Since                  time.Time
	// Received and Sent count the stream messages of the session so far
	// (the hello and welcome included): with the tasks it ran, what one
	// task costs on the wire.
	Received, Sent int64
}

// Sessions lists the remote workers connected to this server.
func (s *Server) Sessions() []SessionInfo {
	s.sessMu.Lock()
	all := make([]*session, 0, len(s.sessions))
	for _, x := range s.sessions {
		all = append(all, x)
	}
	s.sessMu.Unlock()
	out := make([]SessionInfo, 0, len(all))
	for _, x := range all {
		x.mu.Lock()
		out = append(out, SessionInfo{
			ID: x.id, Namespace: x.ns, Node: x.node, Labels: slices.Clone(x.labels), Kinds: slices.Clone(x.kinds),
			Slots: x.slots, InFlight: len(x.inflight), PeakInFlight: x.peak, Since: x.start,
			Received: x.received.Load(), Sent: x.sent.Load(),
		})
		x.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return a.Since.Compare(b.Since) })
	return out
}

// Connect implements ExecutorService.Connect: one worker's session.
func (e executorService) Connect(ctx context.Context, stream *connect.BidiStream[pb.ConnectRequest, pb.ConnectResponse]) error {
	ns, st, err := e.s.storeOf(ctx)
	if err != nil {
		return err
	}
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	hello, err := checkHello(first)
	if err != nil {
		return err
	}
	var sendMu sync.Mutex
	sendClosed := false
	defer func() {
		sendMu.Lock()
		sendClosed = true
		sendMu.Unlock()
	}()
	x := e.newSession(ns, st, hello)
	x.send = func(m *pb.ConnectResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		if sendClosed {
			return errSessionClosed
		}
		x.sent.Add(1)
		return stream.Send(m)
	}
	x.received.Add(1) // the hello
	if err := e.s.register(x, hello.GetKinds()); err != nil {
		return err
	}
	defer e.s.unregister(x)
	log := e.s.cfg.Logger.With("session", x.id, "namespace", ns, "worker_node", x.node)
	log.Info("jobkit server: remote worker connected", "labels", x.labels, "slots", x.slots, "held", len(x.inflight))
	defer func() {
		log.Info("jobkit server: remote worker disconnected", "peak_in_flight", x.peak)
	}()
	server := ""
	if m, ok := ctx.Value(managerKey{}).(interface{ NodeID() string }); ok && m != nil {
		server = m.NodeID()
	}
	welcome := &pb.Welcome{SessionId: x.id, ServerNodeId: server, Encoding: x.encoding}
	if err := x.send(&pb.ConnectResponse{Msg: &pb.ConnectResponse_Welcome{Welcome: welcome}}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	x.ctx = ctx
	var wg sync.WaitGroup
	defer func() {
		cancel() // ends the pusher and the calls under way
		wg.Wait()
	}()
	wg.Go(func() { x.push(ctx) })
	calls := make(chan struct{}, maxSessionCalls)
	for {
		msg, err := stream.Receive()
		if err != nil {
			return streamEnd(ctx, err)
		}
		x.received.Add(1)
		switch m := msg.GetMsg().(type) {
		case *pb.ConnectRequest_Call:
			select {
			case calls <- struct{}{}:
			case <-ctx.Done():
				return nil
			case <-e.s.drained:
				return errDraining()
			}
			wg.Go(func() {
				defer func() { <-calls }()
				r := x.call(ctx, m.Call)
				if err := x.send(&pb.ConnectResponse{Msg: &pb.ConnectResponse_Reply{Reply: r}}); err != nil {
					cancel()
				}
			})
		case *pb.ConnectRequest_Credit:
			if err := x.recordCredit(m.Credit); err != nil {
				return err
			}
			x.poke()
		case *pb.ConnectRequest_Subscribe:
			if x.pullOnly {
				// Not in the read loop's way: a subscription can take
				// seconds to confirm.
				q := m.Subscribe.GetQueue()
				wg.Go(func() { _ = x.forwardWakes(ctx, q) })
			}
		case *pb.ConnectRequest_Ack:
			// The worker holds the pushed tasks: nothing to undo.
		case *pb.ConnectRequest_Hello:
			return invalid("a second hello on a session: open a new session to say hello again")
		default:
			return invalid(fmt.Sprintf("unknown session message %T: this jobd may be older than the worker's jobkit", m))
		}
	}
}

// checkHello returns the hello that must open a session, checked.
func checkHello(first *pb.ConnectRequest) (*pb.Hello, error) {
	hello := first.GetHello()
	if hello == nil {
		return nil, invalid(fmt.Sprintf("the first message of a session must be a hello, not %T", first.GetMsg()))
	}
	if err := store.ValidateLabels(hello.GetLabels()); err != nil {
		return nil, invalid("hello: " + err.Error())
	}
	if hello.GetSlots() < 0 {
		return nil, invalid(fmt.Sprintf("hello: slots %d; want 0 (unknown yet) or more", hello.GetSlots()))
	}
	return hello, nil
}

// newSession is the session a hello opens on the store st of namespace
// ns, with the attempts the worker says it holds in flight; its send is
// set by Connect.
func (e executorService) newSession(ns string, st store.Store, hello *pb.Hello) *session {
	var b [8]byte
	_, _ = rand.Read(b[:])
	x := &session{
		id: hex.EncodeToString(b[:]), ns: ns, st: st, s: e.s, start: time.Now(),
		node: hello.GetNodeId(), labels: hello.GetLabels(), slots: int(hello.GetSlots()),
		inflight: make(map[store.LeaseRef]struct{}), credits: make(map[string]*credit),
		wake: make(chan struct{}, 1), subscribed: make(map[string]bool),
		pullOnly: hello.GetPullOnly(), wakes: make(map[string]bool),
		encoding: e.s.chooseEncoding(hello.GetEncodings()),
	}
	for _, k := range hello.GetKinds() {
		x.kinds = append(x.kinds, k.GetKind())
	}
	for _, h := range hello.GetHeld() {
		x.inflight[store.LeaseRef{ID: h.GetId(), Attempt: int(h.GetAttempt())}] = struct{}{}
	}
	x.peak = len(x.inflight)
	return x
}

// streamEnd is what Connect returns when the session's stream ends with
// err: nil when the worker or the server ended it, else err.
func streamEnd(ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) || ctx.Err() != nil || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// recordCredit records a Credit message: how many tasks of its queue
// jobd may push, with what lease, kinds and labels.
func (x *session) recordCredit(c *pb.Credit) error {
	if c.GetLimit() < 0 || c.GetQueue() == "" {
		return invalid(fmt.Sprintf("credit for queue %q with limit %d: name a queue and a limit >= 0", c.GetQueue(), c.GetLimit()))
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	cr := x.credits[c.GetQueue()]
	if cr == nil {
		cr = &credit{lease: 30 * time.Second}
		x.credits[c.GetQueue()] = cr
	}
	cr.limit = int(c.GetLimit())
	if c.GetLeaseMillis() > 0 {
		cr.lease = time.Duration(c.GetLeaseMillis()) * time.Millisecond
	}
	if c.GetKinds() != nil {
		cr.kinds = c.GetKinds()
	}
	if c.GetLabels() != nil {
		cr.labels = c.GetLabels()
	}
	return nil
}

// poke wakes the pusher.
func (x *session) poke() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// call applies one session store call. A call naming an owner other than
// the session's node is applied as it is, outside the session's flow
// control (the contract suite uses many owners on one store handle).
func (x *session) call(ctx context.Context, c *pb.StoreCall) *pb.StoreReply {
	method := c.GetMethod()
	mp := len(c.GetParamsMsgpack()) > 0
	reply := func(id uint64, res any, err error) *pb.StoreReply { return replyIn(id, res, err, mp, x.encoding) }
	if method == wire.MethodSubscribe {
		return reply(c.GetId(), nil, x.subscribe(c, mp))
	}
	p, err := x.decode(method, c, mp)
	if err != nil {
		return reply(c.GetId(), nil, err)
	}
	if !sessionMethods[method] {
		return reply(c.GetId(), nil, fmt.Errorf("%w: %s is not a session call: call it with ExecutorService.Call", store.ErrInvalid, method))
	}
	received := time.Now()
	a := x.admit(p, received)
	if a.none {
		x.poke()
		return reply(c.GetId(), &wire.ClaimResult{}, nil)
	}
	if a.leaving {
		x.dropCredits()
	}
	if a.claim != nil {
		p = a.claim
		if !x.applyLimits(ctx, a.claim) {
			// Every kind it names is held back by a limit its store
			// cannot enforce: nothing to claim.
			x.after(p, a.want, a.reserved, &wire.ClaimResult{}, nil, received)
			return reply(c.GetId(), &wire.ClaimResult{}, nil)
		}
	}
	res, err := wire.Apply(ctx, x.st, method, p)
	x.after(p, a.want, a.reserved, res, err, received)
	return reply(c.GetId(), res, err)
}

// subscribe answers a Subscribe: a pushing session's wake-ups are the
// tasks it pushes; a pull-only one forwards the queue's wake-ups.
func (x *session) subscribe(c *pb.StoreCall, mp bool) error {
	var sp wire.SubscribeParams
	var err error
	if mp {
		err = wire.UnmarshalMsgpack(c.GetParamsMsgpack(), &sp)
	} else {
		err = json.Unmarshal(c.GetParamsJson(), &sp)
	}
	if err != nil || sp.Queue == "" {
		return fmt.Errorf("%w: Subscribe: name a queue", store.ErrInvalid)
	}
	if !x.pullOnly {
		return nil // pushed tasks are the wake-ups
	}
	return x.forwardWakes(x.ctx, sp.Queue)
}

// decode decodes a call's parameters in the session's encoding.
func (x *session) decode(method string, c *pb.StoreCall, mp bool) (any, error) {
	switch {
	case mp && x.encoding == wire.MsgpackKeyed:
		return wire.DecodeKeyed(method, c.GetParamsMsgpack())
	case mp:
		return wire.DecodeMsgpack(method, c.GetParamsMsgpack())
	}
	return wire.Decode(method, c.GetParamsJson())
}

// admission is what the session's flow control decided for a call.
type admission struct {
	claim    *store.ClaimParams // the session node's claim, capped to its free slots
	want     int                // what the worker asked for: its credit
	reserved int                // slots the claim holds until it returns
	none     bool               // no slot free: answer an empty claim
	leaving  bool               // the worker stops: push nothing more
}

// admit passes a claim or heartbeat of the session's node through its
// flow control: a claim is capped to the free slots (and reserves them),
// a heartbeat updates the node's slots, labels, kinds and leaving.
func (x *session) admit(p any, received time.Time) admission {
	var a admission
	x.mu.Lock()
	defer x.mu.Unlock()
	switch p := p.(type) {
	case *store.ClaimParams:
		if p != nil && x.bind(p.Owner) {
			cp := *p
			a.want = p.Limit
			if x.slots > 0 && !x.pullOnly {
				// Flow control: never more in flight than slots. A
				// pull-only session is not capped (the contract suite
				// claims beyond a node's slots; the engine never does).
				// The worker frees a slot before its outcome reaches
				// jobd, so what the cap holds back stays credit: the
				// pusher sends it as outcomes arrive.
				cp.Limit = min(cp.Limit, x.slots-len(x.inflight)-x.reserved)
				if cp.Limit > 0 {
					x.reserved += cp.Limit
					a.reserved = cp.Limit
				}
			}
			if cp.Limit <= 0 {
				if x.engine {
					x.setCredit(p, a.want, received)
				}
				a.none = true
				return a
			}
			a.claim = &cp
		}
	case *store.HeartbeatParams:
		if p != nil && x.bind(p.Node.ID) {
			if p.Node.Workers > 0 {
				x.slots = p.Node.Workers
			}
			x.labels, x.kinds = p.Node.Labels, p.Node.Kinds
			x.leaving = p.Leaving
			x.engine = true
		}
	}
	a.leaving = x.leaving
	return a
}

// dropCredits forgets every credit of a worker that stops. Holding pushMu
// waits for a push under way, so every task pushed precedes the call's
// reply on the stream, and the worker hands back what it did not take.
func (x *session) dropCredits() {
	x.pushMu.Lock()
	x.mu.Lock()
	clear(x.credits)
	x.mu.Unlock()
	x.pushMu.Unlock()
}

// bind binds the session to node on its first call naming one, and
// reports whether node is the session's. Called with x.mu held.
func (x *session) bind(node string) bool {
	if x.node == "" {
		x.node = node
	}
	return node != "" && node == x.node
}

// after updates the session's flow control with a call's outcome.
func (x *session) after(p any, want, reserved int, res any, err error, received time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.reserved -= reserved
	switch p := p.(type) {
	case *store.ClaimParams:
		if p == nil || p.Owner != x.node {
			return
		}
		r, _ := res.(*wire.ClaimResult)
		n := 0
		if r != nil {
			for _, in := range r.Instances {
				x.inflight[store.LeaseRef{ID: in.ID, Attempt: in.Attempt}] = struct{}{}
			}
			for _, u := range r.Undecodable {
				x.inflight[u.LeaseRef] = struct{}{}
			}
			n = len(r.Instances) + len(r.Undecodable)
			x.peak = max(x.peak, len(x.inflight))
		}
		if err != nil || x.pullOnly || !x.engine {
			return
		}
		// What the claim did not fill stays as credit: the pusher
		// sends what becomes ready later.
		if x.setCredit(p, want-n, received) > 0 {
			x.poke()
		}
	case *store.RenewParams:
		if r, _ := res.(*store.RenewResult); r != nil && p != nil && p.Owner == x.node {
			for _, l := range r.Lost {
				delete(x.inflight, l)
			}
		}
	case *store.FinishParams:
		rs, _ := res.([]wire.FinishResult)
		if p == nil || p.Owner != x.node || len(rs) != len(p.Outcomes) {
			return
		}
		for i, o := range p.Outcomes {
			if rs[i].Err == nil || slices.Contains(rs[i].Err.Sentinels, "lease_lost") {
				delete(x.inflight, store.LeaseRef{ID: o.ID, Attempt: o.Attempt})
			}
		}
		x.poke()
	}
}

// setCredit makes limit the credit of p's queue, with p's kinds, labels
// and lease, and returns it. Called with x.mu held.
func (x *session) setCredit(p *store.ClaimParams, limit int, received time.Time) int {
	cr := x.credits[p.Queue]
	if cr == nil {
		cr = &credit{}
		x.credits[p.Queue] = cr
	}
	cr.limit = max(limit, 0)
	cr.kinds, cr.labels = p.Kinds, p.Labels
	cr.lease = p.LeaseUntil.Sub(p.Now)
	cr.offset = p.Now.Sub(received)
	return cr.limit
}

// pushPoll is how often the pusher looks for ready work of a queue whose
// store sends no wake-ups.
const pushPoll = 100 * time.Millisecond

// push claims for the worker while it has credit and free slots, and
// sends what it claimed. It waits for a wake-up of the store (a Notifier),
// the earliest next run time a claim reported, or pushPoll.
func (x *session) push(ctx context.Context) {
	storeWake := make(chan struct{}, 1)
	notifier, _ := x.st.(store.Notifier)
	var next time.Time
	for {
		wait := pushPoll
		if notifier != nil {
			wait = time.Minute
		}
		if !next.IsZero() {
			wait = min(wait, max(time.Until(next), time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-x.wake:
		case <-storeWake:
		case <-t.C:
		}
		t.Stop()
		next = time.Time{}
		if !x.pushOnce(ctx, notifier, storeWake, &next) {
			return
		}
	}
}

// pushClaim is one claim pushOnce makes for a worker: the queue, the
// claim and the clock offset of its credit.
type pushClaim struct {
	queue  string
	p      store.ClaimParams
	offset time.Duration
}

// pushOnce claims and pushes once for every queue with credit; it returns
// false when the session's stream is gone.
func (x *session) pushOnce(ctx context.Context, notifier store.Notifier, storeWake chan struct{}, next *time.Time) bool {
	x.pushMu.Lock()
	defer x.pushMu.Unlock()
	for _, j := range x.pushClaims(ctx, notifier, storeWake) {
		r, err := &store.ClaimResult{}, error(nil)
		if x.applyLimits(ctx, &j.p) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			r, err = x.st.Claim(cctx, &j.p)
			cancel()
		}
		x.mu.Lock()
		x.reserved -= j.p.Limit // what it claimed counts in inflight below
		if err == nil {
			for _, in := range r.Instances {
				x.inflight[store.LeaseRef{ID: in.ID, Attempt: in.Attempt}] = struct{}{}
			}
			x.peak = max(x.peak, len(x.inflight))
		}
		x.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				x.s.cfg.Logger.Warn("jobkit server: claim for a remote worker failed", "session", x.id, "queue", j.queue, "err", err)
				*next = time.Now().Add(pushPoll)
			}
			continue
		}
		if at := r.NextRunAt.Add(-j.offset); !r.NextRunAt.IsZero() && len(r.Instances) < j.p.Limit && (next.IsZero() || at.Before(*next)) {
			*next = at
		}
		if len(r.Instances) == 0 {
			continue
		}
		msg := x.tasks(j.queue, r.Instances)
		x.mu.Lock()
		if cr := x.credits[j.queue]; cr != nil {
			cr.limit = max(cr.limit-len(r.Instances), 0)
		}
		x.mu.Unlock()
		for _, u := range r.Undecodable {
			// Nothing to push: finish it as the engine would.
			_, _ = x.st.Finish(ctx, &store.FinishParams{Owner: x.node, Now: time.Now(), Outcomes: []store.Outcome{{ID: u.ID, Attempt: u.Attempt, State: store.Terminated, Error: u.Err.Error()}}})
		}
		if err := x.send(&pb.ConnectResponse{Msg: &pb.ConnectResponse_Tasks{Tasks: msg}}); err != nil {
			return false
		}
		if len(r.Instances) == j.p.Limit {
			x.poke() // maybe more
		}
	}
	return true
}

// pushClaims returns the claims to make for the queues with credit, and
// reserves their slots; it subscribes to the store's wake-ups of each
// queue the first time.
func (x *session) pushClaims(ctx context.Context, notifier store.Notifier, storeWake chan struct{}) []pushClaim {
	x.mu.Lock()
	defer x.mu.Unlock()
	var todo []pushClaim
	for q, cr := range x.credits {
		if notifier != nil && !x.subscribed[q] {
			x.subscribed[q] = true
			// Not under x.mu, nor in the pusher's way: a subscription
			// can take seconds to confirm (a Redis SUBSCRIBE on a fresh
			// connection), and the session's calls (heartbeats, renewals)
			// must not wait for it, or the worker fences itself.
			go forwardStoreWakes(ctx, notifier, q, storeWake)
		}
		limit := cr.limit
		if x.slots > 0 {
			limit = min(limit, x.slots-len(x.inflight)-x.reserved)
		}
		if limit <= 0 || x.node == "" || x.leaving {
			continue
		}
		now := time.Now().Add(cr.offset)
		todo = append(todo, pushClaim{q, store.ClaimParams{
			Queue: q, Owner: x.node, Limit: limit, Now: now, LeaseUntil: now.Add(cr.lease),
			Kinds: cr.kinds, Labels: cr.labels,
		}, cr.offset})
		x.reserved += limit
	}
	return todo
}

// forwardStoreWakes subscribes to the store's wake-ups of queue q and
// passes each on to storeWake, coalesced, until ctx ends.
func forwardStoreWakes(ctx context.Context, notifier store.Notifier, q string, storeWake chan struct{}) {
	ch, err := notifier.Subscribe(ctx, q)
	if err != nil {
		return
	}
	// Look again: what became ready while the subscription
	// was confirmed sent no wake-up.
	select {
	case storeWake <- struct{}{}:
	default:
	}
	for range ch {
		select {
		case storeWake <- struct{}{}:
		default:
		}
	}
}

// tasks is the Tasks message that pushes ins of queue, in the session's
// encoding (JSON when msgpack fails).
func (x *session) tasks(queue string, ins []*store.Instance) *pb.Tasks {
	msg := &pb.Tasks{Queue: queue}
	switch x.encoding {
	case wire.MsgpackKeyed:
		// The buffer is reused: Send has copied the message out
		// before the next push.
		x.pushBuf = wire.AppendInstances(x.pushBuf[:0], ins)
		msg.InstancesMsgpack = x.pushBuf
	case wire.Msgpack:
		var err error
		if msg.InstancesMsgpack, err = wire.MarshalMsgpack(ins); err != nil {
			x.s.cfg.Logger.Warn("jobkit server: encode tasks for a remote worker in msgpack; sending them in JSON", "session", x.id, "err", err)
		}
	}
	if len(msg.InstancesMsgpack) == 0 {
		for _, in := range ins {
			b, _ := json.Marshal(in)
			msg.InstancesJson = append(msg.InstancesJson, b)
		}
	}
	return msg
}

// register adds a session to the server's, refusing it when it announces a
// kind with an executor signature that differs from the one another
// connected worker of the namespace announced for it: instances of that
// kind would decode on one and fail on the other. Workers that announce no
// signature are not checked.
func (s *Server) register(x *session, kinds []*pb.KindSignature) error {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	x.signatures = make(map[string]string)
	for _, k := range kinds {
		if k.GetFingerprint() == "" {
			continue
		}
		for _, o := range s.sessions {
			if o.ns != x.ns {
				continue
			}
			if fp, ok := o.signatures[k.GetKind()]; ok && fp != k.GetFingerprint() {
				return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
					"kind %q: this worker's executor has signature %s, but worker %s (connected) runs it with %s; deploy one signature of a kind per namespace (or give the new one another kind)",
					k.GetKind(), k.GetFingerprint(), o.node, fp))
			}
		}
		x.signatures[k.GetKind()] = k.GetFingerprint()
	}
	s.sessions[x.id] = x
	s.followCancelsLocked(x)
	return nil
}

// unregister removes a session.
func (s *Server) unregister(x *session) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	delete(s.sessions, x.id)
	s.unfollowCancelsLocked(x)
}

// applyLimits applies the cluster's concurrency limits to a claim made
// for the worker (job.Manager.ApplyLimits); false when it must not be
// made.
func (x *session) applyLimits(ctx context.Context, p *store.ClaimParams) bool {
	m := x.s.cfg.Namespaces[x.ns]
	if m == nil {
		return true
	}
	return m.ApplyLimits(ctx, p)
}

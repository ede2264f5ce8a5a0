package job

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jobkit/job/store"
)

// Defaults of the node registry (see WithHeartbeat and WithMaxClockSkew).
const (
	// DefaultHeartbeatInterval is how often a running manager heartbeats
	// into the store's node registry, and how often it looks for dead
	// nodes to rescue.
	DefaultHeartbeatInterval = 200 * time.Millisecond
	// DefaultDeadAfter is how long without a heartbeat, on the store's
	// clock, makes a node dead: any live manager then rescues its running
	// attempts. With the defaults a crashed node's work runs again within
	// DefaultDeadAfter + DefaultHeartbeatInterval (1.2 s) of its last
	// heartbeat, plus a claim.
	DefaultDeadAfter = time.Second
	// MaxDefaultClockSkew caps the default clock-skew bound: the bound is
	// a 24th of the lease (a quarter of the stop allowance, so two managers
	// each within it of the store differ by at most half the allowance),
	// at most this.
	MaxDefaultClockSkew = 500 * time.Millisecond
)

// Version is the engine's version, as nodes report it in the registry.
const Version = "v0.0.0-dev"

// WithHeartbeat sets how often the manager heartbeats into the store's
// node registry (interval) and how long without a heartbeat makes a node
// dead (deadAfter). Defaults to DefaultHeartbeatInterval and
// DefaultDeadAfter. deadAfter must be at least four intervals, and the
// same on every manager of a cluster.
//
// A node whose heartbeats fail for half of deadAfter (its fence window)
// cancels its own running attempts (their context's cause is ErrLeaseLost)
// and stops claiming, before any other node may declare it dead and
// rescue them; so an executor must return within the other half of
// deadAfter after its context is canceled for an instance never to run
// twice at once after a partition. An attempt fenced this way whose
// executor returns on that cancel (an error wrapping context.Canceled or
// ErrLeaseLost) is handed back (Scheduled at its run time, the attempt not
// counted); one whose executor returns anything else ran to its end and
// has that outcome recorded. Either is refused by the store when another
// node rescued the instance meanwhile.
func WithHeartbeat(interval, deadAfter time.Duration) ManagerOption {
	return func(c *config) error {
		if interval < 10*time.Millisecond {
			return fmt.Errorf("%w: heartbeat interval %v, want at least 10ms", ErrInvalidOption, interval)
		}
		if deadAfter < 4*interval {
			return fmt.Errorf("%w: dead threshold %v is under four heartbeat intervals (%v); raise it", ErrInvalidOption, deadAfter, 4*interval)
		}
		c.heartbeat, c.deadAfter = interval, deadAfter
		return nil
	}
}

// WithMaxClockSkew sets how far the manager's clock may be from the
// store's before it stops claiming, rescuing expired leases and scheduling
// recurring ticks (until it is back within the bound). Defaults to a 24th
// of the lease, at most MaxDefaultClockSkew (500 ms with the default
// 30 s lease; 125 ms with a 3 s lease). A bound above a quarter of the stop
// allowance (a 24th of the lease) lets two managers disagree by more than
// half of it, and a rescuer ahead could take back a lease its owner still
// renews.
func WithMaxClockSkew(d time.Duration) ManagerOption {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: max clock skew %v, want > 0", ErrInvalidOption, d)
		}
		c.maxSkew = d
		return nil
	}
}

// nodeDefaults fills the node registry's settings; called by defaults().
func (c *config) nodeDefaults() {
	if c.heartbeat == 0 {
		c.heartbeat, c.deadAfter = DefaultHeartbeatInterval, DefaultDeadAfter
	}
	if c.maxSkew == 0 {
		c.maxSkew = min(c.lease/24, MaxDefaultClockSkew)
	}
}

// fenceAfter is how long a node's heartbeats may fail before it fences
// itself: half the dead threshold.
func (c *config) fenceAfter() time.Duration { return c.deadAfter / 2 }

// NodeHealth is what a manager knows of its own standing in the cluster.
type NodeHealth struct {
	// LastHeartbeat is when the last successful heartbeat was sent (the
	// manager's clock); zero before the first.
	LastHeartbeat time.Time
	// ClockSkew is the manager's clock minus the store's, measured at the
	// last heartbeat that could measure it (half its round trip is the
	// error); SkewKnown is false until one did.
	ClockSkew time.Duration
	SkewKnown bool
	// MaxClockSkew is the bound (WithMaxClockSkew).
	MaxClockSkew time.Duration
	// Skewed: the skew is beyond the bound; the manager neither claims,
	// nor rescues expired leases, nor schedules recurring ticks.
	Skewed bool
	// Fenced: heartbeats failed for the fence window; the manager canceled
	// its running attempts and claims nothing until a heartbeat succeeds.
	Fenced bool
	// Fences counts the times the manager fenced itself.
	Fences int64
	// HeartbeatRTT is the round trip of the last successful heartbeat. A
	// heartbeat measures the skew only when its round trip is at most
	// twice MaxClockSkew; while SkewKnown is false because every round
	// trip was longer, the manager does not claim (it logs why).
	HeartbeatRTT time.Duration
}

// nodeState is the manager's standing: set by the heartbeat loop, read by
// the claim loop, the rescuers and the recurring tickers.
type nodeState struct {
	mu        sync.Mutex
	lastOK    time.Time
	skew      time.Duration
	skewKnown bool
	skewed    bool
	fenced    bool
	fences    int64
	rtt       time.Duration // the last successful heartbeat's round trip
	slowRTT   bool          // the last heartbeat was too slow to measure the skew
	sig       chan struct{} // closed and replaced when ok() may have changed
	beat      chan struct{} // a heartbeat succeeded (for the rescuer of dead nodes)
}

// ok reports whether the manager may claim, rescue and tick. n.mu is held.
func (n *nodeState) ok() bool { return n.skewKnown && !n.skewed && !n.fenced }

// signal wakes the waiters of ok. n.mu is held.
func (n *nodeState) signal() {
	if n.sig != nil {
		close(n.sig)
	}
	n.sig = make(chan struct{})
}

// check reports whether the manager may claim, rescue and tick, and a
// channel closed when that may change.
func (n *nodeState) check() (bool, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sig == nil {
		n.sig = make(chan struct{})
	}
	return n.ok(), n.sig
}

// waitOK waits until the manager may claim (its clock is known to be
// within bounds and it is not fenced), or until one of done is closed; it
// reports false then.
func (n *nodeState) waitOK(done ...<-chan struct{}) bool {
	for {
		ok, changed := n.check()
		if ok {
			return true
		}
		var d0, d1 <-chan struct{}
		if len(done) > 0 {
			d0 = done[0]
		}
		if len(done) > 1 {
			d1 = done[1]
		}
		select {
		case <-changed:
		case <-d0:
			return false
		case <-d1:
			return false
		}
	}
}

// Health returns the manager's standing in the cluster: its clock skew
// against the store and whether it is fenced.
func (m *Manager) Health() NodeHealth {
	m.nodes.mu.Lock()
	defer m.nodes.mu.Unlock()
	return NodeHealth{
		LastHeartbeat: m.nodes.lastOK, ClockSkew: m.nodes.skew, SkewKnown: m.nodes.skewKnown,
		MaxClockSkew: m.cfg.maxSkew, Skewed: m.nodes.skewed, Fenced: m.nodes.fenced, Fences: m.nodes.fences,
		HeartbeatRTT: m.nodes.rtt,
	}
}

// ClockSkew returns the manager's clock minus the store's, as the last
// heartbeat measured it; known is false until one could.
func (m *Manager) ClockSkew() (skew time.Duration, known bool) {
	h := m.Health()
	return h.ClockSkew, h.SkewKnown
}

// ListNodes returns the nodes in the store's registry: the live ones and
// those gone (stale, dead or left) within the registry's retention
// (store.DefaultNodeRetain), ordered by ID.
func (m *Manager) ListNodes(ctx context.Context) ([]*store.NodeInfo, error) {
	ns, err := m.store.ListNodes(ctx, &store.ListNodesParams{Now: m.clock.Now(), DeadAfter: m.cfg.deadAfter})
	if err != nil {
		return nil, fmt.Errorf("job: list nodes: %w", err)
	}
	return ns, nil
}

// nodeInfo is what this manager reports in its heartbeat.
func (m *Manager) nodeInfo(now time.Time) store.NodeInfo {
	size, busy := m.pool.stats()
	host, _ := os.Hostname()
	m.nodes.mu.Lock()
	skew := m.nodes.skew
	m.nodes.mu.Unlock()
	return store.NodeInfo{
		ID: m.node, Host: host, Kinds: m.reg.kinds(), Queues: m.cfg.queues, Labels: m.cfg.labels,
		Workers: size, Busy: busy, Version: Version, Started: m.started, LastSeen: now, Skew: skew,
	}
}

// heartbeatLoop heartbeats every heartbeat interval (a quarter of one
// apart while they fail), measures the clock skew, and fences the node when
// no heartbeat succeeded for the fence window. It runs from Start until the
// end of Stop, so a stopping node is never taken for dead while it drains.
func (m *Manager) heartbeatLoop() {
	defer m.hbWG.Done()
	for {
		started := m.clock.Now()
		wait := m.cfg.heartbeat
		if !m.heartbeat() {
			wait /= 4
		}
		wait -= m.clock.Now().Sub(started)
		if !sleep(m.clock, wait, m.hbStop) {
			return
		}
	}
}

// hbCall is a heartbeat call to the store: when it was sent and where its
// reply arrives.
type hbCall struct {
	sent time.Time
	done chan hbReply
}

type hbReply struct {
	res *store.HeartbeatResult
	err error
}

// heartbeat sends one heartbeat and acts on its answer; it reports
// whether it succeeded.
func (m *Manager) heartbeat() bool {
	t1 := m.clock.Now()
	m.nodes.mu.Lock()
	left := m.nodes.lastOK.Add(m.cfg.fenceAfter()).Sub(t1)
	m.nodes.mu.Unlock()
	// A call may take until the fence is due, not past it.
	ctx, cancel := context.WithTimeout(context.Background(), max(m.cfg.heartbeat, left))
	// The fence must not wait for a store call that ignores its ctx: give
	// up on the call when its ctx ends (it finishes in the background).
	// At most one call is in flight: while one that was given up on still
	// runs, this attempt waits for it rather than starting another, so a
	// store that ignores ctx cannot pile up calls.
	call := m.hbPending
	if call == nil {
		call = &hbCall{sent: t1, done: make(chan hbReply, 1)}
		p := &store.HeartbeatParams{Node: m.nodeInfo(t1), Now: t1, DeadAfter: m.cfg.deadAfter}
		go func() {
			r, err := m.store.Heartbeat(ctx, p)
			call.done <- hbReply{r, err}
		}()
	}
	var res *store.HeartbeatResult
	var err error
	select {
	case r := <-call.done:
		m.hbPending = nil
		res, err = r.res, r.err
	case <-ctx.Done():
		m.hbPending = call
		err = fmt.Errorf("heartbeat: %w", ctx.Err())
	}
	cancel()
	// A call that was given up on and then answered was sent earlier:
	// liveness and skew are dated from when it was sent.
	t1 = call.sent
	t2 := m.clock.Now()
	if err != nil {
		m.nodes.mu.Lock()
		fence := !m.nodes.fenced && !t2.Before(m.nodes.lastOK.Add(m.cfg.fenceAfter()))
		if fence {
			m.nodes.fenced = true
			m.nodes.fences++
			m.nodes.signal()
		}
		m.nodes.mu.Unlock()
		if fence {
			n := m.fenceAll()
			m.log.Error("heartbeats failed for the fence window; canceled the running attempts and stopped claiming, before other nodes may rescue them",
				"fence_window", m.cfg.fenceAfter(), "attempts", n, "err", err)
		} else {
			m.log.Warn("heartbeat failed; retrying", "err", err)
		}
		return false
	}
	if res.WasDead {
		n := m.fenceAll()
		m.log.Error("this node was declared dead (no heartbeat for the dead threshold); its attempts were rescued by others", "canceled", n)
	}
	select {
	case m.nodes.beat <- struct{}{}:
	default:
	}
	m.nodes.mu.Lock()
	defer m.nodes.mu.Unlock()
	wasOK := m.nodes.ok()
	unfenced := m.nodes.fenced
	m.nodes.lastOK, m.nodes.fenced = t1, false
	rtt := t2.Sub(t1)
	m.nodes.rtt = rtt
	slow := !res.StoreNow.IsZero() && rtt > 2*m.cfg.maxSkew
	if slow && !m.nodes.slowRTT && !m.nodes.skewKnown {
		m.log.Warn("heartbeat round trip too long to measure the clock skew: not claiming, rescuing expired leases or scheduling recurring ticks until a heartbeat is fast enough; raise the lease (WithLease) or WithMaxClockSkew, or bring the store closer",
			"round_trip", rtt, "max_round_trip", 2*m.cfg.maxSkew)
	}
	m.nodes.slowRTT = slow
	if !res.StoreNow.IsZero() && rtt <= 2*m.cfg.maxSkew {
		skew := t1.Add(rtt / 2).Sub(res.StoreNow)
		wasSkewed := m.nodes.skewed
		m.nodes.skew, m.nodes.skewKnown = skew, true
		m.nodes.skewed = skew > m.cfg.maxSkew || skew < -m.cfg.maxSkew
		switch {
		case m.nodes.skewed && !wasSkewed:
			m.log.Error("clock skew beyond the bound: not claiming, rescuing expired leases or scheduling recurring ticks until it is back within it; fix the host's clock (NTP)",
				"skew", skew, "max", m.cfg.maxSkew)
		case !m.nodes.skewed && wasSkewed:
			m.log.Info("clock skew back within the bound", "skew", skew, "max", m.cfg.maxSkew)
		}
	}
	if unfenced {
		m.log.Info("heartbeat succeeded again; claiming resumed")
	}
	if m.nodes.ok() != wasOK || unfenced {
		m.nodes.signal()
	}
	return true
}

// fenceAll gives up every attempt this manager runs: their contexts are
// canceled with ErrLeaseLost. Once its executor returns, each one's
// outcome is written (handed back, the attempt not counted, when the
// fence stopped it or it had not started; see execute and outcome), and
// the store refuses it when another node rescued the instance meanwhile.
// It returns how many.
func (m *Manager) fenceAll() int {
	n := 0
	for _, a := range m.active.snapshot() {
		if m.giveUpAs(a, settledFenced) {
			a.cancel(ErrLeaseLost)
			m.active.remove(a) // observers learn of it with its outcome (fenceReason)
			n++
		}
	}
	return n
}

// isFenced reports whether the node is fenced.
func (n *nodeState) isFenced() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fenced
}

// handBackFenced hands back an attempt given up by a fence before it ran:
// Scheduled at its run time, the attempt not counted, and the count of
// fenced hand-backs in a row carried over unchanged (it did not run). The store refuses
// it (ErrLeaseLost) when another node rescued the instance meanwhile. An
// attempt whose executor ran is not handed back here: execute writes
// what it returned.
func (m *Manager) handBackFenced(a *attempt) {
	m.completer.submit(&finishReq{a: a, inst: newInstance(a.rec.Clone(), m.logs), out: store.Outcome{
		ID: a.rec.ID, Attempt: a.rec.Attempt, State: store.Scheduled, RunAt: a.rec.RunAt, Release: true, Error: a.fencedHandBackError(fencedHandBacksBefore(a.rec.Error)),
	}})
}

// leave records in the registry that the node stopped, so it is listed as
// left and never declared dead. While executors Stop gave up still run
// (Stuck), their attempts' leases hold and they must not be rescued
// before those lapse; a node declared dead would have them rescued at
// once. So then a failed write is retried, as heartbeats are, for as long
// as the node cannot yet be declared dead (its last heartbeat plus the
// dead threshold, measured on the real clock from now).
func (m *Manager) leave(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	m.nodes.mu.Lock()
	budget := m.nodes.lastOK.Add(m.cfg.deadAfter).Sub(m.clock.Now())
	m.nodes.mu.Unlock()
	until := time.Now().Add(budget)
	// As for heartbeats, Stop must not wait for a store call that ignores
	// its ctx: a call is given up on when its ctx ends (it finishes in the
	// background), and a retry waits for a call still running rather than
	// starting another.
	var pending chan error
	for try := 1; ; try++ {
		d := time.Second
		if try > 1 {
			d = min(d, time.Until(until))
		}
		cctx, cancel := context.WithTimeout(ctx, d)
		if pending == nil {
			pending = make(chan error, 1)
			t := m.clock.Now()
			p := &store.HeartbeatParams{Node: m.nodeInfo(t), Now: t, DeadAfter: m.cfg.deadAfter, Leaving: true}
			go func(done chan<- error) {
				_, err := m.store.Heartbeat(cctx, p)
				done <- err
			}(pending)
		}
		var err error
		select {
		case err = <-pending:
			pending = nil
		case <-cctx.Done():
			err = fmt.Errorf("the store did not answer in time: %w", cctx.Err())
		}
		cancel()
		if err == nil {
			return
		}
		running := m.stuck.Load()
		pause := m.cfg.heartbeat / 4
		if running == 0 || time.Until(until) <= pause {
			if running > 0 {
				m.log.Error("stop: could not record in the node registry that this node left; it will be declared dead and the attempts of the executors still running rescued (run again alongside them)",
					"running", running, "tries", try, "err", err)
			} else {
				m.log.Warn("stop: could not record in the node registry that this node left; it will be declared dead", "err", err)
			}
			return
		}
		m.log.Warn("stop: could not record in the node registry that this node left; retrying while executors still run", "running", running, "err", err)
		sleep(SystemClock{}, pause, nil) // a real-time pause between store calls, as for heartbeats
	}
}

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
func (a *Admin) ListNodes(ctx context.Context) ([]*NodeInfo, error) {
	m := a.m
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
	var types []string
	if len(m.cfg.execTypes) > 0 {
		types = m.ExecutorTypes()
	}
	return store.NodeInfo{
		ID: m.node, Host: host, Kinds: m.reg.kinds(), Queues: m.cfg.queues, Labels: m.cfg.labels, ExecutorTypes: types,
		Workers: size, Busy: busy, Version: Version, Started: m.started, LastSeen: now, Skew: skew,
	}
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

package job

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jobkit/job/store"
)

// heartbeaterDeps is what the heartbeat uses.
type heartbeaterDeps struct {
	store      store.Store
	clock      Clock
	log        *slog.Logger
	interval   time.Duration // WithHeartbeat's interval
	deadAfter  time.Duration // WithHeartbeat's dead threshold
	fenceAfter time.Duration // config.fenceAfter
	maxSkew    time.Duration // WithMaxClockSkew
	nodes      *nodeState    // what the heartbeat learns, for the others to read
	// info is what the node reports in the registry at now.
	info func(now time.Time) store.NodeInfo
	// fenceAll cancels every running attempt (the node fences itself);
	// it returns how many.
	fenceAll func() int
	// stuck is how many executors still run after their attempts were
	// given up (Manager.Stuck): leave retries while there are some.
	stuck func() int64
}

// heartbeater heartbeats into the store's node registry from Start until
// the end of Stop, measures the clock skew, fences the node when it cannot
// heartbeat, and records at the very end that the node left (leave).
type heartbeater struct {
	heartbeaterDeps
	loops
	// pending is a heartbeat call given up on that has not answered yet;
	// only the loop uses it.
	pending *hbCall
}

var _ service = (*heartbeater)(nil)

func newHeartbeater(d heartbeaterDeps) *heartbeater { return &heartbeater{heartbeaterDeps: d} }

func (h *heartbeater) start() {
	h.reset()
	h.goLoop(h.run)
}

// run heartbeats every heartbeat interval (a quarter of one
// apart while they fail), measures the clock skew, and fences the node when
// no heartbeat succeeded for the fence window. It runs from Start until the
// end of Stop, so a stopping node is never taken for dead while it drains.
func (h *heartbeater) run(quit <-chan struct{}) {
	for {
		started := h.clock.Now()
		wait := h.interval
		if !h.heartbeat() {
			wait /= 4
		}
		wait -= h.clock.Now().Sub(started)
		if !sleep(h.clock, wait, quit) {
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
func (h *heartbeater) heartbeat() bool {
	t1 := h.clock.Now()
	h.nodes.mu.Lock()
	left := h.nodes.lastOK.Add(h.fenceAfter).Sub(t1)
	h.nodes.mu.Unlock()
	// A call may take until the fence is due, not past it.
	ctx, cancel := context.WithTimeout(context.Background(), max(h.interval, left))
	// The fence must not wait for a store call that ignores its ctx: give
	// up on the call when its ctx ends (it finishes in the background).
	// At most one call is in flight: while one that was given up on still
	// runs, this attempt waits for it rather than starting another, so a
	// store that ignores ctx cannot pile up calls.
	call := h.pending
	if call == nil {
		call = &hbCall{sent: t1, done: make(chan hbReply, 1)}
		p := &store.HeartbeatParams{Node: h.info(t1), Now: t1, DeadAfter: h.deadAfter}
		go func() {
			r, err := h.store.Heartbeat(ctx, p)
			call.done <- hbReply{r, err}
		}()
	}
	var res *store.HeartbeatResult
	var err error
	select {
	case r := <-call.done:
		h.pending = nil
		res, err = r.res, r.err
	case <-ctx.Done():
		h.pending = call
		err = fmt.Errorf("heartbeat: %w", ctx.Err())
	}
	cancel()
	// A call that was given up on and then answered was sent earlier:
	// liveness and skew are dated from when it was sent.
	t1 = call.sent
	t2 := h.clock.Now()
	if err != nil {
		h.nodes.mu.Lock()
		fence := !h.nodes.fenced && !t2.Before(h.nodes.lastOK.Add(h.fenceAfter))
		if fence {
			h.nodes.fenced = true
			h.nodes.fences++
			h.nodes.signal()
		}
		h.nodes.mu.Unlock()
		if fence {
			n := h.fenceAll()
			h.log.Error("heartbeats failed for the fence window; canceled the running attempts and stopped claiming, before other nodes may rescue them",
				"fence_window", h.fenceAfter, "attempts", n, "err", err)
		} else {
			h.log.Warn("heartbeat failed; retrying", "err", err)
		}
		return false
	}
	if res.WasDead {
		n := h.fenceAll()
		h.log.Error("this node was declared dead (no heartbeat for the dead threshold); its attempts were rescued by others", "canceled", n)
	}
	select {
	case h.nodes.beat <- struct{}{}:
	default:
	}
	h.nodes.mu.Lock()
	defer h.nodes.mu.Unlock()
	wasOK := h.nodes.ok()
	unfenced := h.nodes.fenced
	h.nodes.lastOK, h.nodes.fenced = t1, false
	rtt := t2.Sub(t1)
	h.nodes.rtt = rtt
	slow := !res.StoreNow.IsZero() && rtt > 2*h.maxSkew
	if slow && !h.nodes.slowRTT && !h.nodes.skewKnown {
		h.log.Warn("heartbeat round trip too long to measure the clock skew: not claiming, rescuing expired leases or scheduling recurring ticks until a heartbeat is fast enough; raise the lease (WithLease) or WithMaxClockSkew, or bring the store closer",
			"round_trip", rtt, "max_round_trip", 2*h.maxSkew)
	}
	h.nodes.slowRTT = slow
	if !res.StoreNow.IsZero() && rtt <= 2*h.maxSkew {
		skew := t1.Add(rtt / 2).Sub(res.StoreNow)
		wasSkewed := h.nodes.skewed
		h.nodes.skew, h.nodes.skewKnown = skew, true
		h.nodes.skewed = skew > h.maxSkew || skew < -h.maxSkew
		switch {
		case h.nodes.skewed && !wasSkewed:
			h.log.Error("clock skew beyond the bound: not claiming, rescuing expired leases or scheduling recurring ticks until it is back within it; fix the host's clock (NTP)",
				"skew", skew, "max", h.maxSkew)
		case !h.nodes.skewed && wasSkewed:
			h.log.Info("clock skew back within the bound", "skew", skew, "max", h.maxSkew)
		}
	}
	if unfenced {
		h.log.Info("heartbeat succeeded again; claiming resumed")
	}
	if h.nodes.ok() != wasOK || unfenced {
		h.nodes.signal()
	}
	return true
}

// leave records in the registry that the node stopped, so it is listed as
// left and never declared dead. While executors Stop gave up still run
// (Stuck), their attempts' leases hold and they must not be rescued
// before those lapse; a node declared dead would have them rescued at
// once. So then a failed write is retried, as heartbeats are, for as long
// as the node cannot yet be declared dead (its last heartbeat plus the
// dead threshold, measured on the real clock from now).
func (h *heartbeater) leave(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	h.nodes.mu.Lock()
	budget := h.nodes.lastOK.Add(h.deadAfter).Sub(h.clock.Now())
	h.nodes.mu.Unlock()
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
			t := h.clock.Now()
			p := &store.HeartbeatParams{Node: h.info(t), Now: t, DeadAfter: h.deadAfter, Leaving: true}
			go func(done chan<- error) {
				_, err := h.store.Heartbeat(cctx, p)
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
		running := h.stuck()
		pause := h.interval / 4
		if running == 0 || time.Until(until) <= pause {
			if running > 0 {
				h.log.Error("stop: could not record in the node registry that this node left; it will be declared dead and the attempts of the executors still running rescued (run again alongside them)",
					"running", running, "tries", try, "err", err)
			} else {
				h.log.Warn("stop: could not record in the node registry that this node left; it will be declared dead", "err", err)
			}
			return
		}
		h.log.Warn("stop: could not record in the node registry that this node left; retrying while executors still run", "running", running, "err", err)
		sleep(SystemClock{}, pause, nil) // a real-time pause between store calls, as for heartbeats
	}
}

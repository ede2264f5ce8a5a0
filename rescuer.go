package job

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobkit/job/store"
)

// rescuerDeps is what the rescuer uses.
type rescuerDeps struct {
	store     store.Store
	clock     Clock
	node      string
	log       *slog.Logger
	interval  time.Duration // how often expired leases are looked for
	deadAfter time.Duration // how long without a heartbeat makes a node dead
	run       *runScope     // bounds the store calls
	// nodes says whether this node may rescue (clock within bounds, not
	// fenced), and when it last heartbeated.
	nodes *nodeState
	// ended is called with the instances a rescue moved, for the joins
	// of sharded tasks (see completerDeps.ended).
	ended func(ctx context.Context, recs []*store.Instance)
	// found is called when a rescue moved some (it wakes the claimer and
	// Manager.Wait).
	found func()
}

// rescuer takes back the attempts of managers that are gone: those whose
// lease expired, and those of nodes that stopped heartbeating. Every
// manager runs one; the store's Rescue and RescueNodes are atomic, so
// each instance is rescued once. It stops with the claimer.
type rescuer struct {
	rescuerDeps
	loops
}

var _ service = (*rescuer)(nil)

func newRescuer(d rescuerDeps) *rescuer { return &rescuer{rescuerDeps: d} }

func (r *rescuer) start() {
	r.reset()
	r.goLoop(r.nodeRescueLoop)
	r.goLoop(r.rescueLoop)
}

// rescueLoop moves instances whose lease expired (their manager crashed)
// back to the queue, or to Terminated when out of retries. Every manager
// runs it; the store's Rescue is atomic, so each is rescued once.
func (r *rescuer) rescueLoop(quit <-chan struct{}) {
	for {
		if !sleep(r.clock, r.interval, quit) {
			return
		}
		// A rescuer whose clock is ahead would take back live leases.
		if ok, _ := r.nodes.check(); !ok {
			continue
		}
		for {
			ctx, cancel := context.WithTimeout(r.run.ctx, 30*time.Second)
			rescued, err := r.store.Rescue(ctx, &store.RescueParams{Now: r.clock.Now(), Limit: 256, Node: r.node})
			cancel()
			if err != nil {
				r.log.Warn("rescue expired leases", "err", err)
				break
			}
			r.ended(r.run.ctx, rescued)
			if len(rescued) > 0 {
				r.log.Info("rescued instances with expired leases", "count", len(rescued))
				r.found()
			}
			if len(rescued) < 256 {
				break
			}
		}
	}
}

// nodeRescueLoop rescues the attempts of dead nodes after each
// successful heartbeat (the store measures a node's silence up to the
// rescuer's own last heartbeat, so right after one is when it can tell
// soonest). Every manager runs it; the store declares each dead node once
// and moves each attempt once.
func (r *rescuer) nodeRescueLoop(quit <-chan struct{}) {
	for {
		select {
		case <-r.nodes.beat:
		case <-quit:
			return
		}
		if r.nodes.isFenced() {
			continue
		}
		for {
			ctx, cancel := context.WithTimeout(r.run.ctx, 30*time.Second)
			res, err := r.store.RescueNodes(ctx, &store.RescueNodesParams{
				Now: r.clock.Now(), Node: r.node, DeadAfter: r.deadAfter, Limit: 256,
			})
			cancel()
			if err != nil {
				r.log.Warn("rescue dead nodes", "err", err)
				break
			}
			if len(res.Dead) > 0 {
				r.log.Warn("nodes stopped heartbeating; declared dead, rescuing their attempts", "nodes", res.Dead, "dead_after", r.deadAfter)
			}
			r.ended(r.run.ctx, res.Rescued)
			if len(res.Rescued) > 0 {
				r.log.Info("rescued attempts of dead nodes", "count", len(res.Rescued))
				r.found()
			}
			if len(res.Rescued) < 256 {
				break
			}
		}
	}
}

package job

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jobkit/job/store"
)

// Spreading the shards of a task over nodes. Claims take what is ready in
// queue order, so an idle manager can claim every shard of a task at once.
// Before a shard runs, the manager that claimed it keeps it only while it
// runs fewer of the task's shards than its fair share: the shard count
// divided by the nodes that could run the shard (itself and the live
// nodes the registry lists with the kind, the shard's labels, its queue
// and a free worker at their last heartbeat). Beyond that it hands the
// shard back (attempt not counted, its place in the queue kept), once per
// shard, so a free node can claim it; a shard it claims again after that
// runs here. With no free peer every shard runs where it was claimed.
// After a hand-back the manager claims nothing for spreadPause, so the
// free nodes, woken by the store, claim the shard first.

// spreadPeersTTL is how long a manager reuses its read of the node
// registry for spreading decisions: a cost knob on real time, not a
// schedule (heartbeats refresh the registry every 200 ms).
const spreadPeersTTL = 200 * time.Millisecond

// spreadPause is how long a manager that handed a shard back waits
// before it claims again: real time, for the other nodes' claims to come
// first (a store's wake-up reaches them within milliseconds).
const spreadPause = 100 * time.Millisecond

// spreadMemory bounds the shard IDs a manager remembers having handed
// back; past it the memory starts again (a shard then may be handed back
// once more).
const spreadMemory = 10000

// spreadState is a manager's view for spreading shards.
type spreadState struct {
	mu         sync.Mutex
	running    map[string]int      // parent ID → its shards running here
	handedBack map[string]struct{} // shard IDs handed back once
	nodes      []*store.NodeInfo   // the registry as last read
	readAt     time.Time           // when (real time)
	pauseUntil time.Time           // no claim before (real time; see spreadPause)
}

// keepShard decides whether the shard a claimed runs here; when it
// reports false the caller hands it back. A kept shard counts as running
// here until shardDone.
func (sh *shards) keepShard(rec *store.Instance) bool {
	s := &sh.spread
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		s.running, s.handedBack = map[string]int{}, map[string]struct{}{}
	}
	here := s.running[rec.Parent]
	if _, once := s.handedBack[rec.ID]; !once && here > 0 {
		if peers := sh.freePeersLocked(rec); peers > 0 && here >= (rec.ShardCount+peers)/(peers+1) {
			if len(s.handedBack) >= spreadMemory {
				clear(s.handedBack)
			}
			s.handedBack[rec.ID] = struct{}{}
			s.pauseUntil = time.Now().Add(spreadPause)
			return false
		}
	}
	delete(s.handedBack, rec.ID)
	s.running[rec.Parent] = here + 1
	return true
}

// shardDone ends what keepShard counted.
func (sh *shards) shardDone(rec *store.Instance) {
	s := &sh.spread
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[rec.Parent]--; s.running[rec.Parent] <= 0 {
		delete(s.running, rec.Parent)
	}
}

// freePeersLocked counts the other live nodes that could run rec now: it
// reads the registry at most once per spreadPeersTTL (s.mu held; a failed
// read counts none, so nothing is handed back on a guess).
func (sh *shards) freePeersLocked(rec *store.Instance) int {
	s := &sh.spread
	if time.Since(s.readAt) > spreadPeersTTL {
		ctx, cancel := context.WithTimeout(sh.run.ctx, 2*time.Second)
		nodes, err := sh.store.ListNodes(ctx, &store.ListNodesParams{Now: sh.clock.Now(), DeadAfter: sh.deadAfter})
		cancel()
		if err != nil {
			sh.log.Debug("spreading shards: reading the node registry", "err", err)
			nodes = nil
		}
		s.nodes, s.readAt = nodes, time.Now()
	}
	n := 0
	for _, nd := range s.nodes {
		if nd.ID == sh.node || nd.Status != store.NodeLive || nd.Busy >= nd.Workers ||
			!slices.Contains(nd.Kinds, rec.Kind) || !slices.Contains(nd.Queues, rec.Queue) {
			continue
		}
		if !hasAll(nd.Labels, rec.Labels) {
			continue
		}
		n++
	}
	return n
}

// waitSpreadPause waits out a pause after a hand-back; false when quit
// closes meanwhile.
func (sh *shards) waitSpreadPause(quit <-chan struct{}) bool {
	sh.spread.mu.Lock()
	d := time.Until(sh.spread.pauseUntil)
	sh.spread.mu.Unlock()
	return d <= 0 || sleep(SystemClock{}, d, quit)
}

// hasAll reports whether have includes every one of want.
func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// handBackShard hands a shard back instead of running it (see keepShard).
func (m *Manager) handBackShard(a *attempt) {
	if !a.settle() { // the shard did not run: a fenced one is handed back
		m.returned(a, false)
		if a.fenced() {
			m.handBackFenced(a)
		}
		return
	}
	m.watch.remove(a)
	out := store.Outcome{ID: a.rec.ID, Attempt: a.rec.Attempt, State: store.Scheduled, RunAt: a.rec.RunAt, Release: true,
		Error: "handed back: spreading the shards of task " + a.rec.Parent + " over nodes with free workers"}
	m.completer.submit(&finishReq{a: a, out: out, inst: newInstance(a.rec.Clone(), m.logs), ended: m.clock.Now()})
	m.decided()
}

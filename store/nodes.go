package store

import (
	"context"
	"fmt"
	"time"
)

// Nodes is the node registry: every running manager heartbeats into it, so
// a cluster knows which nodes are alive, what they run, and whether their
// clocks agree with the store's; and a dead node's running attempts are
// rescued as soon as its heartbeat is stale, without waiting for each
// attempt's lease to end.
//
// Liveness is judged on one clock, never by comparing one node's clock
// with another's: the store's own clock where it has one (Redis and Valkey
// read TIME inside their scripts; memdbstore reads its clock, the process
// wall clock by default), and otherwise the time a store handle has seen a
// node's record unchanged on its own monotonic clock (etcdstore, as etcd has
// no clock API). So a node whose clock is off by seconds is neither
// declared dead early nor kept alive late.
type Nodes interface {
	// Heartbeat records that node p.Node.ID is alive, with what it runs,
	// and returns the store's clock reading taken while the heartbeat was
	// recorded, for the caller to measure its clock skew. It also deletes
	// the records of nodes gone (or not heard from) for longer than
	// p.Retain. A heartbeat with Leaving set records that the node stopped:
	// it is listed as NodeLeft and its attempts are not rescued (they
	// lapse at their leases, as Stop documents). A node that was declared
	// dead (NodeDead) and heartbeats again is registered anew, and the
	// result's WasDead tells it so: its attempts have been, or are being,
	// rescued by others.
	Heartbeat(ctx context.Context, p *HeartbeatParams) (*HeartbeatResult, error)

	// ListNodes returns the nodes the registry holds: live ones and those
	// gone (dead, left, or not heard from for p.DeadAfter) within the
	// retention window of the heartbeats, each with its Status, ordered by
	// ID.
	ListNodes(ctx context.Context, p *ListNodesParams) ([]*NodeInfo, error)

	// RescueNodes declares dead every node other than p.Node whose last
	// heartbeat is older than p.DeadAfter on the store's clock (see
	// Nodes), measured both up to now and, when p.Node heartbeats, up to
	// p.Node's own last heartbeat: a stall of the store delays every
	// heartbeat, and the first rescuer through must not take the living
	// for dead. Exactly one call, on any handle, declares a node dead.
	// It then rescues up to p.Limit Processing attempts owned by dead
	// nodes, as Queue.Rescue rescues an expired lease (back to Scheduled
	// keeping RunAt, Terminated when out of retries, Canceled when a
	// cancel was requested), each exactly once across all handles, found
	// through a per-owner index (never a scan of every running attempt).
	// A dead node's attempts left over when Limit is reached are rescued
	// by the next calls. Nodes that left (Leaving) are never declared
	// dead.
	RescueNodes(ctx context.Context, p *RescueNodesParams) (*RescueNodesResult, error)
}

// NodeStatus says whether a node is alive.
type NodeStatus uint8

// The node statuses.
const (
	// NodeLive: the node heartbeats.
	NodeLive NodeStatus = iota + 1
	// NodeStale: no heartbeat for DeadAfter, and not declared dead yet.
	NodeStale
	// NodeDead: declared dead by RescueNodes; its attempts are rescued.
	NodeDead
	// NodeLeft: the node stopped cleanly (a Leaving heartbeat).
	NodeLeft
)

var nodeStatusNames = [...]string{NodeLive: "live", NodeStale: "stale", NodeDead: "dead", NodeLeft: "left"}

// String returns the lower-case name of s ("live").
func (s NodeStatus) String() string {
	if int(s) < len(nodeStatusNames) && nodeStatusNames[s] != "" {
		return nodeStatusNames[s]
	}
	return fmt.Sprintf("nodestatus(%d)", uint8(s))
}

// Gone reports whether s is a status of a node that no longer heartbeats.
func (s NodeStatus) Gone() bool { return s != NodeLive }

// NodeInfo is one node's record in the registry.
type NodeInfo struct {
	ID      string    // the manager's node ID (lease owner)
	Host    string    // host name
	Labels  []string  // the node's labels ("region=eu", "gpu"), as claims carry them
	Kinds   []string  // the job kinds it runs
	Queues  []string  // the queues it claims from
	Workers int       // worker slots
	Busy    int       // slots running an attempt at the last heartbeat
	Version string    // the engine's version
	Started time.Time // when the manager started (its clock)
	// LastSeen is the node's own clock at its last heartbeat.
	LastSeen time.Time
	// StoreSeen is the store's clock at its last heartbeat (etcdstore,
	// with no clock of its own, reports LastSeen).
	StoreSeen time.Time
	// Skew is the clock skew the node measured at its previous heartbeat:
	// its clock minus the store's.
	Skew time.Duration
	// Status is set by ListNodes; a Heartbeat ignores it.
	Status NodeStatus
	// GoneAt is when the node was declared dead or left, on the store's
	// clock (zero while live or stale).
	GoneAt time.Time
	// ExecutorTypes are the built-in executor types the node enables
	// (webhook, command, wasm, ...; job.WithExecutorTypes), sorted: the
	// kinds whose stored definitions name one of them run there.
	ExecutorTypes []string
}

// Clone returns a deep copy of n.
func (n *NodeInfo) Clone() *NodeInfo {
	if n == nil {
		return nil
	}
	c := *n
	c.Labels = append([]string(nil), n.Labels...)
	c.Kinds = append([]string(nil), n.Kinds...)
	c.ExecutorTypes = append([]string(nil), n.ExecutorTypes...)
	c.Queues = append([]string(nil), n.Queues...)
	return &c
}

// DefaultNodeRetain is how long a gone node stays listed when
// HeartbeatParams.Retain is 0.
const DefaultNodeRetain = 15 * time.Minute

// HeartbeatParams is the argument of Nodes.Heartbeat.
type HeartbeatParams struct {
	// Node is what the node reports; ID is required. LastSeen is set from
	// Now; StoreSeen, Status and GoneAt are the store's.
	Node NodeInfo
	// Now is the node's clock when it sent the heartbeat.
	Now time.Time
	// DeadAfter is the dead threshold the cluster uses (etcdstore needs it
	// to know which nodes' clocks to compare with). Must be > 0.
	DeadAfter time.Duration
	// Retain is how long gone nodes stay listed before their records are
	// deleted; 0 means DefaultNodeRetain.
	Retain time.Duration
	// Leaving marks the node as stopped (NodeLeft).
	Leaving bool
}

// HeartbeatResult is what Nodes.Heartbeat returns.
type HeartbeatResult struct {
	// StoreNow is the store's clock while it recorded the heartbeat. Zero
	// when the store cannot read a clock yet (etcdstore in the first
	// DeadAfter after a handle's first heartbeat, while it learns the other
	// nodes' clocks): the caller must treat its skew as unknown.
	StoreNow time.Time
	// WasDead reports that the node had been declared dead since its
	// previous heartbeat: its attempts are rescued by others.
	WasDead bool
}

// ListNodesParams is the argument of Nodes.ListNodes.
type ListNodesParams struct {
	// Now is the caller's clock (etcdstore judges staleness by it).
	Now time.Time
	// DeadAfter: a live node not heard from for longer is listed as
	// NodeStale. Must be > 0.
	DeadAfter time.Duration
}

// RescueNodesParams is the argument of Nodes.RescueNodes.
type RescueNodesParams struct {
	// Now is the rescuer's clock, for the history records.
	Now time.Time
	// Node is the rescuer, named in the history records; it is never
	// declared dead by its own call. Required.
	Node string
	// DeadAfter is how long without a heartbeat makes a node dead. Must be
	// > 0.
	DeadAfter time.Duration
	// Limit bounds the attempts rescued by one call; must be > 0.
	Limit int
}

// RescueNodesResult is what Nodes.RescueNodes returns.
type RescueNodesResult struct {
	// Dead are the nodes this call declared dead.
	Dead []string
	// Rescued are the attempts this call moved, in their new state.
	Rescued []*Instance
}

// Validate checks the parameters of a heartbeat.
func (p *HeartbeatParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil heartbeat parameters", ErrInvalid)
	case p.Node.ID == "":
		return fmt.Errorf("%w: heartbeat without a node ID", ErrInvalid)
	case p.DeadAfter <= 0:
		return fmt.Errorf("%w: heartbeat with dead threshold %v; want > 0", ErrInvalid, p.DeadAfter)
	case p.Retain < 0:
		return fmt.Errorf("%w: heartbeat with negative retention %v; use 0 for DefaultNodeRetain", ErrInvalid, p.Retain)
	case p.Now.IsZero():
		return fmt.Errorf("%w: heartbeat without Now", ErrInvalid)
	}
	return nil
}

// Validate checks the parameters of a node listing.
func (p *ListNodesParams) Validate() error {
	if p == nil || p.DeadAfter <= 0 {
		return fmt.Errorf("%w: list nodes needs a dead threshold > 0", ErrInvalid)
	}
	return nil
}

// Validate checks the parameters of a rescue of dead nodes.
func (p *RescueNodesParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil rescue-nodes parameters", ErrInvalid)
	case p.Node == "":
		return fmt.Errorf("%w: rescue nodes without the rescuer's node ID", ErrInvalid)
	case p.DeadAfter <= 0:
		return fmt.Errorf("%w: rescue nodes with dead threshold %v; want > 0", ErrInvalid, p.DeadAfter)
	case p.Limit <= 0:
		return fmt.Errorf("%w: rescue nodes limit %d; want > 0", ErrInvalid, p.Limit)
	}
	return nil
}

// RetainOrDefault returns p.Retain, or DefaultNodeRetain when it is 0.
func (p *HeartbeatParams) RetainOrDefault() time.Duration {
	if p.Retain == 0 {
		return DefaultNodeRetain
	}
	return p.Retain
}

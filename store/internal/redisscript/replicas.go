package redisscript

import (
	"context"
	"fmt"
	"time"

	"github.com/jobkit/job/store"
)

// WithReplicaAcks makes every write that schedules instances (Enqueue:
// ScheduleJob, workflows, cron ticks, shards) wait, on the connection that
// wrote it, until n replicas of the primary acknowledged it (Redis's
// WAIT), for up to timeout. Redis replicates asynchronously: a primary
// that fails over right after acknowledging a schedule can lose it, as
// the promoted replica never received it. With this option an
// acknowledged schedule survives the failover of its primary to any
// replica that acknowledged it; a schedule fewer replicas acknowledged in
// time is reported as store.ErrOutcomeUnknown (it was applied on the
// primary, and a failover now may lose it: repeat it with the same
// unique key to be sure). WAIT makes no write durable on disk, and a
// failover to a replica that did not acknowledge loses the write
// still: n is best the number of replicas a failover may promote. The
// other writes (claims, outcomes) are not waited for: a lost one is
// redone (a claim's attempt is rescued, an outcome's instance is run
// again: at least once). n must be at least 1 and timeout positive; 0
// replicas (the default) waits for none.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return func(o *Options) { o.ReplicaAcks, o.ReplicaAckTimeout = n, timeout }
}

// ReplicaWaiter is implemented by a Runner that can run a script and a
// WAIT on one connection (WithReplicaAcks). RunWait runs s with keys and
// args as Run does (Functions.RunVia gives the steps), then WAIT
// replicas timeout on the same connection, and returns the script's reply
// and how many replicas acknowledged.
type ReplicaWaiter interface {
	RunWait(ctx context.Context, s *Script, keys, args []string, replicas int, timeout time.Duration) (any, int64, error)
}

// replicaAcks is a Core's WithReplicaAcks setting.
type replicaAcks struct {
	n       int
	timeout time.Duration
}

// SetReplicaAcks makes c wait for replicas as o asks (WithReplicaAcks):
// an error wrapping store.ErrInvalid for bad values or a Runner that
// cannot (the plugin's name says which).
func (c *Core) SetReplicaAcks(o Options) error {
	switch {
	case o.ReplicaAcks == 0:
		return nil
	case o.ReplicaAcks < 0 || o.ReplicaAckTimeout <= 0:
		return fmt.Errorf("%w: %s: WithReplicaAcks(%d, %v): want at least 1 replica and a positive timeout (0 replicas waits for none)", store.ErrInvalid, c.name, o.ReplicaAcks, o.ReplicaAckTimeout)
	}
	if _, ok := c.r.(ReplicaWaiter); !ok {
		return fmt.Errorf("%w: %s: WithReplicaAcks: this client cannot wait for replicas", store.ErrInvalid, c.name)
	}
	c.acks = replicaAcks{n: o.ReplicaAcks, timeout: o.ReplicaAckTimeout}
	return nil
}

// runAcked runs an enqueue script s and waits for c.acks.n replicas.
func (c *Core) runAcked(ctx context.Context, s *Script, all []string) (any, error) {
	v, acked, err := c.r.(ReplicaWaiter).RunWait(ctx, s, c.keys.For(s), all, c.acks.n, c.acks.timeout)
	if err != nil {
		return nil, c.failed(ctx, s, err)
	}
	if acked < int64(c.acks.n) {
		return nil, store.OutcomeUnknown(fmt.Errorf("%s: %s: applied on the primary but acknowledged by %d of %d replicas within %v (WithReplicaAcks): a failover now could lose it", c.name, s.Name, acked, c.acks.n, c.acks.timeout))
	}
	return v, nil
}

// RunVia runs s through call as Run does: call(false) sends FCALL, and
// call(true) EVAL of s's source, on a server without Functions; a
// library the server lacks is loaded and the call made again. It serves
// callers that must send more on the connection that runs the script
// (ReplicaWaiter).
func (f *Functions) RunVia(ctx context.Context, call func(eval bool) (any, error)) (any, error) {
	if f.evalOnly.Load() {
		return call(true)
	}
	v, err := call(false)
	if err == nil {
		return v, nil
	}
	return f.recover(ctx, v, err, call)
}

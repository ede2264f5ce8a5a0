package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store/internal/redisscript"
)

// WithReplicaAcks makes every write that schedules instances wait until
// n replicas acknowledged it (Redis's WAIT, on the connection that wrote
// it), for up to timeout; a schedule fewer replicas acknowledged in time
// returns an error wrapping store.ErrOutcomeUnknown. Redis replicates
// asynchronously, so without it a schedule acknowledged just before its
// primary fails over can be lost. See doc/redis-cluster.md ("Failover")
// for what it guarantees and costs. Works on a plain client (a primary
// with replicas, or Sentinel's failover client) and on a cluster client;
// not on a Ring.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return redisscript.WithReplicaAcks(n, timeout)
}

// RunWait implements redisscript.ReplicaWaiter: the script and WAIT in
// one pipeline, on one connection to the primary that holds the keys.
func (r *runner) RunWait(ctx context.Context, s *redisscript.Script, keys, args []string, replicas int, timeout time.Duration) (any, int64, error) {
	node, err := r.primaryFor(ctx, keys)
	if err != nil {
		return nil, 0, err
	}
	var acked int64
	v, err := r.fn.RunVia(ctx, func(eval bool) (any, error) {
		var cmd *redis.Cmd
		if eval {
			all := []any{"eval", s.Source, len(keys)}
			all = append(append(all, toAny(keys)...), toAny(args)...)
			cmd = redis.NewCmd(ctx, all...)
		} else {
			cmd = r.fcallCmd(ctx, s.Function, s.ReadOnly, keys, args)
		}
		wait := redis.NewIntCmd(ctx, "wait", replicas, timeout.Milliseconds())
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			_ = p.Process(ctx, cmd)
			_ = p.Process(ctx, wait)
			return nil
		})
		v, err := cmd.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			reloadOnConnectionError(r.c, err)
			return nil, err
		}
		if acked, err = wait.Result(); err != nil {
			return nil, fmt.Errorf("WAIT after %s: %w", s.Name, err)
		}
		return normalize(v), nil
	})
	return v, acked, err
}

// primaryFor returns the client whose pipelines reach, on one connection,
// the primary that holds keys (all in one slot).
func (r *runner) primaryFor(ctx context.Context, keys []string) (redis.Cmdable, error) {
	switch c := r.c.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		if len(keys) == 0 {
			return nil, errors.New("redisstore: WithReplicaAcks: a script call without keys")
		}
		return c.MasterForKey(ctx, keys[0])
	}
	return nil, fmt.Errorf("redisstore: WithReplicaAcks: a %T cannot wait for replicas on the connection that wrote (use a plain or cluster client)", r.c)
}

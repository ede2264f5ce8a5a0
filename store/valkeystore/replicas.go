package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job/store/internal/redisscript"
)

// WithReplicaAcks makes every write that schedules instances wait until
// n replicas acknowledged it (WAIT, on the connection that wrote it), for
// up to timeout; a schedule fewer replicas acknowledged in time returns
// an error wrapping store.ErrOutcomeUnknown. Valkey and Redis replicate
// asynchronously, so without it a schedule acknowledged just before its
// primary fails over can be lost. See doc/redis-cluster.md ("Failover")
// for what it guarantees and costs. Works on standalone, Sentinel and
// cluster clients.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return redisscript.WithReplicaAcks(n, timeout)
}

// RunWait implements redisscript.ReplicaWaiter: the script and WAIT sent
// together on one dedicated connection to the primary that holds the
// keys (valkey-go's DoMulti sends a batch holding a blocking command on
// one connection too, but does not promise it; Dedicated does).
func (r *runner) RunWait(ctx context.Context, s *redisscript.Script, keys, args []string, replicas int, timeout time.Duration) (any, int64, error) {
	if len(keys) == 0 {
		return nil, 0, errors.New("valkeystore: WithReplicaAcks: a script call without keys")
	}
	var acked int64
	v, err := r.fn.RunVia(ctx, func(eval bool) (any, error) {
		var cmd valkey.Completed
		switch {
		case eval:
			cmd = r.c.B().Eval().Script(s.Source).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		default:
			cmd = r.c.B().Fcall().Function(s.Function).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		}
		wait := r.c.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build().SetSlot(keys[0])
		var res []valkey.ValkeyResult
		_ = r.c.Dedicated(func(dc valkey.DedicatedClient) error {
			res = dc.DoMulti(ctx, cmd, wait)
			return nil
		})
		m, err := res[0].ToMessage()
		isNil := valkey.IsValkeyNil(err)
		if err != nil && !isNil {
			return nil, err
		}
		if acked, err = res[1].AsInt64(); err != nil {
			return nil, fmt.Errorf("WAIT after %s: %w", s.Name, err)
		}
		if isNil {
			return nil, nil
		}
		return normalize(&m)
	})
	return v, acked, err
}

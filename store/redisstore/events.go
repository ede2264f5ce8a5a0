package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store/internal/redisscript"
)

// waitBlock is how long one XREAD BLOCK of the event feed waits. go-redis
// does not cut a blocking read short when its ctx is canceled (only a
// deadline, with ContextTimeoutEnabled), so a feed whose ctx ended leaves
// its last XREAD to end on its own within this while; an idle feed costs
// one XREAD per waitBlock.
const waitBlock = 250 * time.Millisecond

var _ redisscript.StreamWaiter = (*runner)(nil)

// WaitStream implements redisscript.StreamWaiter with XREAD BLOCK on a
// connection of the client's pool, held while it waits.
func (r *runner) WaitStream(ctx context.Context, key, after string) error {
	_, err := bounded(r, ctx, func() (any, error) {
		err := r.c.XRead(ctx, &redis.XReadArgs{Streams: []string{key}, ID: after, Count: 1, Block: waitBlock}).Err()
		if errors.Is(err, redis.Nil) {
			return nil, nil // nothing new within waitBlock
		}
		return nil, err
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Closed implements redisscript.StreamWaiter.
func (r *runner) Closed(err error) bool { return errors.Is(err, redis.ErrClosed) }

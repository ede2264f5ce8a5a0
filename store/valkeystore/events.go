package valkeystore

import (
	"context"
	"errors"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job/store/internal/redisscript"
)

// waitBlock is how long one XREAD BLOCK of the event feed waits; valkey-go
// runs it on a dedicated connection and gives it up (unblocking or closing
// that connection) as soon as the feed's ctx ends.
const waitBlock = 2 * time.Second

var _ redisscript.StreamWaiter = (*runner)(nil)

// WaitStream implements redisscript.StreamWaiter with XREAD BLOCK.
func (r *runner) WaitStream(ctx context.Context, key, after string) error {
	cmd := r.c.B().Xread().Count(1).Block(waitBlock.Milliseconds()).Streams().Key(key).Id(after).Build()
	err := r.c.Do(ctx, cmd).Error()
	if err == nil || valkey.IsValkeyNil(err) || ctx.Err() != nil {
		return nil
	}
	return err
}

// Closed implements redisscript.StreamWaiter.
func (r *runner) Closed(err error) bool { return errors.Is(err, valkey.ErrClosing) }

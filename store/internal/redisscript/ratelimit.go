package redisscript

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jobkit/job/store"
)

// RateDelay pushes a rate limit's next start back (lua/rate_delay.lua).
var RateDelay = loadBare("rate_delay", "")

func init() { All = append(All, RateDelay) }

// EnforcesRateLimits implements store.RateLimitEnforcer: the claim script
// enforces ClaimParams.RateLimits on the server's clock (TIME), keeping
// each limit's GCRA time in the namespace's rl hash (claim.lua).
func (c *Core) EnforcesRateLimits() bool { return true }

// appendRateLimits appends the claim script's rate limit arguments: how
// many, then kind, queue, interval and tolerance (us) of each.
func appendRateLimits(args []string, ls []store.RateLimit) []string {
	args = append(args, itoa(len(ls)))
	for _, l := range ls {
		args = append(args, l.Kind, l.Queue, strconv.FormatInt(l.Interval().Microseconds(), 10), strconv.FormatInt(l.Tolerance().Microseconds(), 10))
	}
	return args
}

// DelayRateLimit implements store.RateLimitDelayer, on the server's clock.
func (c *Core) DelayRateLimit(ctx context.Context, l store.RateLimit, d time.Duration) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("%s: delay rate limit: %w", c.name, err)
	}
	if d < 0 {
		return fmt.Errorf("%s: delay rate limit of %s: %w: negative delay %s", c.name, l.Scope(), store.ErrInvalid, d)
	}
	_, err := c.r.Run(ctx, RateDelay, []string{c.keys.Prefix + "rl"}, []string{l.Kind + "\x00" + l.Queue, strconv.FormatInt(l.Tolerance().Microseconds(), 10), strconv.FormatInt(d.Microseconds(), 10)})
	if err != nil {
		return fmt.Errorf("%s: delay rate limit of %s: %w", c.name, l.Scope(), err)
	}
	return nil
}

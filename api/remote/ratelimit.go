package remote

import (
	"context"
	"time"

	"github.com/jobkit/job/api/remote/wire"
	"github.com/jobkit/job/store"
)

// EnforcesRateLimits implements store.RateLimitEnforcer: jobd applies the
// rate limits of every claim (store.ClaimParams.RateLimits, or its
// cluster's when a claim carries none) with job.Manager.ApplyLimits,
// enforced by its own store on that store's clock or, when that store
// cannot, by leaving out what they bound.
func (s *Store) EnforcesRateLimits() bool { return true }

// DelayRateLimit implements store.RateLimitDelayer through jobd's store.
func (s *Store) DelayRateLimit(ctx context.Context, l store.RateLimit, d time.Duration) error {
	return s.unaryCall(ctx, wire.MethodDelayRateLimit, &wire.DelayRateLimit{Limit: l, Delay: d}, nil)
}

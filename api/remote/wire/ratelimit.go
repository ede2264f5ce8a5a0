package wire

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jobkit/job/store"
)

// flatRateLimits lays ls out for the keyed encoding: kind, queue, rate,
// period (ns) and burst of each, in turn.
func flatRateLimits(ls []store.RateLimit) []string {
	out := make([]string, 0, 5*len(ls))
	for _, l := range ls {
		out = append(out, l.Kind, l.Queue, strconv.Itoa(l.Rate), strconv.FormatInt(int64(l.Period), 10), strconv.Itoa(l.Burst))
	}
	return out
}

// unflatRateLimits reads what flatRateLimits laid out.
func unflatRateLimits(flat []string) ([]store.RateLimit, error) {
	if len(flat)%5 != 0 {
		return nil, fmt.Errorf("%w: rate limits: %d strings, want kind, queue, rate, period and burst of each", store.ErrInvalid, len(flat))
	}
	out := make([]store.RateLimit, 0, len(flat)/5)
	for i := 0; i < len(flat); i += 5 {
		rate, err1 := strconv.Atoi(flat[i+2])
		period, err2 := strconv.ParseInt(flat[i+3], 10, 64)
		burst, err3 := strconv.Atoi(flat[i+4])
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("%w: rate limit of kind %q in queue %q: rate %q, period %q, burst %q", store.ErrInvalid, flat[i], flat[i+1], flat[i+2], flat[i+3], flat[i+4])
		}
		out = append(out, store.RateLimit{Kind: flat[i], Queue: flat[i+1], Rate: rate, Period: time.Duration(period), Burst: burst})
	}
	return out, nil
}

// MethodDelayRateLimit is store.RateLimitDelayer.DelayRateLimit.
const MethodDelayRateLimit = "DelayRateLimit"

// DelayRateLimit is the parameters of MethodDelayRateLimit.
type DelayRateLimit struct {
	Limit store.RateLimit
	Delay time.Duration
}

func init() {
	methods[MethodDelayRateLimit] = errOnly(func(ctx context.Context, st store.Store, p *DelayRateLimit) error {
		if p == nil {
			return fmt.Errorf("%w: delay rate limit without parameters", store.ErrInvalid)
		}
		d, ok := st.(store.RateLimitDelayer)
		if !ok || !store.EnforcesRateLimits(st) {
			return fmt.Errorf("%w: the server's store does not enforce rate limits", store.ErrInvalid)
		}
		return d.DelayRateLimit(ctx, p.Limit, p.Delay)
	})
}

package benchkit

import (
	"context"
	"fmt"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// ClaimCost fills a fresh namespace of j's store to depth once and
// returns the mean time in µs of one store.Claim of one instance plus its
// Finish, over min(rounds, depth/2) rounds (so the depth stays about the
// same), measured passes times on that queue: "µs" is the median pass.
// Filling is the slow part at a million, so it is done once.
func ClaimCost(ctx context.Context, j *Jobkit, depth, rounds, passes int, limit time.Duration) (Sample, error) {
	ns := NewNamespace("claim")
	s, err := j.OpenStore(ns)
	if err != nil {
		return nil, err
	}
	defer func() {
		if c, ok := s.(store.Closer); ok {
			_ = c.Close()
		}
		j.DropNamespace(ctx, ns)
	}()
	end := time.Now().Add(limit)
	fctx, cancel := context.WithDeadline(ctx, end)
	err = FillStore(fctx, s, depth, time.Now())
	cancel()
	if err != nil {
		if fctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("claim cost: storing %d instances took longer than %v: %w", depth, limit, ErrCutShort)
		}
		return nil, fmt.Errorf("fill: %w", err)
	}
	rounds = max(1, min(rounds, depth/2/max(passes, 1)))
	var means []float64
	for range max(passes, 1) {
		start := time.Now()
		done := 0
		for ; done < rounds; done++ {
			if done%64 == 0 && time.Now().After(end) {
				break
			}
			now := time.Now()
			res, err := s.Claim(ctx, &store.ClaimParams{Queue: job.DefaultQueue, Owner: "bench", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)})
			if err != nil || len(res.Instances) != 1 {
				return nil, fmt.Errorf("claim at depth %d: %v (%d claimed)", depth, err, len(res.Instances))
			}
			in := res.Instances[0]
			if _, err := s.Finish(ctx, &store.FinishParams{Owner: "bench", Now: now, Outcomes: []store.Outcome{{ID: in.ID, Attempt: in.Attempt, State: store.Completed}}}); err != nil {
				return nil, err
			}
		}
		if done > 0 {
			means = append(means, float64(time.Since(start).Microseconds())/float64(done))
		}
		if done < rounds {
			v := Sample{"µs": Median(means)}
			if len(means) == 0 {
				v = nil
			}
			return v, fmt.Errorf("claim cost at depth %d: %d of %d rounds in the %v limit (fill included): %w", depth, done, rounds, limit, ErrCutShort)
		}
	}
	return Sample{"µs": Median(means)}, nil
}

package memdbstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jobkit/job/store"
)

// Rate limits (store.ClaimParams.RateLimits): the store keeps each
// limit's GCRA time (store.RateState) by kind and queue, under the write
// lock, and reads the time from its own clock (WithClock; time.Now by
// default), not from ClaimParams.Now. A claim applies them in the same
// gate as the concurrency limits (limits.go): a lane of a kind whose rate
// limit lets none start now sits the claim out, each round takes no more
// than the smallest room left, and each start is counted at once.

// rateKey names a rate limit's state.
type rateKey struct{ kind, queue string }

// EnforcesRateLimits implements store.RateLimitEnforcer.
func (s *Store) EnforcesRateLimits() bool { return true }

// rateGate applies a claim's rate limits (those that may match its queue).
type rateGate struct {
	ls    []store.RateLimit
	st    []*store.RateState
	now   int64            // the store's clock, in nanoseconds
	kinds map[string][]int // per kind: the limits that match it
	// wait is the least time until a limit that held a lane back lets
	// one start (ClaimResult.RetryAfter); 0 when none held one back.
	wait time.Duration
}

// rateGate returns the gate of p's rate limits; s.mu is held.
func (s *Store) rateGate(p *store.ClaimParams) rateGate {
	var g rateGate
	for _, l := range p.RateLimits {
		if l.Queue != "" && l.Queue != p.Queue {
			continue
		}
		if s.rates == nil {
			s.rates = map[rateKey]*store.RateState{}
		}
		k := rateKey{l.Kind, l.Queue}
		st := s.rates[k]
		if st == nil {
			st = &store.RateState{}
			s.rates[k] = st
		}
		g.ls, g.st = append(g.ls, l), append(g.st, st)
	}
	if len(g.ls) > 0 {
		g.now = s.clock().UnixNano()
		g.kinds = map[string][]int{}
		s.forgetRates(g.now)
	}
	return g
}

// forgetRates drops, now and then, the states of limits idle long enough
// that they are back to a fresh limit's (TAT in the past), so the states
// of deleted limits do not stay.
func (s *Store) forgetRates(now int64) {
	if len(s.rates) < 64 {
		return
	}
	for k, st := range s.rates {
		if st.TAT < now {
			delete(s.rates, k)
		}
	}
}

func (g *rateGate) of(kind string) []int {
	ix, ok := g.kinds[kind]
	if !ok {
		for i, l := range g.ls {
			if l.Kind == "" || l.Kind == kind {
				ix = append(ix, i)
			}
		}
		g.kinds[kind] = ix
	}
	return ix
}

// room returns how many instances of kind the rate limits let start now.
func (g *rateGate) room(kind string) int {
	if len(g.ls) == 0 {
		return math.MaxInt
	}
	room := math.MaxInt
	for _, i := range g.of(kind) {
		r, wait := g.st[i].Room(g.ls[i], g.now)
		if r == 0 && (g.wait == 0 || wait < g.wait) {
			g.wait = wait
		}
		room = min(room, r)
	}
	return room
}

// took counts a start of an instance of kind.
func (g *rateGate) took(kind string) {
	if len(g.ls) == 0 {
		return
	}
	for _, i := range g.of(kind) {
		g.st[i].Take(g.ls[i], g.now)
	}
}

// DelayRateLimit implements store.RateLimitDelayer.
func (s *Store) DelayRateLimit(ctx context.Context, l store.RateLimit, d time.Duration) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("memdbstore: delay rate limit: %w", err)
	}
	if d < 0 {
		return fmt.Errorf("memdbstore: delay rate limit of %s: %w: negative delay %s", l.Scope(), store.ErrInvalid, d)
	}
	return s.write(ctx, "delay rate limit", func() error {
		if s.rates == nil {
			s.rates = map[rateKey]*store.RateState{}
		}
		k := rateKey{l.Kind, l.Queue}
		st := s.rates[k]
		if st == nil {
			st = &store.RateState{}
			s.rates[k] = st
		}
		st.Delay(l, s.clock().UnixNano(), d)
		return nil
	})
}

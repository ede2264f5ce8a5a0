package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// BenchmarkEventLatency measures how long a transition takes to reach a
// follower of s (store.Events): each iteration enqueues one instance
// through s and waits on a feed (opened on follower, a handle on the same
// namespace) for its Created event. It reports the percentiles of two
// spans: from the Enqueue call to the event ("write+event", which holds
// the write's round trip), and from Enqueue's return to the event
// ("after-reply", 0 when the event came first), in microseconds.
//
//	func BenchmarkEventLatency(b *testing.B) { storetest.BenchmarkEventLatency(b, open(b), open(b)) }
func BenchmarkEventLatency(b *testing.B, s, follower store.Store) {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	ch, err := follower.Follow(ctx, &store.FollowParams{})
	if err != nil {
		b.Fatalf("Follow: %v", err)
	}
	total := make([]time.Duration, 0, b.N)
	after := make([]time.Duration, 0, b.N)
	now := time.Now().UTC().Truncate(time.Millisecond)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("lat-%d-%d", now.UnixNano(), i)
		in := &store.Instance{ID: id, Kind: "bench", Queue: "bench-events", RunAt: now.Add(time.Hour), CreatedAt: now}
		t0 := time.Now()
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Node: "bench", Now: now}); err != nil {
			b.Fatalf("Enqueue: %v", err)
		}
		t1 := time.Now()
		for {
			select {
			case ev, ok := <-ch:
				if !ok || ev.Err != nil {
					b.Fatalf("feed ended: %v", ev.Err)
				}
				if ev.InstanceID != id || ev.State != store.Created {
					continue
				}
			case <-time.After(10 * time.Second):
				b.Fatalf("no event for %s within 10s", id)
			}
			break
		}
		t2 := time.Now()
		total = append(total, t2.Sub(t0))
		after = append(after, max(0, t2.Sub(t1)))
	}
	b.StopTimer()
	report := func(name string, d []time.Duration) {
		slices.Sort(d)
		pct := func(p float64) float64 {
			return float64(d[min(len(d)-1, int(p*float64(len(d))))].Nanoseconds()) / 1e3
		}
		b.ReportMetric(pct(0.50), name+"-p50-us")
		b.ReportMetric(pct(0.99), name+"-p99-us")
	}
	report("write+event", total)
	report("after-reply", after)
	b.ReportMetric(0, "ns/op")
}

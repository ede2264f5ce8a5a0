package server

import (
	"context"
	"testing"
	"time"

	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// slowSubscribe is a memdb store whose wake-up subscriptions take long to
// confirm, as a Redis SUBSCRIBE on a fresh connection does on a loaded
// machine (redisscript waits up to 10 s for the confirmation).
type slowSubscribe struct {
	*memdbstore.Store
	entered chan struct{}
	delay   time.Duration
}

func (s *slowSubscribe) Subscribe(ctx context.Context, q string) (<-chan struct{}, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
	}
	return s.Store.Subscribe(ctx, q)
}

// TestExecutorSlowSubscribeHoldsNoCalls: while jobd subscribes to a
// queue's wake-ups for a worker's credit (slow here: 3 s), the worker's
// session calls go on. They used to wait for the subscription, which jobd
// made holding the session's lock: under load a worker's heartbeats and
// renewals then timed out for its fence window and it fenced its attempts
// with jobd and the store both healthy (seen in the scenario suite
// through jobd under -race).
func TestExecutorSlowSubscribeHoldsNoCalls(t *testing.T) {
	mem, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	st := &slowSubscribe{Store: mem, entered: make(chan struct{}, 1), delay: 3 * time.Second}
	_, url := executorServer(t, st, nil, "default")
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "w1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	beat := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := rs.Heartbeat(ctx, &store.HeartbeatParams{
			Node: store.NodeInfo{ID: "w1", Workers: 4, Kinds: []string{"k"}, Queues: []string{"default"}},
			Now:  time.Now(), DeadAfter: time.Second,
		})
		return err
	}
	if err := beat(); err != nil {
		t.Fatalf("first heartbeat: %v", err)
	}
	// A claim that finds nothing leaves credit: jobd's pusher subscribes
	// to the queue's wake-ups.
	now := time.Now()
	if _, err := rs.Claim(t.Context(), &store.ClaimParams{Queue: "default", Owner: "w1", Limit: 4, Now: now, LeaseUntil: now.Add(30 * time.Second), Kinds: []string{"k"}}); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("jobd did not subscribe to the queue's wake-ups")
	}
	start := time.Now()
	if err := beat(); err != nil {
		t.Fatalf("heartbeat while jobd subscribes: %v after %v; want it answered at once", err, time.Since(start))
	}
	t.Logf("heartbeat while jobd subscribes answered in %v", time.Since(start))
}

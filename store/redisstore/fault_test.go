package redisstore_test

// Faults of a real redis-server the test starts itself: frozen with
// SIGSTOP, and at maxmemory.

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/redisstore"
)

var ft0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

func finst(id string) *store.Instance {
	return &store.Instance{ID: id, Kind: "k", Queue: "q", Args: []byte(`[1]`), RunAt: ft0, CreatedAt: ft0, MaxRetries: 3}
}

func TestNewRejectsBadNamespace(t *testing.T) {
	t.Parallel()
	c := client(t)
	for _, ns := range []string{"", "a{b", "x}"} {
		s, err := redisstore.New(c, redisstore.WithNamespace(ns))
		if !errors.Is(err, store.ErrInvalid) || s != nil {
			t.Errorf("New with namespace %q: store %v, err %v; want no store and an error wrapping store.ErrInvalid", ns, s, err)
		}
	}
	if _, err := redisstore.New(nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("New(nil): %v, want an error wrapping store.ErrInvalid", err)
	}
}

// freeze stops p with SIGSTOP until the returned func (also registered as
// cleanup) sends SIGCONT.
func freeze(t *testing.T, p *testserver.Process) (thaw func()) {
	t.Helper()
	if err := syscall.Kill(p.PID(), syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP redis-server: %v", err)
	}
	done := false
	thaw = func() {
		if !done {
			done = true
			if err := syscall.Kill(p.PID(), syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT redis-server: %v", err)
			}
		}
	}
	t.Cleanup(thaw)
	return thaw
}

// A store call on a frozen Redis returns when its ctx ends, with or
// without go-redis's ContextTimeoutEnabled. Before, a client without it
// waited for its 3 s ReadTimeout whatever the ctx said.
func TestCallBoundedByCtxWhileRedisFrozen(t *testing.T) {
	t.Parallel()
	p := testserver.StartRedis(t)
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: ctxTimeouts, MaxRetries: -1})
			t.Cleanup(func() { c.Close() })
			s := newStore(t, c, fmt.Sprintf("frozen%v", ctxTimeouts))
			if _, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{finst("warm")}, Now: ft0, Node: "n"}); err != nil {
				t.Fatal(err)
			}
			thaw := freeze(t, p)
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{finst("frozen")}, Now: ft0, Node: "n"})
			took := time.Since(start)
			thaw()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Enqueue on a frozen Redis: %v, want context.DeadlineExceeded", err)
			}
			if took > 1500*time.Millisecond {
				t.Fatalf("Enqueue with a 300ms ctx on a frozen Redis returned after %v", took)
			}
		})
	}
}

// At maxmemory (noeviction) a claim is refused as a whole with ErrFull:
// nothing is claimed, so nothing runs that could not be recorded. Renewals
// and retention still work, finishes are refused, and everything works
// again once memory is back. Before, the claim script's first writes (which
// free memory) were allowed, and Redis let the rest of it run too.
func TestOutOfMemory(t *testing.T) {
	t.Parallel()
	p := testserver.StartRedis(t, "--maxmemory-policy", "noeviction")
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c, "oom")
	ctx := t.Context()
	var ins []*store.Instance
	for i := range 20 {
		ins = append(ins, finst(fmt.Sprintf("i%02d", i)))
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: ft0, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	held, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: ft0, LeaseUntil: ft0.Add(time.Minute)})
	if err != nil || len(held.Instances) != 1 {
		t.Fatalf("claim before the memory ran out: %v %v", held, err)
	}
	makeRoom := fillUp(t, c)

	_, err = s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 5, Now: ft0, LeaseUntil: ft0.Add(time.Minute), ClaimSeq: 1})
	if !errors.Is(err, store.ErrFull) {
		t.Fatalf("Claim at maxmemory: %v, want an error wrapping store.ErrFull", err)
	}
	got, err := s.LookupInstances(ctx, &store.Query{States: []store.State{store.Processing}})
	if err != nil || len(got) != 1 {
		t.Fatalf("Processing instances after a refused claim: %d (%v), want only the one claimed before", len(got), err)
	}
	ref := store.LeaseRef{ID: held.Instances[0].ID, Attempt: 1}
	if rr, err := s.Renew(ctx, &store.RenewParams{Owner: "w", Leases: []store.LeaseRef{ref}, Until: ft0.Add(2 * time.Minute), Now: ft0}); err != nil || len(rr.Lost) != 0 {
		t.Fatalf("Renew at maxmemory: %v %v, want the lease renewed", rr, err)
	}
	out := store.Outcome{ID: ref.ID, Attempt: 1, State: store.Completed, Result: []byte(`[1]`)}
	if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: ft0, Outcomes: []store.Outcome{out}}); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Finish at maxmemory: %v, want an error wrapping store.ErrFull", err)
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{finst("more")}, Now: ft0, Node: "n"}); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Enqueue at maxmemory: %v, want an error wrapping store.ErrFull", err)
	}
	if _, err := s.Prune(ctx, &store.PruneParams{Now: ft0, FinishedBefore: ft0}); err != nil {
		t.Fatalf("Prune at maxmemory: %v, want it to run (it frees memory)", err)
	}

	makeRoom()
	errs, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: ft0, Outcomes: []store.Outcome{out}})
	if err != nil || errs[0].Err != nil {
		t.Fatalf("Finish once memory is back: %v %v", errs, err)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 5, Now: ft0, LeaseUntil: ft0.Add(time.Minute), ClaimSeq: 2})
	if err != nil || len(res.Instances) != 5 {
		t.Fatalf("Claim once memory is back: %v %v, want 5", res, err)
	}
}

// fillUp makes c's redis-server refuse writes for want of memory
// (maxmemory 1; the test servers run with noeviction) until the returned
// func sets maxmemory back to 0; a test that ends first gets it back from
// Cleanup.
func fillUp(t *testing.T, c *redis.Client) (makeRoom func()) {
	t.Helper()
	if err := c.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	full := true
	t.Cleanup(func() {
		if full {
			c.ConfigSet(context.Background(), "maxmemory", "0")
		}
	})
	return func() {
		t.Helper()
		if err := c.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		full = false
	}
}

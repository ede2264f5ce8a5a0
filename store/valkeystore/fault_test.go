package valkeystore_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/valkeystore"
)

func TestNewRejectsBadNamespace(t *testing.T) {
	t.Parallel()
	c := newClient(t, testserver.Redis(t))
	for _, ns := range []string{"", "a{b", "x}"} {
		s, err := valkeystore.New(c, valkeystore.WithNamespace(ns))
		if !errors.Is(err, store.ErrInvalid) || s != nil {
			t.Errorf("New with namespace %q: store %v, err %v; want no store and an error wrapping store.ErrInvalid", ns, s, err)
		}
	}
	if _, err := valkeystore.New(nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("New(nil): %v, want an error wrapping store.ErrInvalid", err)
	}
}

// A store call on a frozen server returns when its ctx ends.
func TestCallBoundedByCtxWhileFrozen(t *testing.T) {
	t.Parallel()
	p := testserver.StartRedis(t)
	c := newClient(t, p.Addr)
	s := newStore(t, c, "frozen")
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	in := func(id string) *store.Instance {
		return &store.Instance{ID: id, Kind: "k", Queue: "q", RunAt: t0, CreatedAt: t0}
	}
	if _, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{in("warm")}, Now: t0, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			syscall.Kill(p.PID(), syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in("frozen")}, Now: t0, Node: "n"})
	took := time.Since(start)
	thaw()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enqueue on a frozen server: %v, want context.DeadlineExceeded", err)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("Enqueue with a 300ms ctx on a frozen server returned after %v", took)
	}
}

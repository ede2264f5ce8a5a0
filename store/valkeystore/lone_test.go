package valkeystore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// lastCommands returns the last command of each connection named name,
// by connection ID, as CLIENT LIST shows them (read through c, whose own
// connections have another name).
func lastCommands(t *testing.T, c valkey.Client, name string) map[string]string {
	t.Helper()
	list, err := c.Do(context.Background(), c.B().ClientList().Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
		f := map[string]string{}
		for kv := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(kv, "=")
			k = strings.TrimPrefix(k, "txt:") // a RESP3 verbatim string's format
			f[k] = v
		}
		if f["name"] == name {
			out[f["id"]] = f["cmd"]
		}
	}
	return out
}

// A lone call does not go through the connection valkey-go pipelines
// concurrent callers on: once that connection has served concurrent
// callers it hands every command to a writer and a reader goroutine for
// good, which nearly doubled a lone ScheduleJob's latency (issue 39: p50
// 95 µs against 53 µs on a fresh client). The lone calls take a
// connection of the client's pool of dedicated ones instead.
func TestLoneCallsSkipThePipelinedConnection(t *testing.T) {
	t.Parallel()
	addr := testserver.Redis(t)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, ClientName: "lone-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	m, err := job.NewManager(job.WithStore(newStore(t, c, "lone_pipe")))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("email.send"), job.WithExecutor(func(to string) {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// The store's first calls: its Functions library loaded, and a
	// dedicated connection opened.
	for range 3 {
		if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("a@example.com")); err != nil {
			t.Fatal(err)
		}
	}
	// Concurrent callers on the client's pipelined connection: ECHO,
	// which the store never sends, marks it in CLIENT LIST.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if err := c.Do(ctx, c.B().Echo().Message("x").Build()).Error(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The dedicated connection opens in the background after the first
	// lone call: give it until the deadline.
	inspect := newClient(t, addr)
	var last map[string]string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if err := c.Do(ctx, c.B().Echo().Message("x").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		var piped []string
		for id, cmd := range lastCommands(t, inspect, "lone-test") {
			if cmd == "echo" {
				piped = append(piped, id)
			}
		}
		if len(piped) != 1 {
			t.Fatalf("connections whose last command is the ECHO: %v, want 1 (%v)", piped, lastCommands(t, inspect, "lone-test"))
		}
		for range 20 {
			if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("a@example.com")); err != nil {
				t.Fatal(err)
			}
		}
		last = lastCommands(t, inspect, "lone-test")
		if last[piped[0]] == "echo" {
			return
		}
	}
	t.Fatalf("last commands of the client's connections after lone ScheduleJob calls: %v; want the pipelined connection's ECHO still (the calls on a dedicated connection)", last)
}

// A call whose ctx can be canceled but has no deadline still returns when
// the ctx is canceled on a frozen server: valkey-go watches such a ctx
// only on its pipelined connection, so the store sends it there.
//
// valkey-go spreads commands at random over its pipelined connections (2
// on 2 CPUs) and dials each at its first use, and the dial's handshake
// waits for the server up to the client's Dialer.Timeout (5 s) whatever
// the ctx: a call that met a connection not dialed yet took 5 s (the CI
// run at da45024; 1 run in 4 here). So every connection is used before
// the server is frozen: the documented wait on a dial is
// TestDeadlineBoundsTheFirstDialWhileFrozen's.
func TestCanceledCallReturnsWhileFrozen(t *testing.T) {
	t.Parallel()
	p := testserver.StartRedis(t)
	c := newClient(t, p.Addr)
	s := newStore(t, c, "frozen_cancel")
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	in := func(id string) *store.Instance {
		return &store.Instance{ID: id, Kind: "k", Queue: "q", RunAt: t0, CreatedAt: t0}
	}
	for i := range 64 { // each of the client's connections, but for 1 chance in 2^63
		if _, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{in(fmt.Sprintf("warm-%d", i))}, Now: t0, Node: "n"}); err != nil {
			t.Fatal(err)
		}
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
	ctx, cancel := context.WithCancel(t.Context())
	timer := time.AfterFunc(300*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	_, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in("frozen")}, Now: t0, Node: "n"})
	took := time.Since(start)
	thaw()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Enqueue on a frozen server, ctx canceled: %v, want context.Canceled", err)
	}
	if took > 3*time.Second {
		t.Fatalf("Enqueue whose ctx was canceled after 300ms on a frozen server returned after %v", took)
	}
}

// A call with a deadline returns by it on a frozen server even when it is
// the first to use a connection valkey-go dials then (its handshake waits
// up to the client's Dialer.Timeout, 5 s, for a ctx without a deadline):
// the store's doc advises a deadline for that reason.
func TestDeadlineBoundsTheFirstDialWhileFrozen(t *testing.T) {
	t.Parallel()
	p := testserver.StartRedis(t)
	c := newClient(t, p.Addr) // dials one connection; the others at first use
	s := newStore(t, c, "frozen_dial")
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	if err := syscall.Kill(p.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(p.PID(), syscall.SIGCONT) })
	for i := range 8 { // 8 calls: each connection is met, the undialed ones too
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		start := time.Now()
		_, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{{ID: fmt.Sprintf("d-%d", i), Kind: "k", Queue: "q", RunAt: t0, CreatedAt: t0}}, Now: t0, Node: "n"})
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Enqueue %d on a frozen server with a 300ms deadline: %v, want context.DeadlineExceeded", i, err)
		}
		if took > 3*time.Second {
			t.Fatalf("Enqueue %d with a 300ms deadline on a frozen server returned after %v", i, took)
		}
	}
}

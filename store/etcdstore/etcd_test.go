package etcdstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func testInst(id string) *store.Instance {
	return &store.Instance{ID: id, Kind: "k", Queue: "q", Args: []byte(`[1]`), RunAt: t0, CreatedAt: t0, MaxRetries: 2}
}

func mustEnqueue(t *testing.T, s store.Store, ins ...*store.Instance) {
	t.Helper()
	res, err := s.Enqueue(context.Background(), &store.EnqueueParams{Instances: ins, Now: t0, Node: "n"})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("enqueue %s: %v", r.ID, r.Err)
		}
	}
}

func claimN(t *testing.T, s store.Store, owner string, n int) []*store.Instance {
	t.Helper()
	res, err := s.Claim(context.Background(), &store.ClaimParams{Queue: "q", Owner: owner, Limit: n, Now: t0, LeaseUntil: t0.Add(time.Hour)})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return res.Instances
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// A process that dies without a word (its client gone, no Close) loses its
// claims when its etcd lease ends: Rescue takes them back within the TTL,
// long before their contract lease deadline (an hour here).
func TestProcessDeathRescueWithinTTL(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	cleanup(t, ns)
	eps := testserver.Etcd(t)
	dyingCli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	dying, err := etcdstore.New(dyingCli, etcdstore.WithNamespace(ns), etcdstore.WithLeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	alive := open(t, ns)
	mustEnqueue(t, alive, testInst("a"), testInst("b"), testInst("c"))
	if got := claimN(t, dying, "dying", 2); len(got) != 2 {
		t.Fatalf("claimed %d, want 2", len(got))
	}
	// Alive and well: nothing to rescue.
	out, err := alive.Rescue(context.Background(), &store.RescueParams{Now: t0.Add(time.Second), Limit: 10, Node: "r"})
	if err != nil || len(out) != 0 {
		t.Fatalf("rescue while the owner lives: %d rescued, err %v", len(out), err)
	}
	dyingCli.Close() // the keep-alive stops, as when the process is killed
	killed := time.Now()
	var rescued []*store.Instance
	waitFor(t, 2*time.Second+3*time.Second, "rescue after the owner died", func() bool {
		out, err := alive.Rescue(context.Background(), &store.RescueParams{Now: t0.Add(time.Second), Limit: 10, Node: "r"})
		if err != nil {
			t.Fatalf("rescue: %v", err)
		}
		rescued = append(rescued, out...)
		return len(rescued) == 2
	})
	t.Logf("claims of a dead process rescued %v after its client closed (lease TTL 2s)", time.Since(killed).Round(10*time.Millisecond))
	for _, in := range rescued {
		if in.State != store.Scheduled || in.Attempt != 1 || !strings.Contains(in.Error, "etcd lease") {
			t.Errorf("rescued %s: state %v attempt %d error %q", in.ID, in.State, in.Attempt, in.Error)
		}
	}
	_ = dying.Close() // its client is gone: Close must still return
}

// Close revokes the handle's lease: its claims are rescuable at once.
func TestCloseHandsClaimsToRescue(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	cleanup(t, ns)
	a, err := etcdstore.New(newClient(t, testserver.Etcd(t)), etcdstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, ns)
	mustEnqueue(t, b, testInst("x"))
	claimN(t, a, "a", 1)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := b.Rescue(context.Background(), &store.RescueParams{Now: t0, Limit: 10, Node: "b"})
	if err != nil || len(out) != 1 {
		t.Fatalf("rescue after Close: %d rescued, err %v", len(out), err)
	}
	if _, err := a.Claim(context.Background(), &store.ClaimParams{Queue: "q", Owner: "a", Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Minute)}); err == nil {
		t.Fatal("claim on a closed store succeeded")
	}
}

// A handle cut off from etcd for longer than its lease TTL learns at its
// next Renew that its attempt is lost, and cannot finish it after another
// node rescued it.
func TestLostEtcdLease(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	p := keyPrefix(ns)
	cleanup(t, ns)
	a := open(t, ns)
	b := open(t, ns)
	mustEnqueue(t, a, testInst("x"))
	in := claimN(t, a, "a", 1)[0]
	// Revoke a's lease behind its back, as etcd does when keep-alives stop
	// arriving for a TTL.
	cli := newClient(t, testserver.Etcd(t))
	resp, err := cli.Get(context.Background(), p+"a/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("liveness keys: %v, %d", err, len(resp.Kvs))
	}
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	rr, err := a.Renew(context.Background(), &store.RenewParams{Owner: "a", Leases: []store.LeaseRef{{ID: in.ID, Attempt: in.Attempt}}, Until: t0.Add(2 * time.Hour), Now: t0})
	if err != nil || len(rr.Lost) != 1 {
		t.Fatalf("renew after the etcd lease ended: %+v, %v; want the attempt lost", rr, err)
	}
	out, err := b.Rescue(context.Background(), &store.RescueParams{Now: t0, Limit: 10, Node: "b"})
	if err != nil || len(out) != 1 {
		t.Fatalf("rescue: %d, %v", len(out), err)
	}
	errs, err := a.Finish(context.Background(), &store.FinishParams{Owner: "a", Now: t0, Outcomes: []store.Outcome{{ID: in.ID, Attempt: in.Attempt, State: store.Completed}}})
	if err != nil || !errors.Is(errs[0].Err, store.ErrLeaseLost) {
		t.Fatalf("finish after rescue: %v, %v; want ErrLeaseLost", errs, err)
	}
	// a takes a new lease and keeps working.
	if got := claimN(t, a, "a", 1); len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("claim again after losing the lease: %v", got)
	}
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	cleanup(t, ns)
	s := open(t, ns)
	big := testInst("big")
	big.Args = bytes.Repeat([]byte("x"), 600<<10)
	_, err := s.Enqueue(context.Background(), &store.EnqueueParams{Instances: []*store.Instance{testInst("ok"), big}, Now: t0})
	if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), "big") || !strings.Contains(err.Error(), "WithMaxValueBytes") {
		t.Fatalf("enqueue of 600 KiB arguments: %v; want ErrTooLarge naming the instance and the fix", err)
	}
	// Nothing of the batch was stored; a smaller one goes through.
	if ins, _ := s.LookupInstances(context.Background(), &store.Query{}); len(ins) != 0 {
		t.Fatalf("%d instances stored after a rejected batch", len(ins))
	}
	big.Args = bytes.Repeat([]byte("x"), 200<<10)
	mustEnqueue(t, s, big)
	if got := claimN(t, s, "w", 1); len(got) != 1 || len(got[0].Args) != 200<<10 {
		t.Fatal("200 KiB arguments did not round-trip")
	}
}

// A corrupt value affects its own record only.
func TestCorruptRecords(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	p := keyPrefix(ns)
	cleanup(t, ns)
	s := open(t, ns)
	mustEnqueue(t, s, testInst("a"), testInst("b"), testInst("c"), testInst("d"))
	cli := newClient(t, testserver.Etcd(t))
	ctx := context.Background()
	// b: its ready-index entry is garbage; c: its static record is.
	resp, err := cli.Get(ctx, p+"r/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Value), `"id":"b"`) {
			if _, err := cli.Put(ctx, string(kv.Key), "{garbage"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := cli.Put(ctx, p+"i/c", "\x00\x01"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, p+"s/d", "not json"); err != nil {
		t.Fatal(err)
	}
	got := claimN(t, s, "w", 10)
	var ids []string
	for _, in := range got {
		ids = append(ids, in.ID)
	}
	// a is fine; d's index copy is fine, so it is claimed (and its dynamic
	// record rewritten); b is quarantined; c is claimed and terminated.
	if strings.Join(ids, ",") != "a,d" {
		t.Fatalf("claimed %v, want [a d]", ids)
	}
	if q, _ := cli.Get(ctx, p+"bad/", clientv3.WithPrefix(), clientv3.WithCountOnly()); q.Count != 1 {
		t.Fatalf("%d quarantined entries, want 1", q.Count)
	}
	// Lookups return what decodes and name what does not.
	ins, err := s.LookupInstances(ctx, &store.Query{})
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), p+"i/c") {
		t.Fatalf("lookup: %v; want ErrCorrupt naming %si/c", err, p)
	}
	if len(ins) != 3 {
		t.Fatalf("lookup returned %d instances, want 3 (a, b, d)", len(ins))
	}
	// The queue keeps working.
	mustEnqueue(t, s, testInst("e"))
	if got := claimN(t, s, "w", 10); len(got) != 1 || got[0].ID != "e" {
		t.Fatalf("claim after corruption: %v", got)
	}
}

// With etcd down, calls fail within their ctx (or the store's op timeout)
// with an error that names etcd and its endpoints; when it is back, the
// same store works again.
func TestEtcdUnreachable(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	cli := newClient(t, []string{srv.Addr})
	s, err := etcdstore.New(cli, etcdstore.WithNamespace(namespace(t)), etcdstore.WithOpTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	mustEnqueue(t, s, testInst("a"))
	srv.Kill()

	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	start := time.Now()
	_, err = s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Minute)})
	cancel()
	took := time.Since(start)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("claim with etcd down: %v; want a deadline error naming %s", err, srv.Addr)
	}
	if took > 2*time.Second {
		t.Fatalf("claim with etcd down took %v, ctx allowed 700ms", took)
	}
	t.Logf("etcd down: %v", err)
	// No deadline of the caller's: the op timeout bounds it.
	start = time.Now()
	if _, err := s.LookupInstances(context.Background(), &store.Query{}); err == nil {
		t.Fatal("lookup with etcd down succeeded")
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("lookup with etcd down took %v, op timeout 2s", took)
	}

	srv = testserver.RestartEtcd(t, srv)
	waitFor(t, 15*time.Second, "claim after etcd restarted", func() bool {
		res, err := s.Claim(context.Background(), &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Minute)})
		return err == nil && len(res.Instances) == 1
	})
	srv.Stop()
}

// Unreachable from the start: New does no I/O, the first call reports it.
func TestEtcdUnreachableAtStart(t *testing.T) {
	t.Parallel()
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cli := newClient(t, []string{addr})
	s, err := etcdstore.New(cli, etcdstore.WithNamespace(namespace(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{testInst("a")}, Now: t0})
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("enqueue with no etcd: %v", err)
	}
}

// Everything the store writes stays under its namespace's prefix, even
// with a namespace that holds a slash and a sibling namespace that
// starts like it.
func TestKeysStayUnderNamespace(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	cleanup(t, ns+"/inner")
	s := open(t, ns+"/inner")
	sibling := open(t, ns+"/inner-x")
	cleanup(t, ns+"/inner-x")
	mustEnqueue(t, sibling, testInst("a"))
	inner := keyPrefix(ns + "/inner")
	if s.Prefix() != inner || s.Namespace() != ns+"/inner" {
		t.Fatalf("prefix %q, namespace %q; want %q, %q", s.Prefix(), s.Namespace(), inner, ns+"/inner")
	}
	root := keyPrefix(ns)[:len(keyPrefix(ns))-1] // every namespace that starts with ns
	ctx := context.Background()
	in := testInst("a")
	in.UniqueKey, in.UniqueUntil = "u", t0.Add(time.Hour)
	mustEnqueue(t, s, in)
	c := claimN(t, s, "w", 1)[0]
	if err := s.AppendLogs(ctx, []*store.LogRecord{{InstanceID: "a", Kind: "k", Level: store.LevelInfo, Time: t0, Message: "hi"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: t0, Outcomes: []store.Outcome{{ID: c.ID, Attempt: c.Attempt, State: store.Completed}}}); err != nil {
		t.Fatal(err)
	}
	cli := newClient(t, testserver.Etcd(t))
	resp, err := cli.Get(ctx, root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if !strings.HasPrefix(string(kv.Key), inner) && !strings.HasPrefix(string(kv.Key), sibling.Prefix()) {
			t.Errorf("key %q outside both namespaces", kv.Key)
		}
	}
	// Prune removes the instance and everything that hangs off it, except
	// the queue's priority marker, the counter, the ticket key (tk) and
	// the folded counts (cn0, which keeps the group seen, with zero counts).
	res, err := s.Prune(ctx, &store.PruneParams{Now: t0.Add(time.Hour), FinishedBefore: t0.Add(time.Minute)})
	if err != nil || res.Instances != 1 {
		t.Fatalf("prune: %+v, %v", res, err)
	}
	resp, err = cli.Get(ctx, root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, kv := range resp.Kvs {
		if strings.HasPrefix(string(kv.Key), sibling.Prefix()) {
			continue
		}
		k := strings.TrimPrefix(string(kv.Key), inner)
		if k != "seq" && k != "tk" && k != "cn0" && !strings.HasPrefix(k, "qp/") && !strings.HasPrefix(k, "a/") {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Fatalf("prune left %v", left)
	}
}

// WithNamespace("") is an error naming the fix; New does no I/O, so no
// server is needed.
func TestNewRejectsEmptyNamespace(t *testing.T) {
	t.Parallel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := etcdstore.New(cli, etcdstore.WithNamespace("")); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "WithNamespace") {
		t.Fatalf("empty namespace: %v; want ErrInvalid naming WithNamespace", err)
	}
	s, err := etcdstore.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Namespace() != etcdstore.DefaultNamespace || s.Prefix() != "jobkit/default/" {
		t.Errorf("default namespace %q, prefix %q", s.Namespace(), s.Prefix())
	}
}

// TestNewRejectsBadOptions: an option given an unusable value is an error
// from New that names the option and its valid range, never a silent
// clamp to something else.
func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for name, o := range map[string]etcdstore.Option{
		"WithLeaseTTL":      etcdstore.WithLeaseTTL(time.Second),
		"WithMaxTxnOps":     etcdstore.WithMaxTxnOps(8),
		"WithMaxValueBytes": etcdstore.WithMaxValueBytes(0),
		"WithOpTimeout":     etcdstore.WithOpTimeout(-time.Second),
		"WithClaimWindow":   etcdstore.WithClaimWindow(0),
		"nil option":        nil,
	} {
		s, err := etcdstore.New(cli, o)
		if !errors.Is(err, store.ErrInvalid) || (name != "nil option" && !strings.Contains(err.Error(), name)) {
			t.Errorf("%s: New = %v, %v; want ErrInvalid naming the option", name, s, err)
		}
	}
	s, err := etcdstore.New(cli, etcdstore.WithLeaseTTL(2*time.Second), etcdstore.WithMaxTxnOps(16), etcdstore.WithClaimWindow(1), etcdstore.WithOpTimeout(0))
	if err != nil {
		t.Fatalf("New with the smallest valid values: %v", err)
	}
	s.Close()
}

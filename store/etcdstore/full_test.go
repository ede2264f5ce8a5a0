package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
)

// An etcd over its space quota (the NOSPACE alarm) refuses every write:
// enqueue, claim, renew and finish fail with store.ErrFull, naming the
// quota, and change nothing; reads still answer. Deleting keys alone does
// not end it: the alarm stays until it is disarmed, after compacting and
// defragmenting. Then the same store handle works again, the claimed
// attempt included. doc/etcd.md tells operators this.
func TestEtcdFull(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t, "--quota-backend-bytes", fmt.Sprint(24<<20))
	cli := newClient(t, []string{srv.Addr})
	s, err := etcdstore.New(cli, etcdstore.WithNamespace(namespace(t)), etcdstore.WithOpTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	mustEnqueue(t, s, testInst("a"), testInst("b"))
	running := claimN(t, s, "w", 1)
	if len(running) != 1 || running[0].ID != "a" {
		t.Fatalf("claim: %v, want a", running)
	}

	fillEtcd(t, cli)

	wantFull := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrFull) || !strings.Contains(err.Error(), "--quota-backend-bytes") || !strings.Contains(err.Error(), "etcdctl alarm disarm") || !strings.Contains(err.Error(), srv.Addr) {
			t.Fatalf("%s on a full etcd: %v; want store.ErrFull naming the quota flag, the disarm and %s", what, err, srv.Addr)
		}
	}
	writes := func() []error {
		_, enqErr := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{testInst("c")}, Now: t0, Node: "n"})
		_, claimErr := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Hour)})
		_, renewErr := s.Renew(ctx, &store.RenewParams{Owner: "w", Leases: []store.LeaseRef{{ID: "a", Attempt: running[0].Attempt}}, Until: t0.Add(2 * time.Hour), Now: t0})
		_, finishErr := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: t0, Outcomes: []store.Outcome{{ID: "a", Attempt: running[0].Attempt, State: store.Completed}}})
		return []error{enqErr, claimErr, renewErr, finishErr}
	}
	names := []string{"enqueue", "claim", "renew", "finish"}
	for i, err := range writes() {
		wantFull(names[i], err)
	}
	t.Logf("full: %v", writes()[0])
	// Reads answer, and show nothing changed.
	ins, err := s.LookupInstances(ctx, &store.Query{Queue: "q"})
	if err != nil {
		t.Fatalf("lookup on a full etcd: %v", err)
	}
	states := map[string]store.State{}
	for _, in := range ins {
		states[in.ID] = in.State
	}
	if len(ins) != 2 || states["a"] != store.Processing || states["b"] != store.Scheduled {
		t.Fatalf("lookup on a full etcd: %v, want a processing and b scheduled, nothing else", states)
	}

	// Deleting the filler frees space, but the alarm holds writes back.
	if _, err := cli.Delete(ctx, "filler/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("delete filler: %v", err)
	}
	wantFull("enqueue after deleting, before disarming", writes()[0])
	recoverFull(t, cli, srv.Addr)
	for i, err := range writes() {
		if err != nil {
			t.Fatalf("%s after disarming: %v", names[i], err)
		}
	}
	if got := claimN(t, s, "w", 10); len(got) != 1 {
		t.Fatalf("claim after disarming: %v, want the one left of b and c", got)
	}
}

// fillEtcd fills etcd past its quota with values of 1 MB of our own.
func fillEtcd(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	fill := strings.Repeat("x", 1<<20)
	var fillErr error
	for i := 0; i < 100 && fillErr == nil; i++ {
		_, fillErr = cli.Put(context.Background(), fmt.Sprintf("filler/%03d", i), fill)
	}
	if fillErr == nil || !strings.Contains(fillErr.Error(), "database space exceeded") {
		t.Fatalf("filling etcd: %v; want its quota's refusal", fillErr)
	}
}

// recoverFull does what an operator does once space is freed: compact,
// defragment, disarm the NOSPACE alarm.
func recoverFull(t *testing.T, cli *clientv3.Client, addr string) {
	t.Helper()
	ctx := context.Background()
	resp, err := cli.Get(ctx, "filler/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}
	if _, err := cli.Defragment(ctx, addr); err != nil {
		t.Fatalf("defragment: %v", err)
	}
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatalf("alarm list: %v", err)
	}
	disarmed := 0
	for _, a := range alarms.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: a.Alarm}); err != nil {
				t.Fatalf("disarm: %v", err)
			}
			disarmed++
		}
	}
	if disarmed == 0 {
		t.Fatalf("alarms of a full etcd: %v, want NOSPACE", alarms.Alarms)
	}
}

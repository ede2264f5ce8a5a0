package etcdstore

// A lookup by several states walks one index per state while claims and
// finishes move instances between those states. This test runs store calls
// at an exact point of a lookup (a KV that calls a hook before each Get)
// and checks that every instance in a wanted state is returned once.

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// hookKV calls before, when set, ahead of every Get.
type hookKV struct {
	clientv3.KV
	before atomic.Pointer[func(key string)]
}

func (h *hookKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if f := h.before.Load(); f != nil {
		(*f)(key)
	}
	return h.KV.Get(ctx, key, opts...)
}

func ileaveStore(t *testing.T, ns string, hooked bool) (*Store, *hookKV) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: testserver.Etcd(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	var h *hookKV
	if hooked {
		h = &hookKV{KV: cli.KV}
		cli.KV = h
	}
	s, err := New(cli, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cli.Delete(ctx, s.Prefix(), clientv3.WithPrefix())
	})
	return s, h
}

// TestLookupByStatesWhileInstancesMove moves one instance from Scheduled to
// Processing and another from Processing back to Scheduled between the
// walk of the Scheduled index and the walk of the Processing index. Read
// at the newest revision each, the first was returned twice and the second
// not at all.
func TestLookupByStatesWhileInstancesMove(t *testing.T) {
	t.Parallel()
	ns := "interleave-" + strings.ReplaceAll(t.Name(), "/", "_") + time.Now().Format("150405.000000")
	looker, h := ileaveStore(t, ns, true)
	mover, _ := ileaveStore(t, ns, false)
	p := looker.Prefix()
	ctx := t.Context()
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	mk := func(id string, runAt time.Time) *store.Instance {
		return &store.Instance{ID: id, Kind: "k", Queue: "q", Args: []byte(`[1]`), RunAt: runAt, CreatedAt: t0, MaxRetries: 5}
	}
	// "back" is claimed first (due first), then "up" and "waits" wait.
	if _, err := mover.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{mk("back", t0)}, Now: t0, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	if res, err := mover.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Hour)}); err != nil || len(res.Instances) != 1 {
		t.Fatalf("claim back: %v %v", res, err)
	}
	t1 := t0.Add(time.Second)
	if _, err := mover.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{mk("up", t1), mk("waits", t1.Add(time.Hour))}, Now: t1, Node: "n"}); err != nil {
		t.Fatal(err)
	}

	procIndex := p + "c/" // the claim records
	var fired atomic.Bool
	hook := func(key string) {
		if !strings.HasPrefix(key, procIndex) || !fired.CompareAndSwap(false, true) {
			return
		}
		// The Scheduled index has been walked: move one each way.
		res, err := mover.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: t1, LeaseUntil: t1.Add(time.Hour)})
		if err != nil || len(res.Instances) != 1 || res.Instances[0].ID != "up" {
			t.Errorf("claim up in the hook: %v %v", res, err)
		}
		errs, err := mover.Finish(ctx, &store.FinishParams{Owner: "w", Now: t1, Outcomes: []store.Outcome{
			{ID: "back", Attempt: 1, State: store.Scheduled, RunAt: t1.Add(time.Minute), Error: "retry"},
		}})
		if err != nil || errs[0].Err != nil {
			t.Errorf("finish back in the hook: %v %v", errs, err)
		}
	}
	h.before.Store(&hook)
	got, err := looker.LookupInstances(ctx, &store.Query{States: []store.State{store.Scheduled, store.Processing}})
	h.before.Store(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !fired.Load() {
		t.Fatal("the hook never ran: the lookup did not walk the claim records")
	}
	var ids []string
	for _, in := range got {
		ids = append(ids, in.ID+":"+in.State.String())
	}
	slices.Sort(ids)
	// One revision: the states before the moves.
	want := []string{"back:processing", "up:scheduled", "waits:scheduled"}
	if !slices.Equal(ids, want) {
		t.Fatalf("lookup by Scheduled and Processing while instances moved returned %v, want %v (each once, as of one revision)", ids, want)
	}
}

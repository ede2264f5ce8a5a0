package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
	"github.com/jobkit/job/store/internal/redisscript/scripttest"
	"github.com/jobkit/job/store/redisstore"
	"github.com/jobkit/job/store/storetest"
)

// testPartitions is how many partitions the partitioned tests use: more
// than the cluster's primaries, so every primary holds several.
const testPartitions = 5

// newPartitioned returns a store of n partitions on c in namespace ns.
func newPartitioned(tb testing.TB, c redis.UniversalClient, ns string, n int, opts ...redisstore.Option) *redisstore.PartitionedStore {
	tb.Helper()
	s, err := redisstore.NewPartitioned(tb.Context(), c, n, append([]redisstore.Option{redisstore.WithNamespace(ns)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// byQueue places instances by queue: the store contract's order checks
// (claim order, Seq, the event feed's order) speak of the instances of
// one queue, which then share a partition, while the namespace's queues,
// unique keys and lookups spread over the partitions. The default
// placement (by ID) is checked by the manager scenarios and by
// TestPartitionedSpread.
var byQueue = redisstore.WithPartitionKey(func(in *store.Instance) string { return in.Queue })

// TestPartitionedConformance runs the store contract on one redis-server
// with a namespace of several partitions.
func TestPartitionedConformance(t *testing.T) {
	c := client(t)
	storetest.Run(t, storetest.Harness{
		CancelNotifier: true,
		Open: func(t testing.TB, ns string) store.Store {
			return newPartitioned(t, c, ns, testPartitions, byQueue)
		},
		ExpireEvents: scripttest.ExpireEvents,
	})
}

// scriptWatch is a go-redis hook that records the scripts called and
// every CROSSSLOT reply.
type scriptWatch struct {
	mu        sync.Mutex
	called    map[string]bool
	crossSlot []string
}

func (w *scriptWatch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *scriptWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) > 1 {
			name := strings.ToLower(fmt.Sprint(args[0]))
			w.mu.Lock()
			if name == "fcall" || name == "fcall_ro" {
				w.called[fmt.Sprint(args[1])] = true
			}
			if err != nil && strings.Contains(err.Error(), "CROSSSLOT") {
				w.crossSlot = append(w.crossSlot, fmt.Sprint(args[:2]...)+": "+err.Error())
			}
			w.mu.Unlock()
		}
		return err
	}
}

func (w *scriptWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestPartitionedOnClusterNoCrossSlot runs the store contract on a real
// Redis Cluster with a namespace of several partitions (spread over the
// three primaries), watching every command: no call may be refused with
// CROSSSLOT, and every script of the store must have run (so each was
// checked under the cluster with partitions).
func TestPartitionedOnClusterNoCrossSlot(t *testing.T) {
	c := clusterClient(t)
	w := &scriptWatch{called: map[string]bool{}}
	c.AddHook(w)
	t.Run("conformance", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{
			CancelNotifier: true,
			Open: func(t testing.TB, ns string) store.Store {
				return newPartitioned(t, c, ns, testPartitions, byQueue)
			},
			ExpireEvents: scripttest.ExpireEvents,
		})
	})
	t.Run("big second", func(t *testing.T) {
		// A kind's second of more than 2,000 instances: a limited lookup
		// reads its order keys first (the order_keys script).
		s := newPartitioned(t, c, fmt.Sprintf("bigsec-%d", time.Now().UnixNano()), testPartitions, byQueue)
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		var ins []*store.Instance
		for i := range 2500 {
			ins = append(ins, &store.Instance{ID: fmt.Sprintf("big-%04d", i), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now})
		}
		if _, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: ins, Node: "n", Now: now}); err != nil {
			t.Fatal(err)
		}
		got, err := s.LookupInstances(t.Context(), &store.Query{Kind: "k", Limit: 3})
		if err != nil || len(got) != 3 || got[0].ID != "big-2499" {
			t.Fatalf("newest 3 of a big second: %v, %v; want big-2499 first", got, err)
		}
	})
	t.Run("trigger upgrade", func(t *testing.T) {
		// A trigger of the layout before triggers were documents, in
		// partition 0 (the namespace's own keys), moved by UpgradeTriggers
		// (the trigger_delete script removes the old entry).
		ns := fmt.Sprintf("trigup-%d", time.Now().UnixNano())
		s := newPartitioned(t, c, ns, testPartitions)
		created := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		body := `{"name":"nightly","kind":"k","cron":"@daily","updated_at":"2030-01-01T00:00:00Z"}`
		if err := c.HSet(t.Context(), "jobkit:{"+ns+"}:trig", "nightly", fmt.Sprintf("1 %d %s", created.UnixNano(), body)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ZAdd(t.Context(), "jobkit:{"+ns+"}:trign", redis.Z{Member: "nightly"}).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := s.UpgradeTriggers(t.Context()); err != nil || n != 1 {
			t.Fatalf("UpgradeTriggers: moved %d, %v; want 1", n, err)
		}
		if d, err := s.GetDocument(t.Context(), store.TriggerCollection, "nightly"); err != nil || d == nil {
			t.Fatalf("the moved trigger's document: %v, %v", d, err)
		}
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.crossSlot) > 0 {
		t.Errorf("%d calls refused with CROSSSLOT, first: %s", len(w.crossSlot), w.crossSlot[0])
	}
	var missing []string
	for _, s := range redisscript.All {
		// A namespace of several partitions refuses rate limits, so it
		// never delays one (TestPartitionedLimitsRefused).
		if !w.called[s.Function] && s != redisscript.RateDelay {
			missing = append(missing, s.Name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("scripts never called on the cluster with partitions: %v", missing)
	}
}

// TestPartitionedManagerSuiteOnCluster runs the manager scenarios on a
// Redis Cluster with a namespace of several partitions.
func TestPartitionedManagerSuiteOnCluster(t *testing.T) {
	c := clusterClient(t)
	jobtest.Run(t, jobtest.Harness{Open: func(t testing.TB, ns string) store.Store {
		return newPartitioned(t, c, ns, testPartitions)
	}, PartitionOf: partitionOf(c)})
}

// TestOnePartitionIsTheUnpartitionedLayout: a namespace of one partition
// writes exactly the keys New writes, and each reads the other's data.
func TestOnePartitionIsTheUnpartitionedLayout(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	base := fmt.Sprintf("onepart-%d", time.Now().UnixNano())
	plain := newStore(t, c, base+"-a")
	one := newPartitioned(t, c, base+"-b", 1)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range []store.Store{plain, one} {
		in := &store.Instance{ID: "i-1", Kind: "k", Queue: "q", Args: []byte("[1]"), RunAt: now, CreatedAt: now, UniqueKey: "u", UniqueUntil: now.Add(time.Hour)}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Node: "n", Now: now}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "n", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || len(res.Instances) != 1 {
			t.Fatalf("claim: %v, %v", res, err)
		}
		if _, err := s.Finish(ctx, &store.FinishParams{Owner: "n", Now: now, Outcomes: []store.Outcome{{ID: "i-1", Attempt: 1, State: store.Completed, Result: []byte("[2]")}}}); err != nil {
			t.Fatal(err)
		}
	}
	keysOf := func(ns string) map[string]string {
		ks, err := c.Keys(ctx, "jobkit:{"+ns+"}:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, k := range ks {
			typ, err := c.Type(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			val := typ
			if typ != "stream" { // stream entry IDs carry the server's clock
				d, err := c.Dump(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				val += " " + d
			}
			out[strings.TrimPrefix(k, "jobkit:{"+ns+"}:")] = val
		}
		return out
	}
	a, b := keysOf(base+"-a"), keysOf(base+"-b")
	if len(a) == 0 {
		t.Fatal("the unpartitioned store wrote no keys")
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("key %s: one partition wrote %.60q, the unpartitioned store %.60q", k, b[k], v)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			t.Errorf("one partition wrote key %s, which the unpartitioned store does not", k)
		}
	}
	// Each reads the other's data.
	for _, s := range []store.Store{newPartitioned(t, c, base+"-a", 1), newStore(t, c, base+"-b")} {
		got, err := s.LookupInstances(ctx, &store.Query{InstanceID: "i-1"})
		if err != nil || len(got) != 1 || got[0].State != store.Completed || string(got[0].Result) != "[2]" {
			t.Errorf("lookup across layouts: %v, %v", got, err)
		}
	}
}

// TestPartitionCountIsFixed: the count a namespace was created with is
// the only one it opens with, and a namespace holding unpartitioned data
// opens with one partition only.
func TestPartitionCountIsFixed(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	ns := fmt.Sprintf("partcount-%d", time.Now().UnixNano())
	newPartitioned(t, c, ns, 4)
	newPartitioned(t, c, ns, 4)
	for _, n := range []int{1, 8} {
		if _, err := redisstore.NewPartitioned(ctx, c, n, redisstore.WithNamespace(ns)); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "created with 4 partitions") {
			t.Errorf("reopen with %d partitions: %v, want ErrInvalid naming 4", n, err)
		}
	}
	old := ns + "-old"
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	in := &store.Instance{ID: "i-1", Kind: "k", Queue: "q", RunAt: now, CreatedAt: now}
	if _, err := newStore(t, c, old).Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Node: "n", Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := redisstore.NewPartitioned(ctx, c, 4, redisstore.WithNamespace(old)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("partition a namespace holding unpartitioned data: %v, want ErrInvalid", err)
	}
	for _, n := range []int{0, -1, redisscript.MaxPartitions + 1} {
		if _, err := redisstore.NewPartitioned(ctx, c, n, redisstore.WithNamespace(ns+"-x")); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%d partitions: %v, want ErrInvalid", n, err)
		}
	}
	if _, err := redisstore.NewPartitioned(ctx, c, 2, redisstore.WithNamespace("a#p1")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a partition's namespace as a namespace: %v, want ErrInvalid", err)
	}
}

// TestPartitionedSpread: instances spread over every partition, one
// call's in one partition; those of one unique key, and the tasks of one
// workflow, share one; calls by ID from another handle find them.
func TestPartitionedSpread(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	ns := fmt.Sprintf("spread-%d", time.Now().UnixNano())
	s := newPartitioned(t, c, ns, 4)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var ins []*store.Instance
	for i := range 400 {
		ins = append(ins, &store.Instance{ID: fmt.Sprintf("%08x-spread", i*2654435761), Kind: "k", Queue: "q", RunAt: now, CreatedAt: now})
	}
	// Calls of 4: each call's instances share a partition, the one its
	// first instance's ID hashes to.
	for part := range slices.Chunk(ins, 4) {
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: part, Node: "n", Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	// One call of 600 is spread in parts of 256.
	var big []*store.Instance
	for i := range 600 {
		big = append(big, &store.Instance{ID: fmt.Sprintf("big-%04d", i), Kind: "k", Queue: "big", RunAt: now, CreatedAt: now})
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: big, Node: "n", Now: now}); err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for i := range 4 {
		got, err := s.Part(i).Counts(ctx, &store.CountsParams{Queue: "big"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			sizes = append(sizes, got[0].States[store.Scheduled])
		}
	}
	if slices.Sort(sizes); !slices.Equal(sizes, []int64{88, 256, 256}) {
		t.Errorf("one call of 600 instances stored %v per partition; want 256, 256 and 88", sizes)
	}
	for i := range 4 {
		got, err := s.Part(i).Counts(ctx, &store.CountsParams{Queue: "q"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].States[store.Scheduled] < 60 || got[0].States[store.Scheduled] > 140 {
			t.Errorf("partition %d holds %v of 400 instances in 100 calls; want about 100 (60 to 140)", i, got)
		}
	}
	total, err := s.Counts(ctx, &store.CountsParams{Queue: "q"})
	if err != nil || len(total) != 1 || total[0].States[store.Scheduled] != 400 {
		t.Errorf("summed counts: %v, %v; want 400 scheduled", total, err)
	}
	// Same unique key, different IDs: the second is a duplicate.
	u := func(id string) *store.Instance {
		return &store.Instance{ID: id, Kind: "k", Queue: "u", RunAt: now, CreatedAt: now, UniqueKey: "key", UniqueUntil: now.Add(time.Hour)}
	}
	for i, id := range []string{"u-1", "u-2", "u-3", "u-4"} {
		res, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{u(id)}, Node: "n", Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if dup := errors.Is(res[0].Err, store.ErrDuplicate); dup != (i > 0) || res[0].ID != "u-1" {
			t.Errorf("enqueue %s with the held key: %+v", id, res[0])
		}
	}
	// Lookups and cancels by ID reach the instance wherever it lives.
	for _, id := range []string{"u-1", ins[7].ID, ins[399].ID} {
		got, err := newPartitioned(t, c, ns, 4).LookupInstances(ctx, &store.Query{IDs: []string{id}})
		if err != nil || len(got) != 1 || got[0].ID != id {
			t.Errorf("lookup %s from a fresh handle: %v, %v", id, got, err)
		}
		in, err := newPartitioned(t, c, ns, 4).Cancel(ctx, &store.CancelParams{ID: id, Now: now, Node: "n"})
		if err != nil || in.State != store.Canceled {
			t.Errorf("cancel %s from a fresh handle: %v, %v", id, in, err)
		}
	}
	// Workflow tasks of one workflow share a partition.
	parts := map[int]bool{}
	for i := range 20 {
		parts[s.Place(&store.Instance{ID: fmt.Sprint("t", i), Task: &store.WorkflowTask{Workflow: "wf-1", Name: fmt.Sprint(i)}})] = true
	}
	if len(parts) != 1 {
		t.Errorf("tasks of one workflow in partitions %v; want one", slices.Collect(func(yield func(int) bool) {
			for p := range parts {
				if !yield(p) {
					return
				}
			}
		}))
	}
}

// TestPartitionedManagerSuite runs the manager scenarios on one
// redis-server with a namespace of several partitions.
func TestPartitionedManagerSuite(t *testing.T) {
	c := client(t)
	jobtest.Run(t, jobtest.Harness{Open: func(t testing.TB, ns string) store.Store {
		return newPartitioned(t, c, ns, testPartitions)
	}, PartitionOf: partitionOf(c)})
}

// partitionOf names the partition an instance of a partitioned namespace
// on c lives in, for jobtest's order scenarios.
func partitionOf(c redis.UniversalClient) func(t testing.TB, ns, id string) int {
	return func(t testing.TB, ns, id string) int {
		t.Helper()
		part, ok, err := newPartitioned(t, c, ns, testPartitions).PartitionOf(t.Context(), id)
		if err != nil || !ok {
			t.Fatalf("partition of %s: %v (found: %v)", id, err, ok)
		}
		return part
	}
}

// TestPartitionedLimitsRefused: a namespace of several partitions cannot
// enforce a concurrency limit (it counts the whole namespace), so the
// engine refuses to set one, and a claim that names one is refused; one
// partition enforces limits as the unpartitioned store does.
func TestPartitionedLimitsRefused(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	for _, n := range []int{1, 3} {
		s := newPartitioned(t, c, fmt.Sprintf("limits-%d-%d", n, time.Now().UnixNano()), n)
		m, err := job.NewManager(job.WithStore(s))
		if err != nil {
			t.Fatal(err)
		}
		err = m.Admin().SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: "k", Max: 2})
		if refused := errors.Is(err, job.ErrLimitsUnsupported); refused != (n > 1) || (n == 1 && err != nil) {
			t.Errorf("%d partitions: SetConcurrencyLimit: %v", n, err)
		}
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		_, err = s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Limits: []store.ConcurrencyLimit{{Kind: "k", Max: 1}}})
		if (n > 1) != errors.Is(err, store.ErrInvalid) || (n == 1 && err != nil) {
			t.Errorf("%d partitions: claim with a limit: %v", n, err)
		}
		// Rate limits likewise: each partition's claim would keep a GCRA
		// time of its own, letting n times the rate start.
		err = m.Admin().SetRateLimit(ctx, job.RateLimit{Kind: "k", Rate: 10, Period: time.Second})
		if refused := errors.Is(err, job.ErrRateLimitsUnsupported); refused != (n > 1) || (n == 1 && err != nil) {
			t.Errorf("%d partitions: SetRateLimit: %v", n, err)
		}
		_, err = s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), RateLimits: []store.RateLimit{{Kind: "k", Rate: 10, Period: time.Second}}})
		if (n > 1) != errors.Is(err, store.ErrInvalid) || (n == 1 && err != nil) {
			t.Errorf("%d partitions: claim with a rate limit: %v", n, err)
		}
		err = s.DelayRateLimit(ctx, store.RateLimit{Kind: "k", Rate: 10, Period: time.Second}, time.Second)
		if (n > 1) != errors.Is(err, store.ErrInvalid) || (n == 1 && err != nil) {
			t.Errorf("%d partitions: DelayRateLimit: %v", n, err)
		}
	}
}

// TestPartitionedClusterFaults runs scripttest's Redis Cluster scenarios
// (a primary SIGKILLed and its replica promoted) on a namespace of
// several partitions, which then has partitions on the dead primary and
// on the live ones.
func TestPartitionedClusterFaults(t *testing.T) {
	scripttest.RunCluster(t, scripttest.ClusterHarness{Open: func(t testing.TB, addrs []string, ns string) store.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return newPartitioned(t, c, ns, testPartitions)
	}})
}

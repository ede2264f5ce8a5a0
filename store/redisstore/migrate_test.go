package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/redisstore"
)

// migrateFixture fills a single-node namespace with n Scheduled
// instances of varied fields, one running instance, a definition and a
// document, and returns the store and the instances as enqueued.
func migrateFixture(t *testing.T, c redis.UniversalClient, ns string, n int) (*redisstore.Store, map[string]*store.Instance) {
	t.Helper()
	ctx := t.Context()
	src := newStore(t, c, ns)
	now := time.Now().UTC().Truncate(time.Microsecond)
	want := map[string]*store.Instance{}
	var ins []*store.Instance
	for i := range n {
		in := &store.Instance{
			ID:         fmt.Sprintf("mig-%03d", i),
			Kind:       []string{"a", "b"}[i%2],
			Queue:      []string{"default", "q2"}[i%3%2],
			Args:       []byte(fmt.Sprintf(`[%d,"x"]`, i)),
			Priority:   i % 4,
			RunAt:      now.Add(-time.Duration(i) * time.Second),
			MaxRetries: i % 5,
			Timeout:    time.Duration(i%3) * time.Minute,
			CreatedAt:  now.Add(-time.Hour).Add(time.Duration(i) * time.Millisecond),
			Metadata:   map[string]string{"n": fmt.Sprint(i)},
		}
		if i%4 == 0 {
			in.UniqueKey, in.UniqueUntil = fmt.Sprintf("u-%d", i), now.Add(time.Hour)
		}
		if i%5 == 0 {
			in.Labels = []string{"region=eu"}
		}
		if i%7 == 0 {
			in.RunAt = now.Add(2 * time.Second) // scheduled for later
		}
		ins = append(ins, in)
		want[in.ID] = in
	}
	if _, err := src.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Node: "producer", Now: now}); err != nil {
		t.Fatal(err)
	}
	// Six instances in queue "retryq" failed once or twice and wait for
	// their retry: attempts so far.
	for i := range 6 {
		in := &store.Instance{ID: fmt.Sprintf("mig-retry-%d", i), Kind: "a", Queue: "retryq", Args: []byte(`[-1,"r"]`), RunAt: now, CreatedAt: now, MaxRetries: []int{1, 2, 3, -1, 2, 5}[i]}
		if _, err := src.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Node: "producer", Now: now}); err != nil {
			t.Fatal(err)
		}
		for a := 1; a <= 1+i%2; a++ {
			cr, err := src.Claim(ctx, &store.ClaimParams{Queue: "retryq", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)})
			if err != nil || len(cr.Instances) != 1 {
				t.Fatalf("claim %s: %v %v", in.ID, cr, err)
			}
			got := cr.Instances[0] // any of retryq's: their attempts vary
			fr, err := src.Finish(ctx, &store.FinishParams{Owner: "w", Now: now, Outcomes: []store.Outcome{{ID: got.ID, Attempt: got.Attempt, State: store.Scheduled, RunAt: now, Error: "boom"}}})
			if err != nil || fr[0].Err != nil {
				t.Fatalf("fail %s: %v %v", got.ID, fr, err)
			}
		}
	}
	// What the source holds is what must arrive.
	stored, err := src.LookupInstances(ctx, &store.Query{States: []store.State{store.Scheduled}})
	if err != nil || len(stored) != n+6 {
		t.Fatalf("source holds %d scheduled instances (%v), want %d", len(stored), err, n+6)
	}
	for _, in := range stored {
		want[in.ID] = in
	}
	// One running, its lease an hour long: left in the source, reported.
	run := &store.Instance{ID: "mig-running", Kind: "a", Queue: "busy", RunAt: now, CreatedAt: now}
	if _, err := src.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{run}, Node: "producer", Now: now}); err != nil {
		t.Fatal(err)
	}
	cr, err := src.Claim(ctx, &store.ClaimParams{Queue: "busy", Owner: "gone", Limit: 1, Now: now, LeaseUntil: now.Add(time.Hour)})
	if err != nil || len(cr.Instances) != 1 {
		t.Fatalf("claim the running instance: %v %v", cr, err)
	}
	if _, err := src.PutDefinition(ctx, &store.PutDefinitionParams{Definition: &store.Definition{Kind: "a", Queue: "default", MaxRetries: 3}, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.PutDocument(ctx, &store.PutDocumentParams{Collection: "notes", Name: "n1", Body: json.RawMessage(`{"x":1}`), Now: now}); err != nil {
		t.Fatal(err)
	}
	return src, want
}

// crashingStore passes every call to the real store, except that the
// failAt-th Delete fails before reaching it and the cancelAt-th Enqueue
// cancels the migration's context after it was applied: a migration
// stopped between putting instances in the target and removing them from
// the source, the worst place.
type crashingStore struct {
	store.Store
	mu                 sync.Mutex
	deletes, enqueues  int
	failDelete, cancel int
	cancelFn           context.CancelFunc
}

func (s *crashingStore) Delete(ctx context.Context, p *store.DeleteParams) ([]store.AdminResult, error) {
	s.mu.Lock()
	s.deletes++
	fail := s.deletes == s.failDelete
	s.mu.Unlock()
	if fail {
		return nil, errors.New("crash before delete")
	}
	return s.Store.Delete(ctx, p)
}

func (s *crashingStore) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	res, err := s.Store.Enqueue(ctx, p)
	s.mu.Lock()
	s.enqueues++
	c := s.enqueues == s.cancel
	s.mu.Unlock()
	if c {
		s.cancelFn()
		return nil, context.Canceled
	}
	return res, err
}

// retriesLeft is the MaxRetries an instance gets in the target: the
// retries it had left in the source.
func retriesLeft(in *store.Instance) int {
	if in.MaxRetries < 0 {
		return in.MaxRetries
	}
	return max(0, in.MaxRetries-in.Attempt)
}

// checkMigrated fails t unless the target holds exactly want, Scheduled,
// with their fields, and the source holds none of them.
func checkMigrated(t *testing.T, src, dst store.Store, want map[string]*store.Instance) {
	t.Helper()
	ctx := t.Context()
	left, err := src.LookupInstances(ctx, &store.Query{States: []store.State{store.Scheduled}})
	if err != nil || len(left) != 0 {
		t.Fatalf("source still has %d scheduled instances (%v)", len(left), err)
	}
	got, err := dst.LookupInstances(ctx, &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("target holds %d instances, want %d", len(got), len(want))
	}
	for _, g := range got {
		w := want[g.ID]
		switch {
		case w == nil:
			t.Fatalf("target holds unexpected %s", g.ID)
		case g.State != store.Scheduled || g.Kind != w.Kind || g.Queue != w.Queue || string(g.Args) != string(w.Args) ||
			g.Priority != w.Priority || !g.RunAt.Equal(w.RunAt) || g.Timeout != w.Timeout ||
			g.Attempt != 0 || g.MaxRetries != retriesLeft(w) || g.UniqueKey != w.UniqueKey || !g.UniqueUntil.Equal(w.UniqueUntil) ||
			!slices.Equal(g.Labels, w.Labels) || !maps.Equal(g.Metadata, w.Metadata) || !g.CreatedAt.Equal(w.CreatedAt):
			t.Fatalf("%s migrated as\n%+v\nwant\n%+v", g.ID, g, w)
		}
	}
}

// TestMigrate moves a single-node namespace into one of 4 partitions on
// the same redis-server: refused while a source node is live; then a run
// stopped at a delete and one canceled after an enqueue, each repeated,
// leave every instance in the target exactly once with its fields; then a
// manager on the target runs each exactly once.
func TestMigrate(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	base := fmt.Sprintf("mig-%d", time.Now().UnixNano())
	src, want := migrateFixture(t, c, base+"-src", 60)
	dst := newPartitioned(t, c, base+"-dst", 4)
	opts := redisstore.MigrateOptions{Collections: []string{"notes"}, Batch: 16}

	// A live node in the source: refused, nothing moved.
	now := time.Now()
	hb := &store.HeartbeatParams{Node: store.NodeInfo{ID: "worker-1"}, Now: now, DeadAfter: 10 * time.Second, Retain: time.Hour}
	if _, err := src.Heartbeat(ctx, hb); err != nil {
		t.Fatal(err)
	}
	if _, err := redisstore.Migrate(ctx, src, dst, opts); !errors.Is(err, redisstore.ErrLiveNodes) {
		t.Fatalf("Migrate with a live source node: %v, want ErrLiveNodes", err)
	}
	if got, _ := dst.LookupInstances(ctx, &store.Query{}); len(got) != 0 {
		t.Fatalf("refused migration moved %d instances", len(got))
	}
	hb.Leaving, hb.Now = true, time.Now()
	if _, err := src.Heartbeat(ctx, hb); err != nil {
		t.Fatal(err)
	}

	// Stopped at the second delete: the second batch is in both.
	crashSrc := &crashingStore{Store: src, failDelete: 2}
	rep, err := redisstore.Migrate(ctx, crashSrc, dst, opts)
	if err == nil {
		t.Fatal("Migrate with a failing delete succeeded")
	}
	t.Logf("first run (stopped at delete 2): moved %d, err %v", rep.Moved, err)
	// Canceled right after the rerun's second enqueue (its first page is
	// the batch in both, found in the target: no enqueue).
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	crashDst := &crashingStore{Store: dst, cancel: 2, cancelFn: cancel}
	rep, err = redisstore.Migrate(cctx, src, crashDst, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Migrate: %v", err)
	}
	t.Logf("second run (canceled after enqueue 2): moved %d (in the target already %d)", rep.Moved, rep.InTargetAlready)
	if rep.InTargetAlready != 16 {
		t.Errorf("second run found %d instances in the target already, want the 16 of the batch whose delete failed", rep.InTargetAlready)
	}

	rep, err = redisstore.Migrate(ctx, src, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("third run: moved %d (in the target already %d), definitions %d, documents %d (existing %d), processing %d, skipped %v",
		rep.Moved, rep.InTargetAlready, rep.Definitions, rep.Documents, rep.DocumentsExisting, len(rep.Processing), rep.Skipped)
	if rep.InTargetAlready != 16 || len(rep.Processing) != 1 || rep.Processing[0].ID != "mig-running" || len(rep.Skipped) != 0 || rep.Done() {
		t.Fatalf("third run's report: %+v", rep)
	}
	checkMigrated(t, src, dst, want)
	if d, err := dst.GetDefinition(ctx, "a"); err != nil || d.MaxRetries != 3 {
		t.Fatalf("definition in the target: %+v %v", d, err)
	}
	if d, err := dst.GetDocument(ctx, "notes", "n1"); err != nil || string(d.Body) != `{"x":1}` {
		t.Fatalf("document in the target: %+v %v", d, err)
	}
	// A rerun after the end moves nothing and duplicates nothing.
	rep, err = redisstore.Migrate(ctx, src, dst, opts)
	if err != nil || rep.Moved != 0 || rep.Definitions != 0 || rep.Documents != 0 || rep.DocumentsExisting != 1 {
		t.Fatalf("rerun after the end: %+v %v", rep, err)
	}
	checkMigrated(t, src, dst, want)

	// A manager on the target runs each exactly once.
	var (
		mu   sync.Mutex
		runs = map[string]int{}
		args = map[string]string{} // as the executor decoded them
	)
	m, err := job.NewManager(job.WithStore(dst), job.WithQueues("default", "q2", "retryq"), job.WithLabels("region=eu"))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"a", "b"} {
		j, err := job.NewJob(job.WithKind(kind), job.WithExecutor(func(ctx context.Context, ji job.Instance, n int, x string) error {
			mu.Lock()
			runs[ji.Info().ID]++
			args[ji.Info().ID] = fmt.Sprintf(`[%d,%q]`, n, x)
			mu.Unlock()
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := m.Stop(sctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		done, err := dst.LookupInstances(ctx, &store.Query{States: []store.State{store.Completed}})
		if err == nil && len(done) == len(want) {
			break
		}
		if time.Now().After(deadline) {
			all, _ := dst.LookupInstances(ctx, &store.Query{})
			for _, in := range all {
				if in.State != store.Completed {
					t.Logf("%s: %s attempt %d error %q labels %v queue %s", in.ID, in.State, in.Attempt, in.Error, in.Labels, in.Queue)
				}
			}
			t.Fatalf("%d of %d migrated instances completed in the target (%v)", len(done), len(want), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for id := range want {
		if runs[id] != 1 {
			t.Errorf("%s ran %d times, want 1", id, runs[id])
		}
		if args[id] != string(want[id].Args) {
			t.Errorf("%s ran with arguments %s, want %s", id, args[id], want[id].Args)
		}
	}
	if len(runs) != len(want) {
		t.Errorf("%d instances ran, want %d", len(runs), len(want))
	}
}

// TestMigrateOnCluster moves a single-node namespace into 5 partitions on
// the test Redis Cluster, checks every instance arrived once with its
// fields, and that a rerun moves nothing.
func TestMigrateOnCluster(t *testing.T) {
	base := fmt.Sprintf("migc-%d", time.Now().UnixNano())
	src, want := migrateFixture(t, client(t), base+"-src", 40)
	dst := newPartitioned(t, clusterClient(t), base+"-dst", testPartitions)
	opts := redisstore.MigrateOptions{Collections: []string{"notes"}, Batch: 16}
	rep, err := redisstore.Migrate(t.Context(), src, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Moved != len(want) || rep.Definitions != 1 || rep.Documents != 1 || len(rep.Processing) != 1 {
		t.Fatalf("report: %+v, want %d moved", rep, len(want))
	}
	checkMigrated(t, src, dst, want)
	rep, err = redisstore.Migrate(t.Context(), src, dst, opts)
	if err != nil || rep.Moved != 0 {
		t.Fatalf("rerun: %+v %v", rep, err)
	}
	checkMigrated(t, src, dst, want)
}

// TestMigrateRescuesStaleNodes: a node that stopped without leaving holds
// a running attempt; once it is stale, the migration rescues the attempt
// in the source (as a manager's rescuer would) and moves it.
func TestMigrateRescuesStaleNodes(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	base := fmt.Sprintf("migr-%d", time.Now().UnixNano())
	src := newStore(t, c, base+"-src")
	dst := newPartitioned(t, c, base+"-dst", 4)
	now := time.Now()
	in := &store.Instance{ID: "r-1", Kind: "k", Queue: "q", RunAt: now, CreatedAt: now, MaxRetries: 3}
	if _, err := src.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Node: "p", Now: now}); err != nil {
		t.Fatal(err)
	}
	const deadAfter = 300 * time.Millisecond
	if _, err := src.Heartbeat(ctx, &store.HeartbeatParams{Node: store.NodeInfo{ID: "crashed"}, Now: now, DeadAfter: deadAfter, Retain: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if cr, err := src.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "crashed", Limit: 1, Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil || len(cr.Instances) != 1 {
		t.Fatalf("claim: %v %v", cr, err)
	}
	opts := redisstore.MigrateOptions{DeadAfter: deadAfter}
	// While the node is live: refused.
	if _, err := redisstore.Migrate(ctx, src, dst, opts); !errors.Is(err, redisstore.ErrLiveNodes) {
		t.Fatalf("Migrate with the node live: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		nodes, err := src.ListNodes(ctx, &store.ListNodesParams{Now: time.Now(), DeadAfter: deadAfter})
		if err == nil && len(nodes) == 1 && nodes[0].Status == store.NodeStale {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not stale after 10 s: %v %v", nodes, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep, err := redisstore.Migrate(ctx, src, dst, opts)
	if err != nil || rep.Rescued != 1 || rep.Moved != 1 || !rep.Done() {
		t.Fatalf("report %+v, %v; want the attempt rescued and moved", rep, err)
	}
	got, err := dst.LookupInstances(ctx, &store.Query{IDs: []string{"r-1"}})
	if err != nil || len(got) != 1 || got[0].State != store.Scheduled || got[0].MaxRetries != 2 {
		t.Fatalf("in the target: %+v %v; want r-1 Scheduled with 2 retries left", got, err)
	}
}

package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// The fault tests of a partitioned namespace on a Redis Cluster of its
// own (3 primaries, 1 replica each) beside TestPartitionedClusterFaults
// (a primary SIGKILLed): a slot migration and a SIGSTOPped primary while
// two managers run jobs. Each holds, over every job whose ScheduleJob
// returned: it ran at least once, it ends Completed (none lost, none
// stranded), and no two runs of one instance overlap in time.

// spans records every run of every instance: start and end, by ID.
type spans struct {
	mu    sync.Mutex
	runs  map[string][][2]time.Time
	who   map[string][]string // each run's manager and attempt, by ID
	start []time.Time         // every run's start, in order
}

func (s *spans) enter(id, who string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.who[id] = append(s.who[id], who)
	s.runs[id] = append(s.runs[id], [2]time.Time{now})
	s.start = append(s.start, now)
	return len(s.runs[id]) - 1
}

func (s *spans) leave(id string, i int) {
	s.mu.Lock()
	s.runs[id][i][1] = time.Now()
	s.mu.Unlock()
}

func (s *spans) started() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.start)
}

// faultRig is a private cluster, two managers on a partitioned namespace
// of it, and a scheduler that schedules jobs until told to stop.
type faultRig struct {
	cl       *testserver.RedisCluster
	client   *redis.ClusterClient
	look     store.Store
	ns       string
	managers []*job.Manager
	ex       *spans

	mu       sync.Mutex
	acked    []string
	ackedAt  []time.Time
	failures []time.Time
	errs     map[string]int // ScheduleJob errors, by message
	stop     chan struct{}
	done     chan struct{}
}

func newFaultRig(t *testing.T, ns string) *faultRig {
	t.Helper()
	r := &faultRig{
		cl: testserver.StartRedisCluster(t, 3, 1),
		ns: ns,
		ex: &spans{runs: map[string][][2]time.Time{}, who: map[string][]string{}},
	}
	open := func() store.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.cl.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return newPartitioned(t, c, ns, testPartitions)
	}
	r.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { r.client.Close() })
	r.look = open()
	for _, node := range []string{"a", "b"} {
		j, err := job.NewJob(job.WithKind("work"), job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
			id := ji.Info().ID
			i := r.ex.enter(id, fmt.Sprintf("%s attempt %d", node, ji.Info().Attempt))
			defer r.ex.leave(id, i)
			select {
			case <-time.After(20 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		m, err := job.NewManager(
			job.WithStore(open()),
			job.WithNodeID(node),
			job.WithLogger(slog.New(slog.DiscardHandler)), // the fault's warnings are expected
			job.WithWorkers(8),
			job.WithLease(3*time.Second),
			job.WithPollInterval(100*time.Millisecond),
			job.WithRescueInterval(250*time.Millisecond),
		)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
		if err := m.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := m.Stop(stopCtx); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
		r.managers = append(r.managers, m)
	}
	return r
}

// partitionKey is a key in partition i's slot.
func (r *faultRig) partitionKey(i int) string {
	return "jobkit:{" + redisscript.PartitionNamespace(r.ns, i) + "}:x"
}

// schedule starts scheduling a job every 5 ms, alternating managers, each
// call given a second; stopScheduling ends it.
func (r *faultRig) schedule(t *testing.T) {
	ctx := t.Context()
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { <-r.done }) // t.Context ends it, if nothing else did
	go func() {
		defer close(r.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-r.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			callCtx, cancel := context.WithTimeout(ctx, time.Second)
			ji, err := r.managers[n%2].ScheduleJob(callCtx, "work")
			cancel()
			r.mu.Lock()
			if err != nil {
				r.failures = append(r.failures, time.Now())
				if r.errs == nil {
					r.errs = map[string]int{}
				}
				r.errs[err.Error()]++
			} else {
				r.acked = append(r.acked, ji.ID)
				r.ackedAt = append(r.ackedAt, time.Now())
			}
			r.mu.Unlock()
		}
	}()
}

func (r *faultRig) stopScheduling() {
	close(r.stop)
	<-r.done
}

func (r *faultRig) ackedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked)
}

// waitAcked waits until n more jobs than now were acknowledged.
func (r *faultRig) waitAcked(t *testing.T, n int, within time.Duration, what string) {
	t.Helper()
	want := r.ackedCount() + n
	waitFor(t, within, what, func() bool { return r.ackedCount() >= want })
}

// check waits until every acknowledged job is final and holds the
// invariants: each one exists, ended Completed, ran at least once, and
// no two runs of one instance overlapped. It logs the numbers.
func (r *faultRig) check(t *testing.T, faultAt time.Time) {
	t.Helper()
	ctx := t.Context()
	r.mu.Lock()
	all := slices.Clone(r.acked)
	failures := slices.Clone(r.failures)
	if len(r.errs) > 0 {
		t.Logf("ScheduleJob errors: %v", r.errs)
	}
	r.mu.Unlock()
	var lost []string
	deadline := time.Now().Add(time.Minute)
	for {
		ins, err := r.look.LookupInstances(ctx, &store.Query{IDs: all, Limit: len(all)})
		found := map[string]*store.Instance{}
		for _, in := range ins {
			found[in.ID] = in
		}
		lost = lost[:0]
		pending := 0
		for _, id := range all {
			in := found[id]
			switch {
			case in == nil:
				lost = append(lost, id)
			case !in.State.Final():
				pending++
			case in.State != store.Completed:
				t.Fatalf("instance %s ended %v after %d attempts (%q), want Completed", id, in.State, in.Attempt, in.Error)
			}
		}
		if err == nil && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the fault, %d of %d jobs still not final, %d not found (last look-up error: %v)", pending, len(all), len(lost), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(lost) > 0 {
		r.mu.Lock()
		var when []string
		for _, id := range lost {
			i := slices.Index(r.acked, id)
			when = append(when, r.ackedAt[i].Sub(faultAt).Round(time.Millisecond).String())
		}
		r.mu.Unlock()
		t.Errorf("%d of %d acknowledged jobs are gone (acknowledged at %v from the fault), e.g. %s", len(lost), len(all), when, lost[0])
	}
	gone := map[string]bool{}
	for _, id := range lost {
		gone[id] = true
	}
	r.ex.mu.Lock()
	defer r.ex.mu.Unlock()
	ran, again, overlaps, never := 0, 0, 0, 0
	for _, id := range all {
		runs := r.ex.runs[id]
		if len(runs) == 0 && !gone[id] {
			never++
			if never <= 3 {
				t.Errorf("job %s ended Completed but never ran here", id)
			}
			continue
		}
		if len(runs) == 0 {
			continue
		}
		ran++
		if len(runs) > 1 {
			again++
		}
		sorted := slices.Clone(runs)
		slices.SortFunc(sorted, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
		for i := 1; i < len(sorted); i++ {
			if end := sorted[i-1][1]; end.IsZero() || sorted[i][0].Before(end) {
				overlaps++
				t.Errorf("job %s: run %d started at +%v before run %d ended (+%v); runs (in start order) %v at %v", id, i, sorted[i][0].Sub(faultAt), i-1, end.Sub(faultAt), r.ex.who[id], runs)
			}
		}
	}
	// The longest time after the fault with no run starting anywhere.
	var gap time.Duration
	prev := faultAt
	for _, s := range r.ex.start {
		if s.Before(faultAt) {
			continue
		}
		gap = max(gap, s.Sub(prev))
		prev = s
	}
	var lastFail time.Duration
	afterFault := 0
	for _, f := range failures {
		if f.After(faultAt) {
			afterFault++
			lastFail = f.Sub(faultAt)
		}
	}
	t.Logf("%d jobs acknowledged, %d ran (%d runs in all), %d ran more than once, %d overlapping runs, %d lost; "+
		"%d ScheduleJob calls failed (%d after the fault, the last %v after it); longest pause in job starts after the fault %v",
		len(all), ran, len(r.ex.start), again, overlaps, len(lost),
		len(failures), afterFault, lastFail.Round(time.Millisecond), gap.Round(time.Millisecond))
}

// slotOwners maps each slot to the ID and address of the primary serving
// it, as the cluster reports.
func slotOwners(ctx context.Context, c *redis.ClusterClient) (map[int][2]string, error) {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	own := map[int][2]string{}
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" {
				continue
			}
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			for _, rg := range sh.Slots {
				for s := rg.Start; s <= rg.End; s++ {
					own[int(s)] = [2]string{n.ID, addr}
				}
			}
		}
	}
	return own, nil
}

// TestPartitionedClusterReshard moves, with `redis-cli --cluster
// reshard`, the slots of the partitions one primary serves to another
// primary while two managers schedule and run jobs. redis-cli moves a
// source's slots in ascending order, so it is asked for as many as reach
// the highest of those partitions' slots; keys migrate while scripts run
// (go-redis follows the ASK and MOVED replies). Every acknowledged job
// must run, end Completed and never run twice at once.
func TestPartitionedClusterReshard(t *testing.T) {
	t.Parallel()
	redisCLI, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not on PATH (%v); on Debian run `apt-get install redis-tools`", err)
	}
	r := newFaultRig(t, "reshard")
	ctx := t.Context()

	// Where each partition lives, and the slots of the source primary.
	own, err := slotOwners(ctx, r.client)
	if err != nil {
		t.Fatal(err)
	}
	partSlot := map[int]int{}
	byNode := map[string][]int{} // primary ID -> partitions
	for i := range testPartitions {
		slot, err := r.client.ClusterKeySlot(ctx, r.partitionKey(i)).Result()
		if err != nil {
			t.Fatal(err)
		}
		partSlot[i] = int(slot)
		byNode[own[int(slot)][0]] = append(byNode[own[int(slot)][0]], i)
	}
	// The source: the primary whose partitions are reached by moving the
	// fewest of its slots.
	need := func(id string) int {
		hi := 0
		for _, i := range byNode[id] {
			hi = max(hi, partSlot[i])
		}
		n := 0
		for s, o := range own {
			if o[0] == id && s <= hi {
				n++
			}
		}
		return n
	}
	var src string
	for id := range byNode {
		if src == "" || need(id) < need(src) {
			src = id
		}
	}
	var dst string
	for _, o := range own {
		if o[0] != src {
			dst = o[0]
			break
		}
	}
	slots := need(src)
	moved := byNode[src]
	t.Logf("partitions %v (slots %v) move from %s to %s: %d slots", moved, partSlot, src[:8], dst[:8], slots)

	r.schedule(t)
	r.waitAcked(t, 300, 30*time.Second, "300 jobs scheduled before the reshard")
	waitFor(t, 30*time.Second, "100 jobs to start before the reshard", func() bool { return r.ex.started() >= 100 })

	// How many keys move with the partitions, and when their slots are
	// being migrated (the source lists them "[slot->-dst]"): the window in
	// which calls get ASK and TRYAGAIN replies.
	keys := 0
	for _, i := range moved {
		n, err := r.client.ClusterCountKeysInSlot(ctx, partSlot[i]).Result()
		if err != nil {
			t.Fatal(err)
		}
		keys += int(n)
	}
	srcNode := redis.NewClient(&redis.Options{Addr: own[partSlot[moved[0]]][1]})
	defer srcNode.Close()
	marker := "[" + strconv.Itoa(partSlot[moved[0]]) + "->-"
	var window [2]time.Time
	watchDone, watchStop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-watchStop:
				return
			default:
			}
			nodes, err := srcNode.ClusterNodes(ctx).Result()
			if err == nil && strings.Contains(nodes, marker) {
				if window[0].IsZero() {
					window[0] = time.Now()
				}
				window[1] = time.Now()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	began := time.Now()
	// --cluster-pipeline 1 migrates one key per MIGRATE, so a partition's
	// slot stays migrating while calls go on.
	args := []string{"--cluster", "reshard", r.cl.Nodes[0].Addr,
		"--cluster-from", src, "--cluster-to", dst,
		"--cluster-slots", strconv.Itoa(slots), "--cluster-pipeline", "1", "--cluster-yes"}
	cmdCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	out, err := exec.CommandContext(cmdCtx, redisCLI, args...).CombinedOutput()
	cancel()
	took := time.Since(began)
	close(watchStop)
	<-watchDone
	if err != nil {
		r.stopScheduling()
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	r.mu.Lock()
	inWindow, failedInWindow := 0, 0
	for _, at := range r.ackedAt {
		if !at.Before(window[0]) && !at.After(window[1]) {
			inWindow++
		}
	}
	for _, at := range r.failures {
		if !at.Before(window[0]) && !at.After(window[1]) {
			failedInWindow++
		}
	}
	r.mu.Unlock()
	t.Logf("reshard of %d slots took %v; partition %d's slot (%d keys of %d partitions) seen migrating for %v, %d jobs scheduled and %d ScheduleJob calls failed meanwhile",
		slots, took.Round(time.Millisecond), moved[0], keys, len(moved), window[1].Sub(window[0]).Round(time.Millisecond), inWindow, failedInWindow)

	// The partitions now live on dst.
	own, err = slotOwners(ctx, r.client)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range moved {
		if got := own[partSlot[i]][0]; got != dst {
			t.Errorf("partition %d (slot %d) is served by %s after the reshard, want %s", i, partSlot[i], got, dst)
		}
	}
	if err := r.cl.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	r.waitAcked(t, 300, 30*time.Second, "300 jobs scheduled after the reshard")

	r.stopScheduling()
	r.check(t, began)
}

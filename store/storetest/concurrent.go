package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

const (
	handles          = 8 // store handles ("processes") in the concurrency tests
	workersPerHandle = 4
)

func (h Harness) concurrentInstances() int {
	if h.ConcurrentInstances > 0 {
		return h.ConcurrentInstances
	}
	return 2000
}

// testClaimConcurrent pushes instances through many claimers on several
// handles while producers enqueue, and checks that every instance was
// claimed exactly once: from what the claimers saw and from what the store
// holds afterwards.
func testClaimConcurrent(t *testing.T, h Harness) {
	e := setup(t, h)
	n := h.concurrentInstances()
	ss := make([]store.Store, handles)
	ss[0] = e.s
	for i := 1; i < handles; i++ {
		ss[i] = e.open()
	}
	const queue = "q-conc"
	now := at(time.Hour)

	var (
		mu      sync.Mutex
		claimed = make(map[string]string, n) // id -> claimer
		dups    []string
		errs    []error
		total   atomic.Int64
		failed  atomic.Bool // stops the claimers early
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		failed.Store(true)
	}
	// Producers: one per handle, batches of varying size.
	for p := range handles {
		wg.Go(func() {
			s := ss[p]
			for start := p; start < n; {
				var batch []*store.Instance
				for len(batch) < 1+start%13 && start < n {
					in := inst(fmt.Sprintf("cc-%05d", start), queue)
					in.Priority = start % 3
					in.RunAt = at(time.Duration(start%50) * time.Millisecond)
					batch = append(batch, in)
					start += handles
				}
				res, err := s.Enqueue(e.ctx, &store.EnqueueParams{Instances: batch, Node: fmt.Sprintf("p%d", p), Now: base})
				if err != nil {
					fail(fmt.Errorf("producer %d: Enqueue: %w", p, err))
					return
				}
				for _, r := range res {
					if r.Err != nil {
						fail(fmt.Errorf("producer %d: Enqueue %s: %w", p, r.ID, r.Err))
					}
				}
			}
		})
	}
	// Claimers: workersPerHandle per handle, until all n are claimed.
	deadline := time.Now().Add(2 * time.Minute)
	for c := range handles * workersPerHandle {
		wg.Go(func() {
			s := ss[c%handles]
			owner := fmt.Sprintf("w%02d", c)
			for total.Load() < int64(n) && !failed.Load() {
				if time.Now().After(deadline) {
					fail(fmt.Errorf("claimer %s: gave up with %d of %d claimed", owner, total.Load(), n))
					return
				}
				res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: queue, Owner: owner, Limit: 1 + c%7, Now: now, LeaseUntil: now.Add(lease)})
				if err != nil {
					fail(fmt.Errorf("claimer %s: Claim: %w", owner, err))
					return
				}
				if len(res.Instances) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				var outs []store.Outcome
				mu.Lock()
				for _, in := range res.Instances {
					if prev, ok := claimed[in.ID]; ok {
						dups = append(dups, fmt.Sprintf("%s by %s and %s", in.ID, prev, owner))
					}
					claimed[in.ID] = owner
					if in.State != store.Processing || in.Attempt != 1 || in.LeaseOwner != owner {
						errs = append(errs, fmt.Errorf("claimer %s got %s in state %v, attempt %d, owner %q", owner, in.ID, in.State, in.Attempt, in.LeaseOwner))
					}
					outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed, Result: []byte(`[]`)})
				}
				mu.Unlock()
				total.Add(int64(len(res.Instances)))
				fe, err := s.Finish(e.ctx, &store.FinishParams{Owner: owner, Now: now.Add(time.Second), Outcomes: outs})
				if err != nil {
					fail(fmt.Errorf("claimer %s: Finish: %w", owner, err))
					return
				}
				for i, r := range fe {
					if r.Err != nil {
						fail(fmt.Errorf("claimer %s: Finish %s: %w", owner, outs[i].ID, r.Err))
					} else if r.State != store.Completed {
						fail(fmt.Errorf("claimer %s: Finish %s reported state %v, want completed", owner, outs[i].ID, r.State))
					}
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	if len(dups) > 0 {
		t.Fatalf("%d instances claimed more than once, e.g. %s", len(dups), dups[0])
	}
	if len(claimed) != n {
		t.Fatalf("%d distinct instances claimed, want %d", len(claimed), n)
	}
	// The store agrees: all n completed after exactly one attempt, one
	// Processing record each, and nothing left to claim.
	all := e.instances(e.s, &store.Query{Queue: queue})
	if len(all) != n {
		t.Fatalf("store holds %d instances in %s, want %d", len(all), queue, n)
	}
	for _, in := range all {
		if in.State != store.Completed || in.Attempt != 1 {
			t.Fatalf("instance %s ended in state %v after %d attempts, want completed after 1", in.ID, in.State, in.Attempt)
		}
	}
	processing := e.history(e.s, &store.Query{States: []store.State{store.Processing}})
	if len(processing) != n {
		t.Fatalf("%d Processing history records, want one per instance (%d)", len(processing), n)
	}
	seen := make(map[string]bool, n)
	for _, r := range processing {
		if seen[r.InstanceID] {
			t.Fatalf("instance %s has two Processing history records", r.InstanceID)
		}
		seen[r.InstanceID] = true
		if r.Node != claimed[r.InstanceID] {
			t.Fatalf("instance %s: Processing record names node %q, but %q claimed it", r.InstanceID, r.Node, claimed[r.InstanceID])
		}
	}
	if res := e.claim(e.s, queue, "w-last", 10, now.Add(time.Hour)); len(res.Instances) != 0 {
		t.Fatalf("claim after the run returned %v", ids(res.Instances))
	}
}

// testRescueConcurrent lets several rescuers on several handles race over
// the same expired leases: each instance must be rescued exactly once.
func testRescueConcurrent(t *testing.T, h Harness) {
	e := setup(t, h)
	n := min(h.concurrentInstances()/4, 500)
	const queue = "q-rc"
	var ins []*store.Instance
	for i := range n {
		ins = append(ins, inst(fmt.Sprintf("rc-%04d", i), queue))
	}
	e.enqueue(e.s, base, ins...)
	for got := 0; got < n; {
		got += len(e.claim(e.s, queue, "w-dead", 100, base).Instances)
	}
	ss := make([]store.Store, handles)
	for i := range ss {
		ss[i] = e.open()
	}
	var (
		mu      sync.Mutex
		rescued = map[string]int{}
		errs    []error
		wg      sync.WaitGroup
	)
	for r := range handles * 2 {
		wg.Go(func() {
			s := ss[r%handles]
			for {
				out, err := s.Rescue(e.ctx, &store.RescueParams{Now: at(time.Minute), Limit: 1 + r%5, Node: fmt.Sprintf("r%d", r)})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, in := range out {
					rescued[in.ID]++
				}
				mu.Unlock()
				if err != nil || len(out) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d Rescue errors, first: %v", len(errs), errs[0])
	}
	if len(rescued) != n {
		t.Fatalf("%d distinct instances rescued, want %d", len(rescued), n)
	}
	for id, k := range rescued {
		if k != 1 {
			t.Fatalf("instance %s rescued %d times", id, k)
		}
	}
	// One rescue record each: Created, Scheduled, Processing, Scheduled.
	hist := e.history(e.s, &store.Query{Kind: "kind-a"})
	if len(hist) != 4*n {
		t.Fatalf("%d history records after rescue, want %d (4 per instance)", len(hist), 4*n)
	}
	for _, in := range e.instances(e.s, &store.Query{Queue: queue}) {
		if in.State != store.Scheduled || in.Attempt != 1 {
			t.Fatalf("instance %s after rescue: state %v attempt %d, want scheduled with attempt 1", in.ID, in.State, in.Attempt)
		}
	}
}

// testUniqueKeyConcurrent enqueues the same unique key from many handles at
// once, as every node of a cluster does for a recurring job's tick: exactly
// one instance is stored per key and every loser names it.
func testUniqueKeyConcurrent(t *testing.T, h Harness) {
	e := setup(t, h)
	ss := make([]store.Store, handles)
	for i := range ss {
		ss[i] = e.open()
	}
	const ticks = 5
	const queue = "q-tick"
	var (
		mu      sync.Mutex
		winners = map[string][]string{} // key -> IDs stored
		holders = map[string][]string{} // key -> IDs named by duplicates
		errs    []error
		wg      sync.WaitGroup
	)
	for w := range handles * workersPerHandle {
		wg.Go(func() {
			s := ss[w%handles]
			for tick := range ticks {
				key := fmt.Sprintf("cron:kind-a:%d", tick)
				in := inst(fmt.Sprintf("tick-%d-node-%02d", tick, w), queue)
				in.UniqueKey, in.UniqueUntil = key, at(time.Duration(tick+1)*time.Minute)
				res, err := s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Node: fmt.Sprintf("node-%02d", w), Now: at(time.Duration(tick) * time.Minute)})
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case len(res) != 1:
					errs = append(errs, fmt.Errorf("%d results for one instance", len(res)))
				case res[0].Err == nil:
					winners[key] = append(winners[key], res[0].ID)
				case errors.Is(res[0].Err, store.ErrDuplicate):
					holders[key] = append(holders[key], res[0].ID)
				default:
					errs = append(errs, res[0].Err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	for tick := range ticks {
		key := fmt.Sprintf("cron:kind-a:%d", tick)
		if len(winners[key]) != 1 {
			t.Fatalf("key %s stored %d times (%v), want exactly once", key, len(winners[key]), winners[key])
		}
		if len(holders[key]) != handles*workersPerHandle-1 {
			t.Fatalf("key %s: %d duplicates reported, want %d", key, len(holders[key]), handles*workersPerHandle-1)
		}
		for _, id := range holders[key] {
			if id != winners[key][0] {
				t.Fatalf("key %s: a duplicate names holder %s, but %s holds it", key, id, winners[key][0])
			}
		}
	}
	if all := e.instances(e.s, &store.Query{Queue: queue}); len(all) != ticks {
		t.Fatalf("store holds %d tick instances, want %d", len(all), ticks)
	}
}

package job

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// A step (a shard join or a workflow gate) that finds its executor may
// run, on an attempt a node's fence gave up meanwhile, hands the attempt
// back: the executor did not run. Before, it submitted the empty outcome
// its decision carried, which the store refused as invalid ("outcome
// without an instance ID") together with every other outcome of the
// batch, so their leases ran out and they ran again.
func TestStepFencedBeforeItsExecutorRanHandsBack(t *testing.T) {
	mem, rec := runningAttempt(t)
	m, err := NewManager(WithStore(mem), WithNodeID("n1"), WithWorkers(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	ctx, cancel := context.WithCancelCause(t.Context())
	a := &attempt{rec: rec, ctx: ctx, cancel: cancel, start: time.Now(), leaseUntil: rec.LeaseUntil, hidx: -1}
	// Held as dispatch holds a claimed attempt.
	m.active.add(a)
	m.undecided.Add(1)
	m.watch.add([]*attempt{a})
	// As fenceAll does: the attempt is given up as fenced, its ctx
	// canceled with ErrLeaseLost, while the step is deciding.
	if ran := m.step(a, func(context.Context) stepDecision {
		if !m.giveUpAs(a, settledFenced) {
			t.Fatal("the attempt was already settled")
		}
		a.cancel(ErrLeaseLost)
		return stepDecision{run: true}
	}); ran {
		t.Fatal("step says the executor is to run on a fenced attempt")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		found, err := mem.LookupInstances(t.Context(), &store.Query{InstanceID: rec.ID})
		if err != nil || len(found) != 1 {
			t.Fatalf("LookupInstances(%s): %v, %v", rec.ID, found, err)
		}
		got := found[0]
		if got.State == store.Scheduled {
			if got.Attempt != rec.Attempt-1 && got.Attempt != rec.Attempt {
				t.Errorf("attempt %d after the hand-back, want %d not counted", got.Attempt, rec.Attempt)
			}
			if !strings.Contains(got.Error, "handed back") {
				t.Errorf("error %q, want a hand-back's", got.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s is %v (%q) 10 s after the step, want handed back (Scheduled)", rec.ID, got.State, got.Error)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

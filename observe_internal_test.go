package job

import (
	"errors"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestObserverHooksAllocateNothing: the engine's hooks build their events
// on the stack; with an observer that keeps nothing, an event costs no
// allocation on the worker's path.
func TestObserverHooksAllocateNothing(t *testing.T) {
	obs := observers{NopObserver{}, NopObserver{}}
	rec := &store.Instance{ID: "i", Kind: "email", Queue: "default", Attempt: 1, RunAt: time.Unix(100, 0)}
	r := &finishReq{a: &attempt{rec: rec, start: time.Unix(101, 0)}, out: store.Outcome{State: store.Completed}, ended: time.Unix(102, 0)}
	storeErr := errors.New("down")
	now, start := time.Unix(103, 0), time.Now()
	for name, hook := range map[string]func(){
		"started":   func() { obs.started(rec, now) },
		"finished":  func() { obs.finished(r, store.Completed, now) },
		"leaseLost": func() { obs.leaseLost(rec, LeaseLostFence) },
		"storeCall": func() { obs.storeCall(OpClaim, start, storeErr) },
		"rescued":   func() { obs.rescued([]*store.Instance{rec}, true) },
		"none":      func() { observers(nil).started(rec, now) },
	} {
		if n := testing.AllocsPerRun(1000, hook); n != 0 {
			t.Errorf("%s: %v allocations per event, want 0", name, n)
		}
	}
}

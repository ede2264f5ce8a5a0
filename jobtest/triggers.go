package jobtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

func init() {
	register("StoredTriggerOncePerCluster", testStoredTriggerOncePerCluster)
}

// testStoredTriggerOncePerCluster creates an interval trigger at run time
// on one of three managers: each tick runs once in the cluster; after a
// pause, then a delete made through the store by another handle, no tick
// fires.
func testStoredTriggerOncePerCluster(t *testing.T, e *env) {
	const interval = job.MinInterval
	var mu sync.Mutex
	ticks := make(map[int64]int)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(ticks) }
	mk := func() *job.Job {
		return mustJob(t, job.WithKind("trig"), job.WithExecutor(func(ji job.Instance, s string) {
			mu.Lock()
			ticks[ji.Info().RunAt.UnixNano()]++
			mu.Unlock()
		}))
	}
	var ms []*job.Manager
	for range 3 {
		ms = append(ms, e.manager(t, []*job.Job{mk()}, job.WithWorkers(2), job.WithTriggerReload(200*time.Millisecond)))
	}
	for _, m := range ms {
		start(t, m)
	}
	ctx := context.Background()
	if _, err := ms[0].Admin().PutTrigger(ctx, &store.Trigger{Name: "every-second", Kind: "trig", Interval: interval, Args: []byte(`["x"]`)}, 0); err != nil {
		t.Fatalf("PutTrigger: %v", err)
	}
	waitFor(t, deadline, "3 ticks", func() bool { return count() >= 3 })
	if _, err := ms[1].Admin().PauseTrigger(ctx, "every-second"); err != nil {
		t.Fatalf("PauseTrigger: %v", err)
	}
	// A tick already fired may still be running.
	time.Sleep(interval / 2)
	paused := count()
	time.Sleep(2*interval + 500*time.Millisecond)
	if n := count(); n != paused {
		t.Errorf("%d ticks ran while the trigger was paused", n-paused)
	}
	tr, err := ms[2].Admin().GetTrigger(ctx, "every-second")
	if err != nil {
		t.Fatalf("GetTrigger: %v", err)
	}
	if !tr.Paused || tr.LastTick.IsZero() || tr.LastInstanceID == "" {
		t.Errorf("stored trigger %+v: want paused, with its last tick recorded", tr)
	}
	if err := store.TriggersIn(e.store(t)).DeleteTrigger(ctx, &store.DeleteTriggerParams{Name: "every-second"}); err != nil {
		t.Fatalf("DeleteTrigger: %v", err)
	}
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := m.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	for at, c := range ticks {
		if c != 1 {
			t.Errorf("tick %v ran %d times", time.Unix(0, at), c)
		}
		if at%int64(interval) != 0 {
			t.Errorf("tick %v is not on an interval boundary", time.Unix(0, at))
		}
	}
}

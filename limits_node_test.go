package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// held runs until release closes, counting how many run now and the peak.
type held struct {
	now, peak, done atomic.Int64
	release         chan struct{}
}

func (h *held) run(ctx context.Context) error {
	n := h.now.Add(1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	defer func() { h.now.Add(-1); h.done.Add(1) }()
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return nil
}

// A node limit bounds what runs on each manager, not the cluster: two
// managers with a node limit of 2 on "limited" run 2 each (4 in all)
// while the rest waits, the unlimited kind runs past them, and every
// instance runs once the first are released.
func TestNodeConcurrencyLimit(t *testing.T) {
	t.Parallel()
	st := mustMemdb(t)
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	var free atomic.Int64
	hs := []*held{{release: release}, {release: release}}
	var ms []*job.Manager
	for i, h := range hs {
		m, err := job.NewManager(job.WithStore(st), job.WithWorkers(8), job.WithNodeID(fmt.Sprintf("node-lim-%d", i)),
			job.WithNodeConcurrencyLimits(job.ConcurrencyLimit{Kind: "limited", Max: 2}))
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range []struct {
			kind string
			exec any
		}{{"limited", h.run}, {"free", func() { free.Add(1) }}} {
			jb, err := job.NewJob(job.WithKind(j.kind), job.WithExecutor(j.exec))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.RegisterJob(jb); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
		ms = append(ms, m)
	}
	t.Cleanup(open) // before the managers stop (cleanups run last first): a failed test does not hang
	scheduleN(t, ms[0], "limited", 10)
	waitFor(t, "2 limited running on each manager", func() bool { return hs[0].now.Load() == 2 && hs[1].now.Load() == 2 })
	scheduleN(t, ms[1], "free", 20)
	waitFor(t, "the free kind run past the full node limits", func() bool { return free.Load() == 20 })
	if a, b := hs[0].now.Load(), hs[1].now.Load(); a != 2 || b != 2 {
		t.Fatalf("limited running: %d and %d; want 2 on each manager (node limit 2)", a, b)
	}
	for i, m := range ms {
		u := m.NodeConcurrencyLimits()
		if len(u) != 1 || u[0].Kind != "limited" || u[0].Max != 2 || u[0].Running != 2 {
			t.Fatalf("manager %d NodeConcurrencyLimits: %+v; want kind limited, max 2, 2 running", i, u)
		}
	}
	uses := waitCounts(t, ms[0], "limited")
	if uses[store.Processing] != 4 || uses[store.Scheduled] != 6 {
		t.Fatalf("limited in the store: %d processing, %d scheduled; want 4 and 6", uses[store.Processing], uses[store.Scheduled])
	}
	open()
	waitFor(t, "every limited instance run", func() bool { return hs[0].done.Load()+hs[1].done.Load() == 10 })
	for i, h := range hs {
		if p := h.peak.Load(); p > 2 {
			t.Fatalf("manager %d ran %d limited at once; node limit 2", i, p)
		}
	}
}

// waitCounts returns the counts by state of kind's instances.
func waitCounts(t *testing.T, m *job.Manager, kind string) [store.TimedOut + 1]int64 {
	t.Helper()
	rows, err := m.Admin().CountInstances(context.Background(), "", kind)
	if err != nil {
		t.Fatal(err)
	}
	var out [store.TimedOut + 1]int64
	for _, r := range rows {
		for st, n := range r.States {
			if st < len(out) {
				out[st] += n
			}
		}
	}
	return out
}

// A node limit of every kind in a queue bounds the batch a claim takes:
// never more running on the manager than it allows.
func TestNodeConcurrencyLimitOfAQueue(t *testing.T) {
	t.Parallel()
	st := mustMemdb(t)
	h := &held{release: make(chan struct{})}
	var once sync.Once
	open := func() { once.Do(func() { close(h.release) }) }
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(16), job.WithClaimBatch(16),
		job.WithNodeConcurrencyLimits(job.ConcurrencyLimit{Queue: job.DefaultQueue, Max: 3}))
	if err != nil {
		t.Fatal(err)
	}
	jb, err := job.NewJob(job.WithKind("limited"), job.WithExecutor(h.run))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(jb); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	t.Cleanup(open)
	scheduleN(t, m, "limited", 12)
	waitFor(t, "3 running", func() bool { return h.now.Load() == 3 })
	open()
	waitFor(t, "all 12 run", func() bool { return h.done.Load() == 12 })
	if p := h.peak.Load(); p != 3 {
		t.Fatalf("peak %d running; want 3 (the node limit of the queue)", p)
	}
}

func TestNodeConcurrencyLimitOptionErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ls   []job.ConcurrencyLimit
		says string
	}{
		{[]job.ConcurrencyLimit{{Kind: "a", Max: -1}}, "max -1"},
		{[]job.ConcurrencyLimit{{Kind: "a", Max: 1}, {Kind: "a", Max: 2}}, "two node concurrency limits of kind a"},
	} {
		_, err := job.NewManager(job.WithStore(mustMemdb(t)), job.WithNodeConcurrencyLimits(c.ls...))
		if !errors.Is(err, job.ErrInvalidOption) || err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("WithNodeConcurrencyLimits(%v): %v; want ErrInvalidOption saying %q", c.ls, err, c.says)
		}
	}
}

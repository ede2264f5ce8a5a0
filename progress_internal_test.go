package job

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// countingStore counts SetProgress calls and, while gate is set, holds
// each until gate is closed.
type countingStore struct {
	store.Store
	calls atomic.Int64
	gate  chan struct{}
}

func (s *countingStore) SetProgress(ctx context.Context, p *store.ProgressParams) error {
	s.calls.Add(1)
	if s.gate != nil {
		<-s.gate
	}
	return s.Store.SetProgress(ctx, p)
}

// runningAttempt stores one instance and claims it as owner "n1".
func runningAttempt(t *testing.T) (*memdbstore.Store, *store.Instance) {
	t.Helper()
	mem, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	in := &store.Instance{ID: "p1", Kind: "k", Queue: "q", RunAt: now, CreatedAt: now, MaxRetries: 0}
	if _, err := mem.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now}); err != nil {
		t.Fatal(err)
	}
	c, err := mem.Claim(t.Context(), &store.ClaimParams{Queue: "q", Owner: "n1", Limit: 1, Now: now, LeaseUntil: now.Add(time.Hour)})
	if err != nil || len(c.Instances) != 1 {
		t.Fatalf("Claim: %v, %v", c, err)
	}
	return mem, c.Instances[0]
}

// TestProgressThrottled reports progress in a tight loop for 2 s (of
// synctest's time): the store takes at most one write per interval, and
// the last report, made just before the attempt ends, is stored.
func TestProgressThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rec := runningAttempt(t)
		cs := &countingStore{Store: mem}
		p := newProgressReporter(cs, SystemClock{}, ProgressInterval, rec, "n1", func(err error) { t.Errorf("write: %v", err) })
		start := time.Now()
		for i := range 2000 {
			p.set(float64(i)/2000, fmt.Sprintf("%d of 2000", i))
			time.Sleep(time.Millisecond)
		}
		p.set(0.999, "last one")
		elapsed := time.Since(start)
		synctest.Wait()
		// One write at once, then at most one per interval.
		if n, most := cs.calls.Load(), int64(elapsed/ProgressInterval)+1; n > most || n < 2 {
			t.Errorf("%d store writes in %v of reports, want 2 to %d", n, elapsed, most)
		}
		if got, _ := p.get(); got.Message != "last one" {
			t.Errorf("Progress() = %+v, want the last report", got)
		}
		p.flush(true) // writes "last one" unless the writer just did
		before := cs.calls.Load()
		if most := int64(elapsed/ProgressInterval) + 2; before > most {
			t.Errorf("%d store writes in all, want at most %d", before, most)
		}
		recs, err := mem.LookupProgress(t.Context(), []string{rec.ID})
		if err != nil || len(recs) != 1 || recs[0].Fraction != 0.999 || recs[0].Message != "last one" {
			t.Fatalf("stored progress %+v (%v), want the last report", recs, err)
		}
		// Ended: further reports are dropped, a second flush writes nothing.
		p.set(1, "after the end")
		p.flush(true)
		synctest.Wait()
		if n := cs.calls.Load(); n != before {
			t.Errorf("%d writes after the end, want none", n-before)
		}
	})
}

// TestProgressNeverBlocks: while the store hangs on a write, reports
// return at once; the latest is written when the store answers.
func TestProgressNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rec := runningAttempt(t)
		cs := &countingStore{Store: mem, gate: make(chan struct{})}
		p := newProgressReporter(cs, SystemClock{}, ProgressInterval, rec, "n1", func(err error) { t.Errorf("write: %v", err) })
		p.set(0.1, "first")
		synctest.Wait() // the writer is held in the store
		done := make(chan struct{})
		var latest float64
		go func() {
			for i := range 100 {
				latest = 0.2 + float64(i)/1000
				p.set(latest, "later")
			}
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("SetProgress waited for the store")
		}
		close(cs.gate)
		p.flush(true)
		recs, err := mem.LookupProgress(t.Context(), []string{rec.ID})
		if err != nil || len(recs) != 1 || recs[0].Fraction != latest {
			t.Fatalf("stored progress %+v (%v), want the latest report", recs, err)
		}
		if n := cs.calls.Load(); n != 2 {
			t.Errorf("%d writes, want 2 (the first, then the latest)", n)
		}
	})
}

// TestClampProgress keeps reports within the store's bounds.
func TestClampProgress(t *testing.T) {
	long := ""
	for range store.MaxProgressMessage {
		long += "é" // two bytes each
	}
	for _, tc := range []struct {
		f    float64
		msg  string
		wf   float64
		wlen int
	}{
		{-1, "", 0, 0}, {2, "x", 1, 1}, {0.5, long, 0.5, store.MaxProgressMessage}, {0.5, "a\xffb", 0.5, 5},
	} {
		f, m := clampProgress(tc.f, tc.msg)
		p := store.ProgressParams{ID: "i", Owner: "o", Attempt: 1, Fraction: f, Message: m}
		if f != tc.wf || len(m) != tc.wlen || p.Validate() != nil {
			t.Errorf("clampProgress(%v, %q) = %v, %q (%v); want %v and %d bytes, valid", tc.f, tc.msg, f, m, p.Validate(), tc.wf, tc.wlen)
		}
	}
}

package memdbstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

var t0 = time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC)

func enqueueN(t *testing.T, s *Store, queue string, n, prio int, runAt time.Time, tag string) {
	t.Helper()
	var ins []*store.Instance
	for i := range n {
		ins = append(ins, &store.Instance{ID: fmt.Sprintf("%s-%d", tag, i), Kind: "k", Queue: queue, Priority: prio, RunAt: runAt, CreatedAt: t0})
	}
	if _, err := s.Enqueue(context.Background(), &store.EnqueueParams{Instances: ins, Now: t0}); err != nil {
		t.Fatal(err)
	}
}

// TestClaimSeeksPerLevel checks that a claim never walks the waiting
// instances: whatever the depth, it looks at the instances it claims plus
// at most two entries per priority level.
func TestClaimSeeksPerLevel(t *testing.T) {
	t.Parallel()
	s := mustNew(t)
	later := t0.Add(time.Hour)
	enqueueN(t, s, "q", 5000, 9, later, "future-9")
	enqueueN(t, s, "q", 5000, 5, later, "future-5")
	enqueueN(t, s, "q", 3, 5, t0, "ready-5")
	enqueueN(t, s, "q", 5000, 1, later, "future-1")
	enqueueN(t, s, "q", 2, 0, t0, "ready-0")
	enqueueN(t, s, "other", 5000, 7, t0, "other")

	qid, _ := s.knownName("q")
	picked, next, visited := pickLanes(&s.t, &rec{}, qid, nanos(t0.Add(time.Minute)), 10, nil)
	var got []string
	for _, r := range picked {
		got = append(got, r.id())
	}
	want := []string{"ready-5-0", "ready-5-1", "ready-5-2", "ready-0-0", "ready-0-1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("picked %v, want %v", got, want)
	}
	if next != nanos(later) {
		t.Fatalf("next %v, want %v", fromNanos(next), later)
	}
	// 4 levels: 9 (head not due), 5 (3 due, then not due), 1 (not due), 0 (2 due, end).
	if limit := len(picked) + 2*4; visited > limit {
		t.Fatalf("claim visited %d index entries over 20000 waiting, want at most %d", visited, limit)
	}
}

// TestSubscribeCleanup checks that a subscription whose ctx ends is closed
// and forgotten, and that notifying never blocks on a full channel.
func TestSubscribeCleanup(t *testing.T) {
	t.Parallel()
	s := mustNew(t)
	ctx, cancel := context.WithCancel(context.Background())
	var chans []<-chan struct{}
	for i := range 100 {
		ch, err := s.Subscribe(ctx, fmt.Sprintf("q%d", i%3))
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	for i := range 10 { // nobody reads: signals coalesce
		enqueueN(t, s, fmt.Sprintf("q%d", i%3), 1, 0, t0, fmt.Sprintf("n%d", i))
	}
	cancel()
	for i, ch := range chans {
		timeout := time.After(5 * time.Second)
	drain:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break drain
				}
			case <-timeout:
				t.Fatalf("subscription %d not closed after its ctx ended", i)
			}
		}
	}
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if len(s.subs) != 0 {
		t.Fatalf("%d queues still have subscribers after every ctx ended", len(s.subs))
	}
	if _, err := s.Subscribe(ctx, "q0"); err == nil {
		t.Fatalf("Subscribe with an ended ctx succeeded")
	}
}

// TestZeroAndFarTimes checks the nanosecond encoding at its edges: a zero
// RunAt is ready at once, and times beyond the int64 range clamp instead of
// wrapping.
func TestZeroAndFarTimes(t *testing.T) {
	t.Parallel()
	s := mustNew(t)
	ctx := context.Background()
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	ins := []*store.Instance{
		{ID: "zero", Kind: "k", Queue: "q", CreatedAt: t0},
		{ID: "far", Kind: "k", Queue: "q", RunAt: far, CreatedAt: t0, Priority: 1},
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: t0}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 5, Now: t0, LeaseUntil: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Instances) != 1 || res.Instances[0].ID != "zero" {
		t.Fatalf("claimed %d instances, want only the zero-RunAt one", len(res.Instances))
	}
	if !res.NextRunAt.After(time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("NextRunAt %v, want the far time clamped to the end of the int64 range", res.NextRunAt)
	}
}

func mustNew(t *testing.T) *Store {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSnapshotsUnderWrites checks that readers see whole snapshots while
// writers change the indexes in place: every lookup of all instances,
// taken while other goroutines claim and finish them, sees each instance
// exactly once and in exactly one state's index.
func TestSnapshotsUnderWrites(t *testing.T) {
	t.Parallel()
	const n = 3000
	s := mustNew(t)
	ctx := context.Background()
	enqueueN(t, s, "q", n, 0, t0, "snap")
	done := make(chan struct{})
	errs := make(chan error, 2)
	for w := range 2 {
		go func() {
			owner := fmt.Sprintf("w%d", w)
			for {
				res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: owner, Limit: 7, Now: t0, LeaseUntil: t0.Add(time.Hour)})
				if err != nil {
					errs <- err
					return
				}
				if len(res.Instances) == 0 {
					errs <- nil
					return
				}
				var outs []store.Outcome
				for _, in := range res.Instances {
					outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed})
				}
				if _, err := s.Finish(ctx, &store.FinishParams{Owner: owner, Now: t0, Outcomes: outs}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	go func() {
		for range 2 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		close(done)
	}()
	all := []store.State{store.Scheduled, store.Processing, store.Completed}
	for lookups := 0; ; lookups++ {
		select {
		case <-done:
			if lookups < 2 {
				t.Logf("only %d lookups overlapped the writers", lookups)
			}
			return
		default:
		}
		every, err := s.LookupInstances(ctx, &store.Query{})
		if err != nil {
			t.Fatal(err)
		}
		byState, err := s.LookupInstances(ctx, &store.Query{States: all})
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range [][]*store.Instance{every, byState} {
			seen := map[string]bool{}
			for _, in := range got {
				if seen[in.ID] {
					t.Fatalf("lookup returned %s twice", in.ID)
				}
				seen[in.ID] = true
			}
			if len(seen) != n {
				t.Fatalf("lookup returned %d instances, want %d", len(seen), n)
			}
		}
	}
}

// TestLookupPlans checks that a lookup gives the same answer whichever
// index it walks: for queries whose plans differ (the states' indexes or
// the creation-time index, limited or not), the result is the full list
// of instances filtered and cut by hand.
func TestLookupPlans(t *testing.T) {
	t.Parallel()
	s := mustNew(t)
	ctx := context.Background()
	var ins []*store.Instance
	for i := range 2000 {
		ins = append(ins, &store.Instance{
			ID: fmt.Sprintf("i%04d", i), Kind: []string{"a", "b", "c"}[i%3], Queue: "q",
			CreatedAt: t0.Add(time.Duration(i%700) * time.Second), // ties: Seq breaks them
		})
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Now: t0}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1980, Now: t0, LeaseUntil: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var outs []store.Outcome
	for i, in := range res.Instances[:1970] {
		st := store.Completed
		if i%10 == 0 {
			st = store.Terminated
		}
		outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: st})
	}
	if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: t0, Outcomes: outs}); err != nil {
		t.Fatal(err)
	}
	all, err := s.LookupInstances(ctx, &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(ins) {
		t.Fatalf("lookup of everything returned %d instances, want %d", len(all), len(ins))
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if a.CreatedAt.Before(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.Seq < b.Seq {
			t.Fatalf("lookup of everything not newest first at %d: %v/%d before %v/%d", i, a.CreatedAt, a.Seq, b.CreatedAt, b.Seq)
		}
	}
	since, until := t0.Add(100*time.Second), t0.Add(400*time.Second)
	for _, q := range []store.Query{
		{States: []store.State{store.Completed}, Limit: 10},
		{States: []store.State{store.Completed}},
		{States: []store.State{store.Terminated}, Limit: 5},
		{States: []store.State{store.Scheduled}, Limit: 10},
		{States: []store.State{store.Scheduled, store.Processing}, Limit: 15},
		{States: []store.State{store.Processing, store.Completed}, Kind: "b", Limit: 30},
		{Kind: "c", Limit: 10},
		{Kind: "c"},
		{Since: since, Until: until, Limit: 50},
		{Since: since, Until: until, States: []store.State{store.Completed}, Limit: 7},
		{Until: since, Kind: "a"},
		{Since: until},
	} {
		var want []string
		for _, in := range all {
			if (len(q.States) == 0 || slices.Contains(q.States, in.State)) && (q.Kind == "" || q.Kind == in.Kind) &&
				(q.Since.IsZero() || !in.CreatedAt.Before(q.Since)) && (q.Until.IsZero() || in.CreatedAt.Before(q.Until)) {
				want = append(want, in.ID)
			}
		}
		if q.Limit > 0 && len(want) > q.Limit {
			want = want[:q.Limit]
		}
		got, err := s.LookupInstances(ctx, &q)
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for _, in := range got {
			gotIDs = append(gotIDs, in.ID)
		}
		if len(want) == 0 || fmt.Sprint(gotIDs) != fmt.Sprint(want) {
			t.Errorf("lookup %+v:\n got  %v\n want %v", q, gotIDs, want)
		}
	}
}

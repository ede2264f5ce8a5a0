package job_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// lookMidWake is a memdb store that, at the first join of parent (its
// read of the shards, no state filter), lets the last shard end between
// the read and its reply: the read shows the shard running, and the
// shard's end and its wake-up of the parent happen while the join still
// looks (the parent is Processing, so that wake-up changes nothing).
type lookMidWake struct {
	*memdbstore.Store
	parent  atomic.Pointer[string]
	once    sync.Once
	release chan struct{} // closed: the last shard may end
	woke    chan struct{} // closed: the parent's wake-up was stored
	wokeOne sync.Once
}

func (s *lookMidWake) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	got, err := s.Store.LookupInstances(ctx, q)
	if p := s.parent.Load(); p != nil && q.Parent == *p && len(q.States) == 0 {
		s.once.Do(func() {
			close(s.release)
			select {
			case <-s.woke:
			case <-time.After(10 * time.Second):
			}
		})
	}
	return got, err
}

func (s *lookMidWake) Wake(ctx context.Context, p *store.WakeParams) error {
	err := s.Store.Wake(ctx, p)
	if pp := s.parent.Load(); err == nil && pp != nil && slices.Contains(p.IDs, *pp) {
		s.wokeOne.Do(func() { close(s.woke) })
	}
	return err
}

// TestShardsWakeDuringJoinLook: the last shard ends while its parent's
// join is looking at the shards (and found that shard running). The
// shard's wake-up reached the parent while it was being looked at, so it
// changed nothing; the parent still completes at once, not at its
// recheck an hour later.
func TestShardsWakeDuringJoinLook(t *testing.T) {
	t.Parallel()
	st := &lookMidWake{Store: newMemdb(t), release: make(chan struct{}), woke: make(chan struct{})}
	j := mustJob(t, job.WithKind("w"), job.WithExecutor(func(ctx context.Context, ji job.Instance) (int, error) {
		i := ji.Info().ShardIndex
		if i == 1 {
			select {
			case <-st.release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return i, nil
	}))
	m := newManager(t, job.WithStore(st), job.WithPollInterval(20*time.Millisecond), job.WithShardRecheck(time.Hour))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := m.ScheduleJob(ctx, "w", job.WithShards(2))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "shard 0 completed and shard 1 running", func() bool {
		s := shardsOf(t, m, p.ID, 2)
		return s[0].State == job.Completed && s[1].State == job.Processing
	})
	st.parent.Store(&p.ID) // from here on, the parent's join is the one reading its shards
	// The parent looks now (as at a recheck), while shard 1 still runs.
	if err := st.Store.Wake(ctx, &store.WakeParams{IDs: []string{p.ID}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.woke:
	case <-time.After(15 * time.Second):
		t.Fatal("the last shard's end did not wake the parent while its join looked; the test proves nothing")
	}
	got := waitState(t, m, p.ID, job.Completed)
	var r0, r1 []int
	if err := got.ResultsInto(&r0, &r1); err != nil || !slices.Equal(r0, []int{0}) || !slices.Equal(r1, []int{1}) {
		t.Fatalf("parent results %v %v (%v), want [0] [1]", r0, r1, err)
	}
}

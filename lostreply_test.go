package job_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// lossyStore applies some calls in the real store but loses their reply:
// the caller gets a timeout, as a client does whose server stalled past its
// read timeout and then ran the command.
type lossyStore struct {
	store.Store
	loseClaims   atomic.Int64 // lose the reply of this many claims that claimed something
	loseFinishes atomic.Int64 // lose the reply of this many finishes
}

var errLostReply = errors.New("read tcp: i/o timeout (the reply was lost)")

func (s *lossyStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	if err == nil && len(res.Instances) > 0 && s.loseClaims.Add(-1) >= 0 {
		return nil, errLostReply
	}
	return res, err
}

func (s *lossyStore) Finish(ctx context.Context, p *store.FinishParams) ([]error, error) {
	errs, err := s.Store.Finish(ctx, p)
	if err == nil && s.loseFinishes.Add(-1) >= 0 {
		return nil, errLostReply
	}
	return errs, err
}

// A claim or a finish whose reply was lost is repeated and its work is
// neither lost nor run twice. Before, the instances of a lost claim sat
// Processing until their lease ended and the rescuer counted the attempt
// (with no retries: Terminated, never run), and a repeated Finish was
// refused as "lease lost" for an instance it had completed, so its complete
// handler never ran.
func TestLostRepliesOfClaimAndFinish(t *testing.T) {
	t.Parallel()
	st := &lossyStore{Store: mustMemdb(t)}
	st.loseClaims.Store(2)
	st.loseFinishes.Store(2)
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(4), job.WithLease(500*time.Millisecond),
		job.WithRescueInterval(50*time.Millisecond), job.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs, completed := map[string]int{}, map[string]int{}
	j, err := job.NewJob(job.WithKind("once"), job.WithMaxRetries(0),
		job.WithExecutor(func(ji job.Instance) {
			mu.Lock()
			runs[ji.ID()]++
			mu.Unlock()
		}),
		job.WithCompleteProcessor(func(ji job.Instance, _ []any) {
			mu.Lock()
			completed[ji.ID()]++
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const n = 20
	var ids []string
	for range n {
		ji, err := m.ScheduleJob(ctx, "once")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ji.ID())
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryState(job.Completed, job.Terminated, job.Canceled, job.TimedOut)))
		if err == nil && len(got) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d instances final after 20s (%v)", len(got), n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitHandlers := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		c := len(completed)
		mu.Unlock()
		if c == n || time.Now().After(waitHandlers) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		ji, err := m.LookupInstance(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if ji.State() != job.Completed || runs[id] != 1 || completed[id] != 1 {
			t.Errorf("instance %s: %v (%v), ran %d times, complete handler %d times; want completed, once each", id, ji.State(), ji.Error(), runs[id], completed[id])
		}
	}
	if st.loseClaims.Load() >= 0 || st.loseFinishes.Load() >= 0 {
		t.Fatalf("the store lost fewer replies than planned (claims left %d, finishes left %d): the test proved nothing", st.loseClaims.Load(), st.loseFinishes.Load())
	}
}

func mustMemdb(t *testing.T) *memdbstore.Store {
	t.Helper()
	s, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

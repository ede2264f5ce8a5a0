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

func (s *lossyStore) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	res, err := s.Store.Finish(ctx, p)
	if err == nil && s.loseFinishes.Add(-1) >= 0 {
		return nil, errLostReply
	}
	return res, err
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
	// The lease is long enough that a loaded machine (CI at load 30 saw a
	// 500 ms lease lapse before its renewal ran) does not end an attempt
	// the test means to complete: no step here waits for a lease to end.
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(4), job.WithLease(3*time.Second),
		job.WithRescueInterval(50*time.Millisecond), job.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs, completed := map[string]int{}, map[string]int{}
	j, err := job.NewJob(job.WithKind("once"), job.WithMaxRetries(0),
		job.WithExecutor(func(ji job.Instance) {
			mu.Lock()
			runs[ji.Info().ID]++
			mu.Unlock()
		}),
		job.WithCompleteProcessor(func(ji job.Instance, _ []any) {
			mu.Lock()
			completed[ji.Info().ID]++
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
		ids = append(ids, ji.ID)
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
		ji, err := m.GetInstance(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if ji.State != job.Completed || runs[id] != 1 || completed[id] != 1 {
			t.Errorf("instance %s: %v (%v), ran %d times, complete handler %d times; want completed, once each", id, ji.State, ji.Error, runs[id], completed[id])
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

// lossyEnqueue stores instances but loses the reply of the first Enqueue.
type lossyEnqueue struct {
	store.Store
	lost atomic.Bool
}

func (s *lossyEnqueue) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	res, err := s.Store.Enqueue(ctx, p)
	if err == nil && s.lost.CompareAndSwap(false, true) {
		return nil, errLostReply
	}
	return res, err
}

// A ScheduleJob whose reply was lost, repeated with the same idempotency
// key, returns the instance the first call stored and stores no other.
func TestScheduleRepeatedWithIdempotencyKey(t *testing.T) {
	t.Parallel()
	st := &lossyEnqueue{Store: mustMemdb(t)}
	m, err := job.NewManager(job.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("mail"), job.WithExecutor(func(to string) {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	opts := []job.ScheduleOption{job.WithArguments("a@example.com"), job.WithScheduleAfter(time.Hour), job.WithIdempotencyKey("order-42")}
	if _, err := m.ScheduleJob(ctx, "mail", opts...); !errors.Is(err, errLostReply) {
		t.Fatalf("first ScheduleJob: %v, want the lost reply", err)
	}
	again, err := m.ScheduleJob(ctx, "mail", opts...)
	if err != nil {
		t.Fatalf("repeated ScheduleJob: %v", err)
	}
	all, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("mail")))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].ID != again.ID || again.State != job.Scheduled {
		t.Fatalf("after a repeated schedule: %d instances stored, returned %s (%v); want one, the one returned, scheduled", len(all), again.ID, again.State)
	}
	// Another key (or none) is another instance; the same key of another
	// kind too.
	other, err := m.ScheduleJob(ctx, "mail", job.WithArguments("b@example.com"), job.WithIdempotencyKey("order-43"))
	if err != nil || other.ID == again.ID {
		t.Fatalf("schedule with another key: %v, ID %v (first %v)", err, other, again.ID)
	}
	if _, err := m.ScheduleJob(ctx, "mail", job.WithIdempotencyKey("")); !errors.Is(err, job.ErrInvalidOption) {
		t.Fatalf("empty idempotency key: %v, want ErrInvalidOption", err)
	}
}

package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// customerKey is a WithLimitKeyFunc: the first argument, a customer ID.
func customerKey(args []byte) (string, error) {
	var a []json.RawMessage
	if err := json.Unmarshal(args, &a); err != nil || len(a) == 0 {
		return "", fmt.Errorf("arguments %s: want [customer, ...]", args)
	}
	var c string
	if err := json.Unmarshal(a[0], &c); err != nil {
		return "", fmt.Errorf("customer %s: %w", a[0], err)
	}
	return c, nil
}

// A limit of one per key across three managers: no customer ever has two
// charges running, each customer's run in the order scheduled, and
// charges of different customers run side by side.
func TestPerKeyLimitSequentialAcrossManagers(t *testing.T) {
	t.Parallel()
	st := mustMemdb(t)
	setLimit(t, st, job.ConcurrencyLimit{Kind: "charge", Max: 1, PerKey: true})
	const customers, each = 8, 10
	var (
		mu       sync.Mutex
		running  = map[string]int{}
		last     = map[string]int{}
		errs     []error
		now, top atomic.Int64
		done     atomic.Int64
	)
	charge := func(ctx context.Context, cust string, i int) error {
		mu.Lock()
		running[cust]++
		if running[cust] > 1 {
			errs = append(errs, fmt.Errorf("customer %s: %d charges running, limit 1 per key", cust, running[cust]))
		}
		if prev, ok := last[cust]; (ok && i != prev+1) || (!ok && i != 0) {
			errs = append(errs, fmt.Errorf("customer %s: charge %d ran after charge %d; a key's instances run in the order scheduled", cust, i, prev))
		}
		last[cust] = i
		mu.Unlock()
		n := now.Add(1)
		for p := top.Load(); n > p && !top.CompareAndSwap(p, n); p = top.Load() {
		}
		tm := time.NewTimer(3 * time.Millisecond)
		select {
		case <-tm.C:
		case <-ctx.Done():
		}
		now.Add(-1)
		mu.Lock()
		running[cust]--
		mu.Unlock()
		done.Add(1)
		return nil
	}
	var ms []*job.Manager
	for i := range 3 {
		m := newManager(t, job.WithStore(st), job.WithWorkers(4), job.WithNodeID(fmt.Sprintf("key-%d", i)), job.WithPollInterval(200*time.Millisecond))
		if err := m.RegisterJob(mustJob(t, job.WithKind("charge"), job.WithExecutor(charge), job.WithLimitKeyFunc(customerKey))); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	ctx := t.Context()
	for i := range each {
		for c := range customers {
			if _, err := ms[0].ScheduleJob(ctx, "charge", job.WithArguments(fmt.Sprintf("cust-%d", c), i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range ms {
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every charge done", func() bool { return done.Load() == customers*each })
	mu.Lock()
	defer mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("peak charges running: %d (8 customers, 1 per customer, 12 workers)", top.Load())
	if top.Load() < 2 {
		t.Errorf("peak of %d charges running; the charges of other customers must not wait for one customer's", top.Load())
	}
}

// ExplainWaiting names the key; a busy key does not hold another back;
// the instance reads back with its key.
func TestPerKeyLimitExplainWaiting(t *testing.T) {
	t.Parallel()
	st := mustMemdb(t)
	setLimit(t, st, job.ConcurrencyLimit{Kind: "charge", Max: 1, PerKey: true})
	release := make(chan struct{})
	var started atomic.Int64
	m := newManager(t, job.WithStore(st), job.WithWorkers(4))
	if err := m.RegisterJob(mustJob(t, job.WithKind("charge"), job.WithExecutor(func(ctx context.Context, cust string) error {
		started.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}), job.WithLimitKeyFunc(customerKey))); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := m.ScheduleJob(ctx, "charge", job.WithArguments("customer-42")); err != nil {
		t.Fatal(err)
	}
	second, err := m.ScheduleJob(ctx, "charge", job.WithArguments("customer-42"))
	if err != nil {
		t.Fatal(err)
	}
	// WithLimitKey overrides the kind's function.
	other, err := m.ScheduleJob(ctx, "charge", job.WithArguments("customer-42"), job.WithLimitKey("customer-7"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer close(release)
	waitFor(t, "customer-42's first charge and customer-7's running", func() bool { return started.Load() == 2 })
	info, err := m.GetInstance(ctx, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.LimitKey != "customer-7" || info.State != job.Processing {
		t.Fatalf("the charge scheduled WithLimitKey(customer-7): key %q, state %v; want customer-7, processing", info.LimitKey, info.State)
	}
	ex, err := m.ExplainWaiting(ctx, second.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := "waiting for the concurrency limit of kind charge, key customer-42 (1/1 running)"; ex.Reason != job.WaitConcurrencyLimit || ex.Message != want {
		t.Fatalf("ExplainWaiting = %s: %q, want %s: %q", ex.Reason, ex.Message, job.WaitConcurrencyLimit, want)
	}
}

// hidesKeyedLimits enforces limits but not per-key ones.
type hidesKeyedLimits struct{ store.Store }

func (hidesKeyedLimits) EnforcesConcurrencyLimits() bool { return true }

// Per-key limits and keys are refused where they cannot hold.
func TestPerKeyLimitRefused(t *testing.T) {
	t.Parallel()
	m := newManager(t, job.WithStore(hidesKeyedLimits{mustMemdb(t)}))
	ctx := t.Context()
	if err := m.Admin().SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: "charge", Max: 1, PerKey: true}); !errors.Is(err, job.ErrKeyedLimitsUnsupported) {
		t.Errorf("SetConcurrencyLimit per key on a store without per-key limits: %v, want ErrKeyedLimitsUnsupported", err)
	}
	if err := m.Admin().SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: "charge", Max: 1}); err != nil {
		t.Errorf("SetConcurrencyLimit of the whole kind on the same store: %v", err)
	}
	if err := m.RegisterJob(mustJob(t, job.WithKind("charge"), job.WithExecutor(func(string) {}))); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ScheduleJob(ctx, "charge", job.WithArguments("c"), job.WithLimitKey(strings.Repeat("k", store.MaxLimitKeyBytes+1))); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("WithLimitKey of %d bytes: %v, want ErrInvalidOption", store.MaxLimitKeyBytes+1, err)
	}
	if _, err := job.NewManager(job.WithStore(mustMemdb(t)), job.WithNodeConcurrencyLimits(job.ConcurrencyLimit{Kind: "charge", Max: 1, PerKey: true})); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("WithNodeConcurrencyLimits per key: %v, want ErrInvalidOption", err)
	}
	bad := mustJob(t, job.WithKind("bad-key"), job.WithExecutor(func(int) {}), job.WithLimitKeyFunc(customerKey))
	if err := m.RegisterJob(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ScheduleJob(ctx, "bad-key", job.WithArguments(7)); err == nil || !strings.Contains(err.Error(), "limit key of kind bad-key") {
		t.Errorf("ScheduleJob whose WithLimitKeyFunc fails: %v, want its error", err)
	}
}

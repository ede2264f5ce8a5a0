package job_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// waitRaceStore orders one run of Wait against the engine: claims wait
// until Wait's first store lookup begins; that lookup lets the claim go
// and answers only once the instance is Completed in the store, while the
// executor's logs are still held in AppendLogs.
type waitRaceStore struct {
	store.Store
	claimGate chan struct{} // closed by the first armed lookup
	armed     atomic.Bool
	once      sync.Once
	done      func() bool // the instance is Completed in the store
	logsGate  chan struct{}
	logsIn    atomic.Bool // AppendLogs was called (and waits)
	logsOut   atomic.Bool // AppendLogs returned
}

func (s *waitRaceStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	select {
	case <-s.claimGate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.Claim(ctx, p)
}

func (s *waitRaceStore) AppendLogs(ctx context.Context, recs []*store.LogRecord) error {
	s.logsIn.Store(true)
	<-s.logsGate
	defer s.logsOut.Store(true)
	return s.Store.AppendLogs(ctx, recs)
}

func (s *waitRaceStore) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	if s.armed.Load() {
		s.once.Do(func() {
			close(s.claimGate)
			for !s.done() || !s.logsIn.Load() {
				time.Sleep(time.Millisecond)
			}
		})
	}
	return s.Store.LookupInstances(ctx, q)
}

// Wait does not return while the logs of an attempt that ran (claimed,
// executed and finished) during its store lookup are still being written:
// it checks the manager's own counters again after the lookup. Before, it
// read them only before, so a run that fitted inside the lookup (a wide
// window through jobd's network round trip) left Wait returning with its
// logs unwritten (seen as the remote scenario Logs failing in CI).
func TestWaitCoversWorkDoneDuringItsLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := newMemdb(t)
	var id atomic.Value
	s := &waitRaceStore{Store: mem, claimGate: make(chan struct{}), logsGate: make(chan struct{})}
	s.done = func() bool {
		v, _ := id.Load().(string)
		if v == "" {
			return false
		}
		ins, err := mem.LookupInstances(ctx, &store.Query{InstanceID: v})
		return err == nil && len(ins) == 1 && ins[0].State == store.Completed
	}
	m := newManager(t, job.WithStore(s), job.WithWorkers(1))
	var release sync.Once
	openLogs := func() { release.Do(func() { close(s.logsGate) }) }
	t.Cleanup(openLogs) // before the manager's Stop (cleanups run last first)
	if err := m.RegisterJob(mustJob(t, job.WithKind("l"), job.WithExecutor(func(ji job.Instance) { ji.Infof("hello") }))); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	inst, err := m.ScheduleJob(ctx, "l")
	if err != nil {
		t.Fatal(err)
	}
	id.Store(inst.ID)
	s.armed.Store(true)

	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		waited <- m.Wait(wctx)
	}()
	// Let the logs through once the armed lookup has answered; Wait may
	// return only after they are stored.
	for !s.done() || !s.logsIn.Load() {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-waited:
		t.Fatalf("Wait returned (%v) while the run's logs were still being written", err)
	case <-time.After(100 * time.Millisecond):
	}
	openLogs()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if !s.logsOut.Load() {
		t.Fatal("Wait returned before the logs were stored")
	}
}

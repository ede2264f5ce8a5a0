package job

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Start starts the manager's background work: claiming and running
// instances of its queues, renewing leases, rescuing expired ones,
// scheduling recurring jobs' ticks, and retention. ctx bounds only the
// start itself; call Stop to stop. A stopped manager cannot start again.
func (m *Manager) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("job: start: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running {
		return ErrAlreadyStarted
	}
	if m.stopped {
		return fmt.Errorf("%w: a stopped manager cannot start again; create a new one", ErrNotRunning)
	}
	m.running = true
	m.stopCh = make(chan struct{})
	m.runCtx, m.runCancel = context.WithCancelCause(context.Background())
	m.finishCh = make(chan *finishReq, 4*m.cfg.finishBatch)
	m.logMu.Lock()
	m.logCh = make(chan *store.LogRecord, 8192)
	m.logMu.Unlock()

	m.finishWG.Add(1)
	go m.completer()
	m.logWG.Add(1)
	go m.logWriter(m.logCh)
	m.renewStop = make(chan struct{})
	m.renewWG.Add(1)
	go m.renewLoop()
	m.bg.Add(3 + len(m.cfg.queues))
	go m.claimLoop()
	go m.rescueLoop()
	go m.pruneLoop()
	for _, q := range m.cfg.queues {
		go m.subscribe(q)
	}
	for _, j := range m.reg.all() {
		if j.recurring != nil {
			m.startRecurringLocked(j)
		}
	}
	m.log.Debug("manager started", "workers", m.cfg.workers, "queues", m.cfg.queues)
	return nil
}

// Stop stops claiming and scheduling, lets running attempts finish until
// ctx ends, then cancels those still running (their context's cause is
// ErrShutdown) and hands their leases back, so another manager can run them
// at once without counting the attempt. It returns ctx's error when ctx
// ended before everything finished, and nil otherwise.
func (m *Manager) Stop(ctx context.Context) error {
	m.mu.Lock()
	if !m.running {
		m.mu.Unlock()
		return ErrNotRunning
	}
	m.running = false
	m.stopped = true
	close(m.stopCh)
	for kind, stop := range m.recurring {
		close(stop)
		delete(m.recurring, kind)
	}
	m.mu.Unlock()

	m.bg.Wait() // no more claims or ticks
	var drainErr error
	if err := m.drain(ctx); err != nil {
		drainErr = err
		m.runCancel(ErrShutdown)
		m.handBack()
	}
	close(m.finishCh)
	m.finishWG.Wait()
	close(m.renewStop)
	m.renewWG.Wait()
	m.logMu.Lock()
	close(m.logCh)
	m.logCh = nil
	m.logMu.Unlock()
	m.logWG.Wait()
	m.runCancel(ErrShutdown)
	m.signalChanged()
	if drainErr != nil {
		return fmt.Errorf("job: stop: running attempts handed back: %w", drainErr)
	}
	return nil
}

// drain waits until no attempt runs or ctx ends.
func (m *Manager) drain(ctx context.Context) error {
	for {
		if _, busy := m.pool.stats(); busy == 0 {
			return nil
		}
		select {
		case <-m.pool.freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// handBack releases the leases of attempts still running after Stop's
// deadline: they go back to the queue at their old place (their run time
// is kept, so they are due at once), their attempt not counted.
func (m *Manager) handBack() {
	for _, a := range m.active.snapshot() {
		if !a.settled.CompareAndSwap(false, true) {
			continue
		}
		m.submit(&finishReq{a: a, inst: newInstance(a.rec.Clone(), m), out: store.Outcome{
			ID: a.rec.ID, Attempt: a.rec.Attempt, State: store.Scheduled, RunAt: a.rec.RunAt, Release: true,
			Error: "handed back: " + ErrShutdown.Error(),
		}})
	}
}

// Wait returns when no instance of the manager's queues is pending or
// running (ticks of recurring jobs not yet due do not count), or with
// ctx's error when ctx ends first.
func (m *Manager) Wait(ctx context.Context) error {
	for {
		changed := *m.changed.Load()
		idle, err := m.idle(ctx)
		if err != nil {
			return fmt.Errorf("job: wait: %w", err)
		}
		if idle {
			return nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("job: wait: %w", ctx.Err())
		}
		t.Stop()
	}
}

func (m *Manager) idle(ctx context.Context) (bool, error) {
	if m.active.len() > 0 || m.unflushed.Load() > 0 || m.logsQueued.Load() > 0 {
		return false, nil
	}
	now := m.clock.Now()
	for _, q := range m.cfg.queues {
		insts, err := m.store.LookupInstances(ctx, &store.Query{
			Queue: q, States: []store.State{store.Scheduled, store.Processing}, Limit: 256,
		})
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return false, err
		}
		for _, in := range insts {
			pendingTick := in.State == store.Scheduled && in.RunAt.After(now) && strings.HasPrefix(in.UniqueKey, tickKeyPrefix)
			if !pendingTick {
				return false, nil
			}
		}
		if len(insts) == 256 {
			return false, nil
		}
	}
	return true, nil
}

// logWriter writes instance logs in batches.
func (m *Manager) logWriter(ch <-chan *store.LogRecord) {
	defer m.logWG.Done()
	batch := make([]*store.LogRecord, 0, 256)
	for r := range ch {
		batch = drainInto(append(batch[:0], r), ch)
		m.writeLogs(batch)
	}
}

func (m *Manager) writeLogs(batch []*store.LogRecord) {
	defer func() {
		m.logsQueued.Add(-int64(len(batch)))
		m.signalChanged()
	}()
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := m.store.AppendLogs(ctx, batch)
		cancel()
		if err == nil {
			return
		}
		if try >= 5 {
			m.log.Error("write instance logs; dropping them", "count", len(batch), "err", err)
			return
		}
		time.Sleep(retryDelay(try))
	}
}

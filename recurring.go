package job

import (
	"context"
	"errors"
	"time"

	"github.com/jobkit/job/store"
)

// startRecurringLocked starts the ticker of recurring job j. m.mu is held.
func (m *Manager) startRecurringLocked(j *Job) {
	if _, ok := m.recurring[j.kind]; ok {
		return
	}
	stop := make(chan struct{})
	m.recurring[j.kind] = stop
	m.bg.Add(1)
	go m.recur(j, stop)
}

// recur keeps the next tick of j scheduled. A tick is scheduled as soon as
// the previous one is due, with RunAt at the tick, so the claim loop starts
// it on time; its unique key (kind + tick time) is the same on every
// manager, so the store keeps one instance per tick per cluster, and a
// manager that dies loses nothing the others do not schedule.
func (m *Manager) recur(j *Job, stop <-chan struct{}) {
	defer m.bg.Done()
	r := j.recurring
	failures := 0
	for {
		now := m.clock.Now()
		tick := r.next(now)
		if tick.IsZero() { // a cron spec that never fires again
			m.log.Warn("recurring job has no next tick", "kind", j.kind, "spec", r.spec)
			return
		}
		if err := m.scheduleTick(j, tick); err != nil {
			failures++
			d := retryDelay(failures - 1)
			m.log.Warn("schedule recurring tick; retrying", "kind", j.kind, "tick", tick, "err", err, "in", d)
			select {
			case <-stop:
				return
			case <-m.stopCh:
				return
			case <-time.After(d):
			}
			continue
		}
		failures = 0
		t := m.clock.NewTimer(tick.Sub(now))
		select {
		case <-t.C():
		case <-stop:
			t.Stop()
			return
		case <-m.stopCh:
			t.Stop()
			return
		}
	}
}

func (m *Manager) scheduleTick(j *Job, tick time.Time) error {
	var c scheduleConfig
	for _, o := range j.recurring.opts {
		if err := o(&c); err != nil {
			return err
		}
	}
	c.runAt = tick
	c.tickKey = tickKey(j.kind, tick)
	c.tickHoldTil = tick.Add(j.recurring.tickHold())
	rec, err := m.newRecord(j, &c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(m.runCtx, 30*time.Second)
	defer cancel()
	res, err := m.store.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{rec}, Node: m.node, Now: m.clock.Now()})
	if err != nil {
		return err
	}
	if len(res) == 1 && res[0].Err != nil && !errors.Is(res[0].Err, store.ErrDuplicate) {
		return res[0].Err
	}
	if len(res) == 1 && res[0].Err == nil {
		m.notifyLocal()
	}
	return nil
}

package job

import (
	"context"
	"fmt"

	"github.com/jobkit/job/store"
)

// pruneLoop applies retention.
func (m *Manager) pruneLoop() {
	defer m.bg.Done()
	for {
		if !sleep(m.clock, m.cfg.pruneInterval, m.stopCh) {
			return
		}
		if _, err := m.Prune(m.runCtx); err != nil {
			m.log.Warn("apply retention", "err", err)
		}
	}
}

// PruneResult counts what one Prune removed.
type PruneResult struct {
	// Instances is how many finished instances were removed, with their
	// history and logs.
	Instances int
	// History and Logs count the records removed, those of removed
	// instances included.
	History int
	Logs    int
}

// Prune applies the manager's retention now: finished instances past the
// age or count bounds go with their history and logs, and history and log
// records past their age. The manager runs it every prune interval; call
// it to prune sooner.
func (m *Manager) Prune(ctx context.Context) (PruneResult, error) {
	now := m.clock.Now()
	p := &store.PruneParams{Now: now, KeepFinished: m.cfg.finishedMax, Limit: 10_000}
	if m.cfg.finishedMaxAge > 0 {
		p.FinishedBefore = now.Add(-m.cfg.finishedMaxAge)
	}
	if m.cfg.historyMaxAge > 0 {
		p.HistoryBefore = now.Add(-m.cfg.historyMaxAge)
	}
	if m.cfg.logMaxAge > 0 {
		p.LogsBefore = now.Add(-m.cfg.logMaxAge)
	}
	res, err := m.store.Prune(ctx, p)
	if err != nil {
		return PruneResult{}, fmt.Errorf("job: prune: %w", err)
	}
	if res == nil {
		return PruneResult{}, nil
	}
	return PruneResult{Instances: res.Instances, History: res.History, Logs: res.Logs}, nil
}

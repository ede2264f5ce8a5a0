package job

import (
	"context"
	"fmt"

	"github.com/jobkit/job/store"
)

// pruneLoop applies retention every prune interval. A run stops between
// two batches when the manager stops.
func (m *Manager) pruneLoop(quit <-chan struct{}) {
	ctx, cancel := context.WithCancel(m.run.ctx)
	defer cancel()
	go func() {
		select {
		case <-quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		if !sleep(m.clock, m.cfg.pruneInterval, quit) {
			return
		}
		res, err := m.Admin().Prune(ctx)
		if err != nil && ctx.Err() == nil {
			m.log.Warn("apply retention", "err", err, "removed", res)
			continue
		}
		if res != (PruneResult{}) {
			m.log.Debug("applied retention", "instances", res.Instances, "history", res.History, "logs", res.Logs)
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

// pruneRule is one retention rule: how to ask the store for one batch of
// it, and how many records of the rule a batch removed.
type pruneRule struct {
	name    string
	params  func(p *store.PruneParams)
	removed func(r *store.PruneResult) int
}

// pruneRules returns the manager's enabled retention rules.
func (m *Manager) pruneRules() []pruneRule {
	var rules []pruneRule
	c := &m.cfg
	if c.finishedMaxAge > 0 || c.finishedMax > 0 {
		rules = append(rules, pruneRule{"finished instances",
			func(p *store.PruneParams) {
				p.KeepFinished = c.finishedMax
				if c.finishedMaxAge > 0 {
					p.FinishedBefore = p.Now.Add(-c.finishedMaxAge)
				}
			},
			func(r *store.PruneResult) int { return r.Instances }})
	}
	if c.historyMaxAge > 0 {
		rules = append(rules, pruneRule{"history",
			func(p *store.PruneParams) { p.HistoryBefore = p.Now.Add(-c.historyMaxAge) },
			func(r *store.PruneResult) int { return r.History }})
	}
	if c.logMaxAge > 0 {
		rules = append(rules, pruneRule{"logs",
			func(p *store.PruneParams) { p.LogsBefore = p.Now.Add(-c.logMaxAge) },
			func(r *store.PruneResult) int { return r.Logs }})
	}
	return rules
}

// Prune applies the manager's retention now and returns what it removed:
// finished instances past the age or count bounds go with their history
// and logs, and history and log records past their age. Each rule is
// applied in store calls that remove at most DefaultPruneBatch records
// each, as many as it takes to catch up, so one call never holds the store
// long and retention keeps up with any throughput. It returns early, with
// ctx's error, when ctx ends between two batches. The manager runs it
// every prune interval; call it to prune sooner.
func (a *Admin) Prune(ctx context.Context) (PruneResult, error) {
	m := a.m
	var total PruneResult
	limit := m.cfg.pruneBatch
	for _, rule := range m.pruneRules() {
		for {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			p := &store.PruneParams{Now: m.clock.Now(), Limit: limit}
			rule.params(p)
			res, err := m.store.Prune(ctx, p)
			if err != nil {
				return total, fmt.Errorf("job: prune %s: %w", rule.name, err)
			}
			if res == nil {
				break
			}
			total.Instances += res.Instances
			total.History += res.History
			total.Logs += res.Logs
			// A batch short of the limit means the rule has caught up;
			// a full one means there may be more.
			if rule.removed(res) < limit {
				break
			}
		}
	}
	return total, nil
}

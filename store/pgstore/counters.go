package pgstore

import (
	"context"
	"time"
)

// The per-group counters (Inspector.Counts) are the rows of counts plus
// the changes writers add to count_deltas (migration 0010): a writer
// inserts its changes, never updating a shared row, so a transaction left
// open holds no lock another writer of its group would wait for. Counts
// and Lag read both tables in one snapshot. compact folds the committed
// changes into counts in a short transaction of its own: the rows it
// deletes are committed ones no writer touches again, and it is the only
// writer of counts, so it waits only on another compaction.

// compactEvery is how often a Store that writes folds the counter changes
// of its namespace: about once per interval while it writes, never while
// it is idle. Each compaction is a transaction of its own, so a short
// interval is paid at low rates (every 250 ms cost a quarter of a
// transaction per job at 15 jobs/s); Counts and Lag read the changes not
// yet folded, so a longer one only gives them more rows to sum (a few
// thousand at most at burn-down rates).
const compactEvery = time.Second

// compactSQL returns the compaction statement.
func (s *Store) compactSQL() string {
	return `WITH d AS (DELETE FROM ` + s.t("count_deltas") + ` WHERE ns = $1 RETURNING queue, kind, state, n)
INSERT INTO ` + s.t("counts") + ` AS c (ns, queue, kind, state, n)
	SELECT $1, queue, kind, state, sum(n) FROM d GROUP BY queue, kind, state ORDER BY 2, 3, 4
	ON CONFLICT (ns, queue, kind, state) DO UPDATE SET n = c.n + excluded.n`
}

// compact folds the committed counter changes of the namespace into its
// counters.
func (s *Store) compact(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, s.compactSQL(), s.cfg.ns)
	return s.wrap(ctx, "compact counters", err)
}

// wroteCounts notes that a write added counter changes, and starts a
// compaction in the background when the last one began compactEvery ago
// or more and none runs.
func (s *Store) wroteCounts() {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.compacting || s.stopped || time.Since(s.lastCompact) < compactEvery {
		return
	}
	s.compacting, s.lastCompact = true, time.Now()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		go func() { // Close ends a compaction in flight
			select {
			case <-s.closed:
				cancel()
			case <-ctx.Done():
			}
		}()
		_ = s.compact(ctx) // the next write tries again
		s.cmu.Lock()
		s.compacting = false
		s.cmu.Unlock()
	}()
}

package job

import (
	"context"
	"fmt"
	"time"

	"github.com/jobkit/job/store"
)

// LookupInstanceLogs returns the log records q selects, oldest first.
func (m *Manager) LookupInstanceLogs(ctx context.Context, q *Query) ([]*LogRecord, error) {
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	recs, err := m.store.LookupLogs(ctx, sq)
	if err != nil {
		return recs, fmt.Errorf("job: lookup logs: %w", err)
	}
	return recs, nil
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

// writeLogs writes one batch, retrying with backoff while the store fails
// and until Stop gives up; logs given up are counted as not recorded.
func (m *Manager) writeLogs(batch []*store.LogRecord) {
	defer func() {
		m.logsQueued.Add(-int64(len(batch)))
		m.signalChanged()
	}()
	for try := 0; ; try++ {
		var err error
		if err = m.writeCtx.Err(); err != nil {
			err = fmt.Errorf("stopped before the store took them: %w", err)
		} else {
			ctx, cancel := context.WithTimeout(m.writeCtx, 10*time.Second)
			err = m.store.AppendLogs(ctx, batch)
			cancel()
		}
		if err == nil {
			return
		}
		// The retry delay paces calls to the store: a real-time wait,
		// ended by Stop giving up.
		if m.writeCtx.Err() != nil || try >= 5 || !sleep(SystemClock{}, retryDelay(try), m.writeCtx.Done()) {
			m.log.Error("write instance logs; dropping them", "count", len(batch), "err", err)
			m.lastWriteErr.Store(&err)
			m.lostLogs.Add(int64(len(batch)))
			return
		}
	}
}

// appendLog implements logSink for the manager's instances.
func (m *Manager) appendLog(rec *store.LogRecord) {
	rec.Time = m.clock.Now()
	rec.Node = m.node
	m.logMu.RLock()
	if m.logCh != nil {
		m.logsQueued.Add(1)
		select {
		case m.logCh <- rec:
			m.logMu.RUnlock()
			return
		default: // the buffer is full: write through rather than drop
			m.logsQueued.Add(-1)
		}
	}
	m.logMu.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.store.AppendLogs(ctx, []*store.LogRecord{rec}); err != nil {
		m.log.Error("write instance log", "instance", rec.InstanceID, "err", err)
	}
}

// LogRecord is one message an executor wrote through its Instance.
type LogRecord = store.LogRecord

// LogLevel is the severity of a LogRecord.
type LogLevel = store.LogLevel

// The log levels.
const (
	LogDebug = store.LevelDebug
	LogInfo  = store.LevelInfo
	LogWarn  = store.LevelWarn
	LogError = store.LevelError
)
